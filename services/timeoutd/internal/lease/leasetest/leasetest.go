// Package leasetest is the behaviour suite of a lease table: one set of
// cases, run against the real one (package postgres, on Postgres) and
// against the simulation's model (package sim), so that the rules the
// simulation proves are the rules the database enforces. A divergence
// fails the suite on the side that differs.
//
// The cases cover what the membership relies on: acquire, renew, release,
// the live count of heartbeats and probes, crash detection and a reset
// that is not a crash, the grace after a restart of the database and
// after a silence of the whole cluster (and whom it does not bring back),
// the fence of every write, and the database's clock.
//
// The cases wait with time.Sleep for the database's clock to move: real
// time on Postgres, virtual time for a model run inside a testing/synctest
// bubble (Harness.Bubble).
package leasetest

import (
	"context"
	"testing"
	"time"

	"github.com/ordertimeout/ordertimeout/pkg/events"
	"github.com/ordertimeout/ordertimeout/services/timeoutd"
	"github.com/ordertimeout/ordertimeout/services/timeoutd/internal/lease"
)

// Backend is one lease table under test, on a database of its own, with
// the powers over that database the cases need.
type Backend interface {
	// Instance returns the lease table as instance id reaches it, on
	// sessions of its own (named after id, as timeoutd names them). A case
	// that crashed or restarted takes a new one: what a process that
	// reconnects does.
	Instance(t *testing.T, id string) lease.Table
	// Crash closes every session of id's tables at once, as the death of
	// its process does.
	Crash(t *testing.T, id string)
	// Restart restarts the database: every session is lost, and
	// pg_postmaster_start_time() is when it is back, before Restart
	// returns. Only cases with Case.Restarts call it.
	Restart(t *testing.T)
	// Write performs the store's fenced write named kind (one of
	// WriteKinds) for one key in each partition of parts, under fence, and
	// returns the partitions the fence refused.
	Write(t *testing.T, kind string, fence lease.Fence, parts []int) (refused []int)
	// Now reads the database's clock.
	Now(t *testing.T) time.Time
	// CrashGrace is how long an instance's sessions must stay gone before
	// it is dead.
	CrashGrace() time.Duration
}

// WriteKinds are the store's fenced writes the fence cases exercise:
// "apply" (Store.Apply of a set) and "mark" (Store.MarkFired of a pending
// row).
var WriteKinds = []string{"apply", "mark"}

// Sets returns, for Backend.Write's "apply", a set of KeyIn(p) at version
// 1 for each partition of parts, due in an hour.
func Sets(parts []int) []events.Command {
	var cmds []events.Command
	for _, p := range parts {
		k := KeyIn(p)
		cmds = append(cmds, events.Command{Schema: events.SchemaVersion, Kind: events.KindSet, Key: k, Version: 1,
			Deadline: time.Now().Add(time.Hour).UTC(), FireSubject: events.OrderCancelSubject(k)})
	}
	return cmds
}

// Dues returns, for Backend.Write's "mark", KeyIn(p) at version 1 due now
// for each partition of parts.
func Dues(parts []int) []timeoutd.Due {
	var due []timeoutd.Due
	for _, p := range parts {
		due = append(due, timeoutd.Due{Key: KeyIn(p), Version: 1, Deadline: time.Now()})
	}
	return due
}

// Options is what a case needs of its backend.
type Options struct {
	// Restarts is true for a case that restarts the database: it needs a
	// database server of its own.
	Restarts bool
}

// Harness makes the backends of one implementation.
type Harness struct {
	// New returns a backend on a new, migrated, empty database.
	New func(t *testing.T, o Options) Backend
	// Bubble runs a case: inside a testing/synctest bubble for a model
	// whose clock is the bubble's; nil runs it as it is.
	Bubble func(t *testing.T, f func(t *testing.T))
	// Parallel runs the cases in parallel (on a real database, whose
	// waits are real time).
	Parallel bool
}

// Run runs every case against h's implementation.
func Run(t *testing.T, h Harness) {
	for _, c := range Cases {
		t.Run(c.Name, func(t *testing.T) {
			if h.Parallel {
				t.Parallel()
			}
			run := func(t *testing.T) { c.Run(t, h.New(t, Options{Restarts: c.Restarts})) }
			if h.Bubble != nil {
				h.Bubble(t, run)
				return
			}
			run(t)
		})
	}
}

// TTL is the lease TTL of the cases: long enough for a heartbeat and an
// acquisition on a loaded machine, short enough to wait out a few times.
const TTL = 2 * time.Second

var ctx = context.Background()
