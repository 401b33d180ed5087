package sim

import (
	"context"
	"slices"
	"time"

	"github.com/ordertimeout/ordertimeout/internal/retry"
	"github.com/ordertimeout/ordertimeout/pkg/events"
	"github.com/ordertimeout/ordertimeout/services/timeoutd"
	"github.com/ordertimeout/ordertimeout/services/timeoutd/internal/lease"
)

// postgres is the model of Postgres, under the world's lock.
type postgres struct {
	rows   map[string]*row
	leases [events.Partitions]leaseRow
	insts  map[string]*instance
	// down is true while Postgres restarts: every statement fails, and
	// every session is gone. started is when it last came back
	// (pg_postmaster_start_time()).
	down    bool
	started time.Time
	// thawed is non-nil while Postgres is frozen: every statement waits
	// for it to be closed. resumed is when a heartbeat or probe last
	// found the cluster silent for a third of the TTL. quiet is when the
	// quiet that the latest restart or resume ended began: the last time
	// an instance was seen before it.
	thawed  chan struct{}
	resumed time.Time
	quiet   time.Time
	// calm is when Postgres last went down, came back, froze or thawed.
	calm time.Time
}

func (pg *postgres) init() {
	pg.rows, pg.insts = map[string]*row{}, map[string]*instance{}
}

// row is a timeout row.
type row struct {
	version  int64
	state    timeoutd.State
	deadline time.Time
	plain    bool
	payload  []byte
	subject  string
	maxLate  time.Duration
}

// leaseRow is a partition's lease row.
type leaseRow struct {
	owner   string
	epoch   int64
	expires time.Time
}

// instance is an instance as the registry and crash detection see it.
type instance struct {
	expires time.Time
	serving bool
	// lostAt is when its sessions were all gone (zero: it has some).
	lostAt time.Time
	// beatAt is its last heartbeat's time, seenAt its last heartbeat's
	// or probe's.
	beatAt, seenAt time.Time
}

// LoseSessions records that id's sessions are all gone now (a crash, or the
// database dropping a cut-off instance's connections).
func (w *World) LoseSessions(id string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if in := w.pg.insts[id]; in != nil && in.lostAt.IsZero() {
		in.lostAt = time.Now()
	}
}

// RestartDB restarts Postgres for d: every session is gone at once, every
// statement meanwhile fails (one in its latency is rolled back), and when
// it is back, pg_postmaster_start_time() is now. Hung statements stay hung:
// their links drop what the server would have answered.
func (w *World) RestartDB(ctx context.Context, d time.Duration) {
	w.mu.Lock()
	w.pg.down, w.pg.calm = true, time.Now()
	for _, in := range w.pg.insts {
		if in.lostAt.IsZero() {
			in.lostAt = time.Now()
		}
	}
	w.mu.Unlock()
	retry.Sleep(ctx, d)
	w.mu.Lock()
	w.pg.down, w.pg.started, w.pg.quiet, w.pg.calm = false, time.Now(), w.lastSeen(), time.Now()
	w.mu.Unlock()
}

// FreezeDB freezes Postgres for d: every statement waits until it thaws,
// sessions and clock alive, as a stalled disk or a paused VM does.
func (w *World) FreezeDB(ctx context.Context, d time.Duration) {
	w.mu.Lock()
	thawed := make(chan struct{})
	w.pg.thawed, w.pg.calm = thawed, time.Now()
	w.mu.Unlock()
	retry.Sleep(ctx, d)
	w.mu.Lock()
	w.pg.thawed, w.pg.calm = nil, time.Now()
	close(thawed)
	w.mu.Unlock()
}

// graceExpiry returns when a row that expires at expires, of instance in
// (a lease of its, or its own row), expires as the lease statements see it,
// under w.mu: an instance whose last heartbeat came before Postgres
// (re)started lost its sessions to the restart, and its rows count for one
// TTL after the start, so that it renews its leases before another takes
// them; so do they after the cluster resumed from a silence (the store's
// graceExpiry). The fence, and so the check of fencing, take the lease's
// own expiry.
func (w *World) graceExpiry(expires time.Time, in *instance) time.Time {
	if at := later(w.pg.started, w.pg.resumed); in != nil && in.beatAt.Before(at) && expires.After(w.pg.quiet) {
		return later(expires, at.Add(w.cfg.TTL))
	}
	return expires
}

