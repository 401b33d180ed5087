package timeoutd

import (
	"encoding/json"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ordertimeout/ordertimeout/services/timeoutd/internal/lease"
)

// The cluster as this instance sees it: what its heartbeat publishes of it
// (InstanceInfo) and the live instances its last membership round read
// (internal/lease runs the membership).

// appendPartitions appends to parts each partition of add it does not hold
// yet, so parts lists a batch's distinct partitions in the order first
// seen (a batch spans few partitions: a scan is cheaper than a set).
func appendPartitions(parts []int, add ...int) []int {
	for _, p := range add {
		if !slices.Contains(parts, p) {
			parts = append(parts, p)
		}
	}
	return parts
}

// InstanceInfo is what an instance's heartbeat publishes of itself for the
// cluster view (JSON in timeoutd_instances.info).
type InstanceInfo struct {
	// Pending is the number of timeouts in its wheel.
	Pending int64 `json:"pending"`
	// Fired counts its fires and misses since it started.
	Fired       uint64  `json:"fired"`
	FiredPerSec float64 `json:"fired_per_sec"`
	// LatenessP50 and LatenessMax are over its recent expiries.
	LatenessP50 time.Duration `json:"lateness_p50_ns"`
	LatenessMax time.Duration `json:"lateness_max_ns"`
	// Blocked is why it may fire none of its partitions ("" when it may):
	// lease.Untrusted or lease.OutOfContact, and Opening the partitions it
	// owns whose takeover is not done: its gate (lease.Ownership.View).
	Blocked lease.Why `json:"blocked,omitempty"`
	Opening []int     `json:"opening,omitempty"`
}

// PartitionOwnership is a partition's owner as it really is.
type PartitionOwnership struct {
	Partition int
	Owner     string // "" when no lease holds it
	Epoch     int64
	// Lease is its lease by the rules.
	Lease lease.LeaseState
	// Why is why nobody may fire it now ("" when its owner may): Unowned
	// (free, expired, orphaned), InGrace (its owner must renew it first),
	// or its owner's reason (lease.Untrusted, lease.OutOfContact,
	// lease.Opening).
	Why lease.Why
}

// InGrace is why a partition in the grace after a restart or a silence
// may not be fired: its owner renews its lease first.
const InGrace lease.Why = "in_grace"

// Member is a live instance of the cluster as the cluster view shows it.
type Member struct {
	ID         string
	StartedAt  time.Time
	Partitions []int
	// Self marks the instance answering.
	Self bool
	Info InstanceInfo
}

// clusterView is the cluster as this instance's last membership round read
// it; gen changes whenever the view does.
type clusterView struct {
	mu      sync.Mutex
	members []Member
	leases  []lease.PartitionLease
	gen     atomic.Uint64
}

// set replaces the view with instances and leases, read just now.
func (v *clusterView) set(self string, instances []lease.Instance, leases []lease.PartitionLease) {
	members := make([]Member, len(instances))
	for i, in := range instances {
		members[i] = Member{ID: in.ID, StartedAt: in.StartedAt, Partitions: in.Partitions, Self: in.ID == self}
		_ = json.Unmarshal(in.Info, &members[i].Info) // an instance of another version may publish less: zeros
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	same := slices.EqualFunc(v.members, members, func(a, b Member) bool {
		return a.ID == b.ID && a.StartedAt.Equal(b.StartedAt) && slices.Equal(a.Partitions, b.Partitions) &&
			a.Info.Pending == b.Info.Pending && a.Info.Fired == b.Info.Fired && a.Info.FiredPerSec == b.Info.FiredPerSec &&
			a.Info.LatenessP50 == b.Info.LatenessP50 && a.Info.LatenessMax == b.Info.LatenessMax &&
			a.Info.Blocked == b.Info.Blocked && slices.Equal(a.Info.Opening, b.Info.Opening)
	}) && slices.EqualFunc(v.leases, leases, func(a, b lease.PartitionLease) bool {
		return a.Owner == b.Owner && a.Epoch == b.Epoch && a.State == b.State
	})
	if !same {
		v.members, v.leases = members, leases
		v.gen.Add(1)
	}
}

// ownership derives every partition's owner from the leases and what
// the members published: the lease rules first, then the owner's gate.
func (v *clusterView) ownership() []PartitionOwnership {
	v.mu.Lock()
	defer v.mu.Unlock()
	out := make([]PartitionOwnership, len(v.leases))
	for i, l := range v.leases {
		o := PartitionOwnership{Partition: l.Partition, Owner: l.Owner, Epoch: l.Epoch, Lease: l.State}
		switch l.State {
		case lease.LeaseHeld:
			o.Why = lease.Untrusted // held by an instance no longer listed live: it beats no more
			if j := slices.IndexFunc(v.members, func(m Member) bool { return m.ID == l.Owner }); j >= 0 {
				info := v.members[j].Info
				switch {
				case info.Blocked != "":
					o.Why = info.Blocked
				case slices.Contains(info.Opening, l.Partition):
					o.Why = lease.Opening
				default:
					o.Why = ""
				}
			}
		case lease.LeaseGrace:
			o.Why = InGrace
		default:
			o.Why = lease.Unowned
		}
		out[i] = o
	}
	return out
}

func (v *clusterView) get() []Member {
	v.mu.Lock()
	defer v.mu.Unlock()
	return slices.Clone(v.members)
}
