package sim

import (
	"context"
	"fmt"
	"maps"
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
	// down counts the outages under way (a restart, a failover): while
	// one is, every statement fails, and every session is gone. started
	// is pg_postmaster_start_time() of the server that answers: when it
	// last came back from a restart, or when the standby it was promoted
	// from started (before the promotion).
	down    int
	started time.Time
	// offset is the database's clock's offset from the reference: its
	// now() is the reference plus offset, a promotion's standby's clock
	// another. Every time of this model is by it, but calm (the
	// checker's, by the reference).
	offset time.Duration
	// primary is the node that answers (0 or 1, the other the synchronous
	// standby), standbyStarted the standby's pg_postmaster_start_time().
	primary        int
	standbyStarted time.Time
	// inflight are the statements sent and not run yet, in the order
	// sent: a failure of the primary ends each, a write among them
	// committed or not.
	inflight []*flight
	// thawed is non-nil while Postgres is frozen: every statement waits
	// for it to be closed. resumed is when a heartbeat or probe last
	// found the cluster silent for a third of the TTL. quiet is when the
	// quiet that the latest restart or resume ended began: the last time
	// an instance was seen before it.
	thawed  chan struct{}
	resumed time.Time
	quiet   time.Time
	// calm is when Postgres last went down, came back, froze or thawed,
	// by the reference.
	calm time.Time
}

// flight is a statement in flight: sent, not run yet.
type flight struct {
	write bool
	fn    func(now time.Time) error
	// failed is set when the primary failed while it was in flight, and
	// committed when it was a write that had reached the standby.
	failed, committed bool
}

// dbNow returns the database's clock, now(), under w.mu.
func (w *World) dbNow() time.Time { return time.Now().Add(w.pg.offset) }

// server names the server that answers, as the real heartbeat does
// (address:port@pg_postmaster_start_time()), under w.mu: another name
// after a restart or a promotion.
func (w *World) server() string {
	return fmt.Sprintf("10.0.0.%d:5432@%s", 1+w.pg.primary, w.pg.started.Format(time.RFC3339Nano))
}

// init makes the model of a Postgres running for an hour, its standby for
// half an hour.
func (pg *postgres) init() {
	pg.rows, pg.insts = map[string]*row{}, map[string]*instance{}
	pg.started, pg.standbyStarted = time.Now().Add(-time.Hour), time.Now().Add(-time.Hour/2)
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
		in.lostAt = w.dbNow()
	}
}

// RestartDB restarts Postgres for d: every session is gone at once, every
// statement meanwhile fails (one in its latency is rolled back), and when
// it is back, pg_postmaster_start_time() is now. Hung statements stay hung:
// their links drop what the server would have answered.
func (w *World) RestartDB(ctx context.Context, d time.Duration) {
	w.mu.Lock()
	w.pg.down++
	w.pg.calm = time.Now()
	w.loseAll()
	w.mu.Unlock()
	retry.Sleep(ctx, d)
	w.mu.Lock()
	w.pg.down--
	w.pg.started, w.pg.quiet, w.pg.calm = w.dbNow(), w.lastSeen(), time.Now()
	w.mu.Unlock()
}

// loseAll records that every session is gone now, under w.mu, and
// returns the instances that had one.
func (w *World) loseAll() (had []*instance) {
	for _, id := range slices.Sorted(maps.Keys(w.pg.insts)) {
		if in := w.pg.insts[id]; in.lostAt.IsZero() {
			in.lostAt = w.dbNow()
			had = append(had, in)
		}
	}
	return had
}

