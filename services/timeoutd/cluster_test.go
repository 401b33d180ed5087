package timeoutd

import (
	"slices"
	"testing"

	"github.com/ordertimeout/ordertimeout/services/timeoutd/internal/lease"
)

func TestAppendPartitions(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		parts, add []int
		want       []int
	}{
		{"nothing to add", []int{3}, nil, []int{3}},
		{"into none", nil, []int{5, 1, 5}, []int{5, 1}},
		{"only the new ones, in order first seen", []int{2, 7}, []int{7, 9, 2, 4, 9}, []int{2, 7, 9, 4}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := appendPartitions(tt.parts, tt.add...); !slices.Equal(got, tt.want) {
				t.Fatalf("appendPartitions(%v, %v) = %v, want %v", tt.parts, tt.add, got, tt.want)
			}
		})
	}
}

// TestOwnershipReadsTheRulesThenTheOwnersGate: a partition's owner may
// fire it only when its lease is held by the rules and its owner's gate,
// as its last heartbeat published it, lets it; otherwise the view says
// why not.
func TestOwnershipReadsTheRulesThenTheOwnersGate(t *testing.T) {
	t.Parallel()
	instances := []lease.Instance{
		{ID: "a", Partitions: []int{0, 1}, Info: []byte(`{"opening":[1]}`)},
		{ID: "b", Partitions: []int{2}, Info: []byte(`{"blocked":"untrusted"}`)},
		{ID: "c", Partitions: []int{3}, Info: []byte(`{"blocked":"out_of_contact"}`)},
	}
	tests := []struct {
		lease lease.PartitionLease
		want  lease.Why
	}{
		{lease.PartitionLease{Partition: 0, Owner: "a", Epoch: 1, State: lease.LeaseHeld}, ""},
		{lease.PartitionLease{Partition: 1, Owner: "a", Epoch: 1, State: lease.LeaseHeld}, lease.Opening},
		{lease.PartitionLease{Partition: 2, Owner: "b", Epoch: 1, State: lease.LeaseHeld}, lease.Untrusted},
		{lease.PartitionLease{Partition: 3, Owner: "c", Epoch: 1, State: lease.LeaseHeld}, lease.OutOfContact},
		{lease.PartitionLease{Partition: 4, Owner: "a", Epoch: 1, State: lease.LeaseGrace}, InGrace},
		{lease.PartitionLease{Partition: 5, Owner: "gone", Epoch: 1, State: lease.LeaseHeld}, lease.Untrusted},
		{lease.PartitionLease{Partition: 6, Owner: "a", Epoch: 1, State: lease.LeaseExpired}, lease.Unowned},
		{lease.PartitionLease{Partition: 7, Owner: "d", Epoch: 1, State: lease.LeaseOrphaned}, lease.Unowned},
		{lease.PartitionLease{Partition: 8, State: lease.LeaseFree}, lease.Unowned},
	}
	var leases []lease.PartitionLease
	for _, tt := range tests {
		leases = append(leases, tt.lease)
	}
	var v clusterView
	v.set("a", instances, leases)
	got := v.ownership()
	for i, tt := range tests {
		if got[i].Partition != tt.lease.Partition || got[i].Why != tt.want || got[i].Lease != tt.lease.State || got[i].Owner != tt.lease.Owner {
			t.Errorf("partition %d (%s, owner %q): %+v, want why %q", tt.lease.Partition, tt.lease.State, tt.lease.Owner, got[i], tt.want)
		}
	}
}
