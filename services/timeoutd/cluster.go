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
}

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
	gen     atomic.Uint64
}

// set replaces the view with instances, read just now.
func (v *clusterView) set(self string, instances []lease.Instance) {
	members := make([]Member, len(instances))
	for i, in := range instances {
		members[i] = Member{ID: in.ID, StartedAt: in.StartedAt, Partitions: in.Partitions, Self: in.ID == self}
		_ = json.Unmarshal(in.Info, &members[i].Info) // an instance of another version may publish less: zeros
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if !slices.EqualFunc(v.members, members, func(a, b Member) bool {
		return a.ID == b.ID && a.StartedAt.Equal(b.StartedAt) && slices.Equal(a.Partitions, b.Partitions) && a.Info == b.Info
	}) {
		v.members = members
		v.gen.Add(1)
	}
}

func (v *clusterView) get() []Member {
	v.mu.Lock()
	defer v.mu.Unlock()
	return slices.Clone(v.members)
}
