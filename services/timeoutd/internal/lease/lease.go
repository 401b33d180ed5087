// Package lease is timeoutd's membership: the partition leases an instance
// holds, the epochs that fence its writes, its contact with Postgres, and
// the loop that keeps its share of the partitions.
//
//   - [Ownership] is what this instance owns. Ingest, the fire path and
//     the janitor ask it once per batch, for a [Gate]: for the batch's
//     partitions, whether each may fire now and why not ([Why]), the
//     [Fence] a write presents to the store, each partition's fence in the
//     expiry stream, and for the fire path a pin (a handover waits for its
//     Close); the fire path checks it again before it publishes
//     ([Gate.Recheck]). [Ownership.View] is the same answer for every
//     partition, for the cluster view.
//   - [Membership] heartbeats, renews, rebalances, takes partitions over
//     through [Partitions] (the daemon's recovery, consumers and schedule)
//     and drops the lost ones; it measures the clock against Postgres's.
//   - [Table] is the lease table and the instance registry in Postgres
//     (package postgres implements it); every expiry is by the database's
//     clock.
//
// The fence's SQL lives with the store (package postgres); the rules it
// enforces are here: a write for a partition goes through only while its
// lease row still holds the writer at the epoch of its [Fence].
package lease

import (
	"context"
	"time"

	"github.com/ordertimeout/ordertimeout/pkg/events"
)

// Lease is an instance's right to act for a partition: the partition and
// the epoch (the fencing token) it was granted at. Epochs only grow.
type Lease struct {
	Partition int
	Epoch     int64
}

// Fence is what every write for partitions presents to the store: the
// writer's instance id and its leases. The store writes for a partition
// only while its lease row still holds this owner and epoch and has not
// expired, in the same transaction as the write.
type Fence struct {
	Owner  string
	Leases []Lease
}

// Table is the partition lease table and the instance registry; package
// postgres implements it on a connection pool of its own, so that lease
// calls never queue behind ingest and fire. Every expiry is computed by the
// database's clock, never an instance's. An instance whose database
// sessions are all gone (it crashed: the database saw its connections
// close) is dead at once, and its partitions are orphaned: takeable at
// once, without waiting for their leases to expire; an instance only cut
// off or paused keeps its sessions, and its leases expire. After the
// database restarts, every lease and instance counts as live for one TTL
// more, so that the instances renew their own before any is taken. All
// methods are safe for concurrent use.
type Table interface {
	// Heartbeat records instance id as live until ttl from now, with info
	// (what the cluster view shows of it) and whether it is serving (it
	// can take partitions: false while it cannot reach NATS or shuts
	// down), and returns what it learnt of the cluster. Beat.Live, and
	// Probe's live, count only the serving instances besides the caller,
	// so that the partitions one that is not serving hands over find room
	// in the others' share.
	Heartbeat(ctx context.Context, id string, ttl time.Duration, info []byte, serving bool) (Beat, error)
	// Probe returns, writing nothing, the number of live instances and of
	// partitions takeable at once, as Heartbeat would: a cheap look,
	// between rounds, for partitions released or orphaned by a crash, to
	// take over at once.
	Probe(ctx context.Context, id string, ttl time.Duration) (live, takeable int, err error)
	// Acquire grants id up to n partitions among those free, expired,
	// orphaned, or recorded as id's own but not in held (a restart under
	// the same id), skipping rows a write of their owner holds locked; each
	// grant bumps the epoch and expires ttl from now.
	Acquire(ctx context.Context, id string, n int, held []int, ttl time.Duration) ([]Lease, error)
	// Renew extends, to ttl from now, the leases of held that id still
	// holds at their epoch, and returns those. A lease that expired and was
	// taken by nobody since (its epoch unchanged) is renewed too: nobody
	// wrote for its partition meanwhile, and the fence refused this
	// instance's own writes while it was expired.
	Renew(ctx context.Context, id string, held []Lease, ttl time.Duration) ([]Lease, error)
	// Release gives up leases at once (they expire now; the epoch stays, the
	// next grant bumps it).
	Release(ctx context.Context, id string, leases []Lease) error
	// Leave ends instance id's registration at once: it no longer counts
	// as live, nor is listed. What the rules of a silence read of it (when
	// it was last seen) stays.
	Leave(ctx context.Context, id string) error
	// Instances returns the live instances with their info and the
	// partitions each holds, by id.
	Instances(ctx context.Context) ([]Instance, error)
	// Ownership returns every partition's lease as the rules read it, by
	// partition, for instances with TTL ttl: what the table's expiry alone
	// does not tell (the grace after a restart or a silence, crash
	// detection).
	Ownership(ctx context.Context, ttl time.Duration) ([]PartitionLease, error)
}

// PartitionLease is a partition's lease as the rules read it.
type PartitionLease struct {
	Partition int
	// Owner is the instance the row names ("" when free), at Epoch.
	Owner string
	Epoch int64
	State LeaseState
	// Left is how long until it expires by the rules (0 when takeable).
	Left time.Duration
}

// LeaseState is what a lease row is, by the rules.
type LeaseState string

// The states of a lease.
const (
	// LeaseHeld: live by its own expiry.
	LeaseHeld LeaseState = "held"
	// LeaseGrace: expired by its own expiry, live by the grace after a
	// restart of the database or a silence of the cluster: its owner
	// renews it before anyone may take it.
	LeaseGrace LeaseState = "grace"
	// LeaseExpired: takeable, expired by the rules.
	LeaseExpired LeaseState = "expired"
	// LeaseOrphaned: takeable at once, its owner crashed (its sessions
	// gone for the crash grace).
	LeaseOrphaned LeaseState = "orphaned"
	// LeaseFree: released, or never granted.
	LeaseFree LeaseState = "free"
)

// Beat is what a heartbeat learns of the cluster.
type Beat struct {
	// Live is the number of live instances serving (see
	// Table.Heartbeat), itself included.
	Live int
	// NextExpiry is how long until the first lease held by another
	// instance expires (0 when none): the moment a dead instance's
	// partitions can be taken.
	NextExpiry time.Duration
	// Takeable is the number of partitions takeable at once: free
	// (released), or orphaned by a dead instance.
	Takeable int
	// DBTime is the database's clock when it ran the heartbeat.
	DBTime time.Time
	// Server names the database server that ran it, for as long as it
	// runs: another name after a failover to a standby (whose clock is
	// another) or a restart.
	Server string
	// StandbyLag bounds how far the clock of the server's slowest standby
	// is behind its own (0 with none behind, none streaming, or without
	// the right to read their replies): the server's clock minus the
	// standby's at its last reply, which also counts the reply's age, so
	// it is never below the true lag.
	StandbyLag time.Duration
}

// Instance is one live instance as the lease table knows it.
type Instance struct {
	ID         string
	StartedAt  time.Time
	Partitions []int
	// Info is what the instance published with its heartbeat (JSON).
	Info []byte
}

// PartitionsOf returns the partitions of leases.
func PartitionsOf(leases []Lease) []int {
	out := make([]int, len(leases))
	for i, l := range leases {
		out[i] = l.Partition
	}
	return out
}

// shareOf is an instance's share of the partitions among live instances.
func shareOf(live int) int { return (events.Partitions + max(live, 1) - 1) / max(live, 1) }