// see records a heartbeat or probe of in at now, under w.mu: one that
// finds no instance seen for a third of the TTL marks the cluster resumed
// from the quiet since the last instance was seen (the store's
// resumedCTE).
func (w *World) see(in *instance, now time.Time) {
	if last := w.lastSeen(); !last.IsZero() && now.Sub(last) >= w.cfg.TTL/3 {
		w.pg.resumed, w.pg.quiet = now, last
	}
	if in != nil {
		in.seenAt = now
	}
}

// lastSeen is the last time a heartbeat or probe of any instance was
// recorded, under w.mu.
func (w *World) lastSeen() time.Time {
	var last time.Time
	for _, o := range w.pg.insts {
		last = later(last, o.seenAt)
	}
	return last
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// statement runs fn as one statement of instance id against Postgres:
// atomically, at one instant, unless the link hangs it; a write may commit
// and lose its reply. A statement that runs proves id's sessions live.
func (w *World) statement(ctx context.Context, id string, write bool, fn func(now time.Time) error) error {
	w.mu.Lock()
	l := w.linkOf(id)
	cut, healed, latency, ambiguous := l.dbCut, l.healed, l.dbLatency+w.draw(), l.ambiguousP
	w.mu.Unlock()
	if cut {
		return hang(ctx, healed)
	}
	if latency > 0 && !retry.Sleep(ctx, latency) {
		return ctx.Err()
	}
	w.mu.Lock()
	for w.pg.thawed != nil { // frozen: held until it thaws
		thawed := w.pg.thawed
		w.mu.Unlock()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-thawed:
		}
		w.mu.Lock()
	}
	if l.dbCut { // cut during the latency
		w.mu.Unlock()
		return hang(ctx, healed)
	}
	if w.pg.down { // refused, or rolled back by the restart
		w.mu.Unlock()
		return errSimDown
	}
	if in := w.pg.insts[id]; in != nil {
		in.lostAt = time.Time{} // a session of its own is back
	}
	err := fn(time.Now())
	lost := write && err == nil && ambiguous > 0 && w.cfg.Rand() < ambiguous
	w.mu.Unlock()
	if lost {
		return errSimAmbiguous
	}
	return err
}

// fenced returns the partitions of parts whose lease fence does not hold
// for fence at now, under w.mu.
func (w *World) fenced(fence lease.Fence, parts []int, now time.Time) (refused []int) {
	for _, p := range parts {
		i := slices.IndexFunc(fence.Leases, func(l lease.Lease) bool { return l.Partition == p })
		if i < 0 {
			refused = append(refused, p)
			continue
		}
		l := w.pg.leases[p]
		if l.owner != fence.Owner || l.epoch != fence.Leases[i].Epoch || !l.expires.After(now) {
			refused = append(refused, p)
		}
	}
	return refused
}

// holds reports whether id holds p's lease at now, by the reference, under
// w.mu.
func (w *World) holds(id string, p int, now time.Time) bool {
	l := w.pg.leases[p]
	return l.owner == id && l.expires.After(now)
}

// gone reports whether instance id is dead by crash detection, under w.mu:
// its sessions gone for the crash grace, after a heartbeat since Postgres
// last started (before it, the restart took them).
func (w *World) gone(id string, now time.Time) bool {
	in := w.pg.insts[id]
	return in != nil && !in.lostAt.IsZero() && now.Sub(in.lostAt) >= w.cfg.CrashGrace && in.beatAt.After(w.pg.started)
}

// pending returns the number of pending rows.
func (w *World) pending() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, r := range w.pg.rows {
		if r.state == timeoutd.StatePending {
			n++
		}
	}
	return n
}
