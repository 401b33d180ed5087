package http

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ordertimeout/ordertimeout/services/timeoutd"
	"github.com/ordertimeout/ordertimeout/services/timeoutd/internal/lease"
)

// watchedFake holds deadlines and partitions for Watch's gauges.
type watchedFake struct {
	now       time.Time
	deadlines []time.Time
	owned     []int
}

func (f *watchedFake) Stats() timeoutd.Stats { return timeoutd.Stats{Now: f.now} }
func (f *watchedFake) Pending() int          { return len(f.deadlines) }
func (f *watchedFake) IsReady() bool         { return true }
func (f *watchedFake) Owned() []int          { return f.owned }

// Ownership: partition 3 may fire, 9 opens, 60 waits in the grace, the
// others are nobody's.
func (f *watchedFake) Ownership() []timeoutd.PartitionOwnership {
	out := make([]timeoutd.PartitionOwnership, 64)
	for p := range out {
		out[p] = timeoutd.PartitionOwnership{Partition: p, Lease: lease.LeaseFree, Why: lease.Unowned}
	}
	out[3] = timeoutd.PartitionOwnership{Partition: 3, Owner: "a", Epoch: 1, Lease: lease.LeaseHeld}
	out[9] = timeoutd.PartitionOwnership{Partition: 9, Owner: "a", Epoch: 1, Lease: lease.LeaseHeld, Why: lease.Opening}
	out[60] = timeoutd.PartitionOwnership{Partition: 60, Owner: "b", Epoch: 1, Lease: lease.LeaseGrace, Why: timeoutd.InGrace}
	return out
}

// Deadlines counts as the service does: Due is every deadline before the
// second of now.
func (f *watchedFake) Deadlines(now time.Time) timeoutd.Deadlines {
	d := timeoutd.Deadlines{From: now.Truncate(time.Second), Pending: int64(len(f.deadlines))}
	for _, t := range f.deadlines {
		if t.Before(d.From) {
			d.Due++
		}
	}
	return d
}

func TestWatchCountsOverdueTimeoutsOwnedAndClusterPartitions(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	f := &watchedFake{now: now, owned: []int{3, 9, 60}, deadlines: []time.Time{
		now.Add(time.Hour),                     // not due
		now.Add(-2 * time.Second),              // due, younger than every bound
		now.Add(-30 * time.Second),             // older than 10s
		now.Add(-5 * time.Minute),              // older than 1m
		now.Add(-2 * time.Hour),                // older than 10m
		now.Add(-10*time.Minute - time.Second), // older than 10m
	}}
	reg := prometheus.NewRegistry()
	NewMetrics(reg).Watch(f)
	got := gauges(t, reg)
	for name, want := range map[string]float64{
		`timeoutd_partitions_owned`:                    3,
		`timeoutd_overdue_timeouts{older_than="10s"}`:  4,
		`timeoutd_overdue_timeouts{older_than="1m"}`:   3,
		`timeoutd_overdue_timeouts{older_than="10m"}`:  2,
		`timeoutd_cluster_partitions{why="may_fire"}`:  1,
		`timeoutd_cluster_partitions{why="opening"}`:   1,
		`timeoutd_cluster_partitions{why="in_grace"}`:  1,
		`timeoutd_cluster_partitions{why="unowned"}`:   61,
		`timeoutd_cluster_partitions{why="untrusted"}`: 0,
	} {
		if v, ok := got[name]; !ok || v != want {
			t.Errorf("%s = %v (present %v), want %v", name, v, ok, want)
		}
	}
}

// gauges returns the value of every gauge of reg by name{label="value"}
// (0 for the other kinds).
func gauges(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			name := mf.GetName()
			for _, l := range m.GetLabel() {
				name += "{" + l.GetName() + `="` + l.GetValue() + `"}`
			}
			out[name] = m.GetGauge().GetValue()
		}
	}
	return out
}
