package view

import (
	"testing"
	"time"

	"github.com/ordertimeout/ordertimeout/services/timeoutd/api"
)

func TestRanges(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		parts []int
		want  string
	}{
		{nil, "none"},
		{[]int{7}, "7"},
		{[]int{0, 1, 2, 5, 7, 8}, "0-2, 5, 7-8"},
		{[]int{3, 5, 7}, "3, 5, 7"},
		{[]int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21}, "0-21"},
	} {
		if got := Ranges(tt.parts); got != tt.want {
			t.Errorf("Ranges(%v) = %q, want %q", tt.parts, got, tt.want)
		}
	}
}

func TestMembers(t *testing.T) {
	t.Parallel()
	var s State
	s.ApplySnapshot(api.Snapshot{Cluster: api.Cluster{Partitions: 64, Instances: []api.Instance{
		{ID: "timeoutd-1", Self: true, Partitions: []int{0, 1, 2}, Pending: 12345, FiredPerSec: 42, LatenessP50Ms: 1.5, LatenessMaxMs: 2300},
		{ID: "timeoutd-2", Partitions: []int{3, 9}},
	}}}, time.Unix(0, 0))
	if got, want := s.ClusterSummary(), "2 instances, 5 of 64 partitions owned"; got != want {
		t.Errorf("summary %q, want %q", got, want)
	}
	s.ApplySnapshot(api.Snapshot{Cluster: api.Cluster{Partitions: 64, MayFire: 60, Instances: []api.Instance{{ID: "timeoutd-1"}}, Ownership: append(
		make([]api.PartitionOwner, 60),
		api.PartitionOwner{Why: "opening"}, api.PartitionOwner{Why: "in_grace"}, api.PartitionOwner{Why: "in_grace"}, api.PartitionOwner{Why: "unowned"})}}, time.Unix(0, 0))
	for i := range 60 {
		s.Cluster.Ownership[i].MayFire = true
	}
	if got, want := s.ClusterSummary(), "1 instance, 60 of 64 partitions may fire, 1 opening, 2 in grace, 1 unowned"; got != want {
		t.Errorf("summary %q, want %q", got, want)
	}
	s.ApplySnapshot(api.Snapshot{Cluster: api.Cluster{Partitions: 64, Instances: []api.Instance{
		{ID: "timeoutd-1", Self: true, Partitions: []int{0, 1, 2}, Pending: 12345, FiredPerSec: 42, LatenessP50Ms: 1.5, LatenessMaxMs: 2300},
		{ID: "timeoutd-2", Partitions: []int{3, 9}},
	}}}, time.Unix(0, 0))
	ms := s.Members()
	want := Member{ID: "timeoutd-1", Self: true, Partitions: "3", Ranges: "0-2", Pending: "12,345", FiredRate: "42.0/s", LatencyP50: "1.5 ms", LatencyMax: "2.3 s"}
	if len(ms) != 2 || ms[0] != want {
		t.Fatalf("members %+v, want first %+v", ms, want)
	}
	if ms[1].Ranges != "3, 9" || ms[1].Self {
		t.Errorf("second member %+v", ms[1])
	}
}