// Promote fails Postgres over to its synchronous standby (Patroni,
// synchronous_mode_strict). The primary fails at once: every session is
// gone, and each statement in flight ends in an error, a write among
// them committed or not (it had reached the standby, or it had not), by
// the world's draw. Nothing answers for down (the leader key's TTL and
// the promotion); then the standby does, as the primary: every commit on
// it (none acknowledged is lost), its clock off the old primary's by
// step, its name another, and its pg_postmaster_start_time() its own
// start, before the promotion (no restart to the lease rules). The crash
// detection sees every instance without a session from its first
// statement, when the new primary answers. The old primary rejoins as
// the standby.
func (w *World) Promote(ctx context.Context, down, step time.Duration) {
	w.mu.Lock()
	failedAt, committed := w.dbNow(), 0
	for _, f := range w.pg.inflight {
		f.failed = true
		if f.write && w.cfg.Rand() < 0.5 {
			f.committed = true
			_ = f.fn(failedAt) // its error is lost with the reply
			committed++
		}
	}
	w.pg.inflight = w.pg.inflight[:0]
	w.pg.down++
	w.pg.calm = time.Now()
	had := w.loseAll()
	w.hist.add(time.Now(), "failed", "pg", "-", 0, fmt.Sprintf("primary %s, %d writes in flight committed", w.server(), committed))
	w.mu.Unlock()
	retry.Sleep(ctx, down)
	w.mu.Lock()
	w.pg.down--
	w.pg.offset += step
	back := w.dbNow()
	for _, in := range had {
		if !in.lostAt.IsZero() {
			in.lostAt = back
		}
	}
	w.pg.primary = 1 - w.pg.primary
	w.pg.started, w.pg.standbyStarted = w.pg.standbyStarted, back
	w.pg.calm = time.Now()
	w.hist.add(time.Now(), "promoted", "pg", "-", 0, fmt.Sprintf("primary %s, its clock %+v from the old one's (%v from the reference)", w.server(), step, w.pg.offset))
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
// under w.mu: every instance lost its sessions to a restart of Postgres,
// and the rows live when the quiet began count for one TTL after the
// start, so that their owners renew their leases before another takes
// them, even one whose heartbeat came back before its renewal did; so do
// they after the cluster resumed from a silence (the store's graceExpiry).
// None has a grace when no instance was seen before the quiet (a new
// database). The fence, and so the check of fencing, take the lease's own
// expiry.
func (w *World) graceExpiry(expires time.Time, in *instance) time.Time {
	if at := later(w.pg.started, w.pg.resumed); in != nil && !w.pg.quiet.IsZero() && expires.After(w.pg.quiet) {
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
// From its send to its run it is in flight: a promotion meanwhile ends it
// (Promote).
func (w *World) statement(ctx context.Context, id string, write bool, fn func(now time.Time) error) error {
	w.mu.Lock()
	l := w.linkOf(id)
	cut, healed, latency, ambiguous := l.dbCut, l.healed, l.dbLatency+w.draw(), l.ambiguousP
	if cut {
		w.mu.Unlock()
		return hang(ctx, healed)
	}
	f := &flight{write: write, fn: fn}
	w.pg.inflight = append(w.pg.inflight, f)
	w.mu.Unlock()
	landed := func() {
		w.pg.inflight = slices.DeleteFunc(w.pg.inflight, func(o *flight) bool { return o == f })
	}
	if latency > 0 && !retry.Sleep(ctx, latency) {
		w.mu.Lock()
		landed()
		w.mu.Unlock()
		return ctx.Err()
	}
	w.mu.Lock()
	for w.pg.thawed != nil { // frozen: held until it thaws
		thawed := w.pg.thawed
		w.mu.Unlock()
		select {
		case <-ctx.Done():
			w.mu.Lock()
			landed()
			w.mu.Unlock()
			return ctx.Err()
		case <-thawed:
		}
		w.mu.Lock()
	}
	landed()
	if f.failed { // the primary failed meanwhile: committed or not, the reply is lost
		w.mu.Unlock()
		if write {
			return errSimAmbiguous
		}
		return errSimCut
	}
	if l.dbCut { // cut during the latency
		w.mu.Unlock()
		return hang(ctx, healed)
	}
	if w.pg.down > 0 { // refused, or rolled back by the restart
		w.mu.Unlock()
		return errSimDown
	}
	if in := w.pg.insts[id]; in != nil {
		in.lostAt = time.Time{} // a session of its own is back
	}
	err := fn(w.dbNow())
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

// holds reports whether id holds p's lease now, by the database's clock,
// under w.mu.
func (w *World) holds(id string, p int) bool {
	l := w.pg.leases[p]
	return l.owner == id && l.expires.After(w.dbNow())
}

// gone reports whether instance id is dead by crash detection, under w.mu:
// its sessions gone for the crash grace, after a heartbeat since Postgres
// last started or the cluster last resumed from a silence (before it, the
// restart or the failover took them, and it may still be reconnecting),
// and a TTL after that start or resume (its first heartbeat there may
// have been given up on by its client, which reconnects through the same
// failover): the store's sessionlessSQL.
func (w *World) gone(id string, now time.Time) bool {
	in := w.pg.insts[id]
	since := later(w.pg.started, w.pg.resumed)
	return in != nil && !in.lostAt.IsZero() && now.Sub(in.lostAt) >= w.cfg.CrashGrace && in.beatAt.After(since) &&
		!now.Before(since.Add(w.cfg.TTL))
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
