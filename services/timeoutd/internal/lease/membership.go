package lease

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ordertimeout/ordertimeout/internal/retry"
	"github.com/ordertimeout/ordertimeout/internal/startstop"
	"github.com/ordertimeout/ordertimeout/internal/testsignal"
	"github.com/ordertimeout/ordertimeout/services/timeoutd/internal/waitlock"
)

// Config is the membership's settings; timeoutd's Config validates them.
type Config struct {
	// InstanceID names this instance in the lease table.
	InstanceID string
	// TTL is how long a lease lasts after a grant or a renewal, by the
	// database's clock.
	TTL time.Duration
	// RenewInterval is the pause between rounds; below RenewDeadline.
	RenewInterval time.Duration
	// ProbeInterval is how often, between rounds, a probe looks for
	// partitions takeable at once (and proves contact with Postgres).
	ProbeInterval time.Duration
	Logger        *slog.Logger
}

// RenewDeadline is how long after sending a renewal the leases are trusted
// here without another: two thirds of TTL.
func (c Config) RenewDeadline() time.Duration { return c.TTL * 2 / 3 }

// Partitions is what a takeover loads and a loss drops: the daemon's
// recovery, command consumers and schedule.
type Partitions interface {
	// Load puts the pending timeouts of the leases' partitions in the
	// schedule and starts consuming their commands, skipping a partition
	// no longer owned at its lease's epoch (Ownership.Epoch). It returns
	// the takeover, also with an error (then what it loaded stays until
	// Forget).
	Load(ctx context.Context, leases []Lease) (Takeover, error)
	// Forget stops consuming parts' commands and takes their timeouts out
	// of the schedule.
	Forget(parts []int)
}

// Takeover is the load of a takeover, to be opened.
type Takeover interface {
	// Loaded is the number of timeouts loaded.
	Loaded() int
	// Open opens the partitions still owned at their takeover's epoch once
	// the command backlog that waited for them is consumed; it reports
	// false when ctx ended first.
	Open(ctx context.Context) bool
}

// Counters are the membership's totals since the process started, and the
// clock offset from the database's of the last heartbeat (ns). ClockResets
// counts the times the clock samples started over (measureClock).
type Counters struct {
	Lapses, Gained, Lost, Released, ClockResets atomic.Uint64
	ClockAhead                                  atomic.Int64
	StandbyLag                                  atomic.Int64 // the lag of the slowest standby's clock the hold adds (time.Duration)
}

// Deps are what a Membership acts on and reports to.
type Deps struct {
	Table      Table      // the lease table, watched for contact (Ownership.Watch)
	Own        *Ownership // what it writes its leases to
	Partitions Partitions
	// Clock is the schedule's clock (monotonic), which the heartbeats
	// measure against the database's; Hold receives the least upper bound
	// measured of how far it runs ahead.
	Clock func() time.Time
	Hold  func(ahead time.Duration)
	// Info is what the heartbeat publishes of this instance (JSON).
	Info func() []byte
	// BrokerHealthy reports whether NATS answered lately.
	BrokerHealthy func() bool
	// View receives the live instances and every partition's lease after
	// every round.
	View func([]Instance, []PartitionLease)
	// Ready is called once the first round's partitions are loaded and
	// consumed; CaughtUp once their fires are open.
	Ready    func(loaded int)
	CaughtUp func()
	Counters *Counters
}

// Membership keeps this instance's share of the partitions. Every
// RenewInterval (sooner when another instance's lease expires before then,
// or when a probe finds partitions released or orphaned by a crash) it
// heartbeats, renews its leases, gives up those it holds beyond its share
// (ceil(Partitions / live instances)) and acquires free, expired or orphaned
// ones up to its share.
//
// A lease the renewal did not return is lost: its partition stops here at
// once. A renewal that has not returned within the renew deadline is a
// lapse, not a loss: the fires wait (the leases are not trusted, see
// Ownership.Trusted) and the fence in Postgres refuses this instance's
// writes, but the partitions stay loaded, and a renewal at the same epoch
// (nobody took them meanwhile) resumes them without a reload.
//
// Every takeover is tied to the epochs it was started for: what it undoes
// when a partition was lost while it loaded never touches a newer takeover
// of the same partition.
type Membership struct {
	startstop.Base
	cfg Config
	d   Deps

	mu   waitlock.Mutex // guards what follows: the loop, takeovers, ReleaseAll
	held []Lease
	// validUntil is when the leases stop being trusted here without a
	// renewal: the last renewal's send time plus the renew deadline.
	validUntil time.Time
	lapsed     bool        // validUntil passed without a renewal (counted once)
	leaving    atomic.Bool // shutting down: renewals only (see Leave)
	acquireAt  time.Time   // no acquisition before (after a failed takeover)
	aheads     []time.Duration
	lags       []time.Duration // Beat.StandbyLag of the heartbeats of aheads
	hold       time.Duration   // the hold in force (Deps.Hold's last)
	floor      time.Duration   // the hold in force before the last server change, kept until floorUntil
	floorUntil time.Time
	server     string         // the database server of aheads (Beat.Server)
	releases   sync.WaitGroup // takeovers waiting to open their partitions
	firstDone  bool
	share      int // the share of the last round

	// Signals are the membership's test signals; zero in production,
	// where signalling costs nothing.
	Signals Signals
}

// Signals are the points of a Membership a test can wait on.
type Signals struct {
	// Taken receives the leases of a takeover once it is over: opened,
	// given up, or undone because they were lost while it loaded.
	Taken testsignal.Signal[[]Lease]
}

// NewMembership returns the membership of cfg.InstanceID; Start runs it.
func NewMembership(cfg Config, d Deps) *Membership {
	return &Membership{cfg: cfg, d: d}
}

// now reads the clock the lease deadlines are measured on: the
// Ownership's (monotonic).
func (m *Membership) now() time.Time { return m.d.Own.now() }

// Start keeps the membership until ctx ends or Stop; leases are kept (to
// expire) unless ReleaseAll gives them up.
func (m *Membership) Start(ctx context.Context) { m.Base.Start(ctx, m.run) }

func (m *Membership) run(ctx context.Context) {
	defer m.releases.Wait()
	for {
		if !m.wait(ctx, m.round(ctx)) {
			return
		}
	}
}

// wait pauses for d, probing every ProbeInterval for partitions takeable
// at once (released, or orphaned by a crash) that this instance has room
// for: then it returns at once, for a round that takes them over; and so
// it does when the probe's connection fails, after stopping the fires
// until that round renews the leases. It reports whether ctx is still
// alive.
func (m *Membership) wait(ctx context.Context, d time.Duration) bool {
	until := m.now().Add(d)
	for {
		left := until.Sub(m.now())
		if left <= 0 {
			return ctx.Err() == nil
		}
		if !retry.Sleep(ctx, min(left, m.cfg.ProbeInterval)) {
			return false
		}
		if !m.now().Before(until) {
			return true
		}
		// A probe may take longer than the interval on a busy database; a
		// slow answer is still an answer (the round it triggers is what
		// takes the partitions).
		pctx, cancel := context.WithTimeout(ctx, max(m.cfg.ProbeInterval, m.cfg.RenewInterval/2))
		live, takeable, err := m.d.Table.Probe(pctx, m.cfg.InstanceID, m.cfg.TTL)
		slow := pctx.Err() != nil
		cancel()
		switch {
		case err != nil && !slow && ctx.Err() == nil:
			// The connection failed (reset, closed), not merely slow: this
			// instance's sessions may all be gone, which the others read
			// as a crash and take its partitions at once. The fires wait
			// for a round to prove the leases.
			m.d.Own.TrustUntil(time.Time{})
			m.cfg.Logger.Warn("lease connection failed; fires wait for a renewal", "err", err)
			return true
		case err == nil && takeable > 0 && m.heldCount() < shareOf(live) && m.d.BrokerHealthy() && !m.leaving.Load():
			return true
		case err == nil && !m.d.Own.Trusted() && m.heldCount() > 0:
			// Back in contact after a gap (see Ownership.Contacted): a
			// renewal proves the leases, and the fires resume.
			return true
		}
	}
}

func (m *Membership) heldCount() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.held)
}

// Leave turns the membership, on a graceful shutdown, to renewals only:
// it acquires and hands over nothing more, and keeps the leases valid
// while the writes in flight finish, until ReleaseAll gives them up.
func (m *Membership) Leave() { m.leaving.Store(true) }

// expiryMargin is how long after another instance's lease expires, by the
// heartbeat's reckoning, the next round runs: past the expiry despite the
// round trip, so that a dead instance's partitions are taken at once
// rather than up to a renew interval later.
const expiryMargin = 20 * time.Millisecond

// handoverWait bounds the wait, before partitions handed over are
// released, for the fire batches publishing their events.
const handoverWait = 100 * time.Millisecond

// aheadSamples is how many heartbeats the clock's offset is taken over.
const aheadSamples = 5

// clockFloorFor is how long the hold before a server change stays a
// floor of the hold (measureClock): longer than a former primary takes to
// stream again as a standby after a failover (2–14 s measured).
const clockFloorFor = 30 * time.Second

// round is one heartbeat, renewal and rebalance (Start runs them in a
// loop); it returns the pause until the next one: the renew interval, or
// less when another instance's lease expires sooner, or the probe interval
// after a failure (a database back from an outage is answered within it,
// and the partitions resume). Each call is bounded by the lease TTL: a
// call still blocked then (a connection cut without a reset) is abandoned
// and retried at the next round, on a fresh connection.
func (m *Membership) round(ctx context.Context) time.Duration {
	m.mu.Lock()
	defer m.mu.Unlock()
	sent := m.now()
	clockSent := m.d.Clock()
	rctx, cancel := context.WithTimeout(ctx, m.cfg.TTL)
	defer cancel()
	info, serving := m.d.Info(), m.d.BrokerHealthy() && !m.leaving.Load()
	beat, err := hedge(rctx, m.hedgeAfter(), func(ctx context.Context) (Beat, error) {
		return m.d.Table.Heartbeat(ctx, m.cfg.InstanceID, m.cfg.TTL, info, serving)
	})
	if err != nil {
		m.unproven(ctx, "heartbeat", err)
		return m.cfg.ProbeInterval // the database is back: renew at once
	}
	m.measureClock(clockSent, m.d.Clock(), beat)
	var wake time.Time // when another instance's first lease has expired
	if beat.NextExpiry > 0 {
		wake = m.now().Add(beat.NextExpiry + expiryMargin)
	}
	defer m.readView(rctx)
	if len(m.held) > 0 && !m.renew(ctx, rctx) {
		return m.cfg.ProbeInterval
	}
	if m.leaving.Load() {
		return m.cfg.RenewInterval
	}
	m.rebalance(ctx, rctx, beat.Live, sent)
	if !m.firstDone {
		m.firstDone = true // nothing to take over: ready at once
		m.d.Ready(0)
		m.d.CaughtUp()
	}
	if !wake.IsZero() {
		return max(min(m.cfg.RenewInterval, wake.Sub(m.now())), expiryMargin)
	}
	return m.cfg.RenewInterval
}

// renew renews the leases held, drops those the renewal did not return,
// and trusts the rest from the renewal's send time (each lease then lasts
// a TTL from a moment after it by Postgres's clock, however long the
// round's heartbeat took, as after a frozen database); it reports false
// when the renewal failed (see unproven).
func (m *Membership) renew(ctx, rctx context.Context) bool {
	sent := m.now()
	renewed, err := hedge(rctx, m.hedgeAfter(), func(ctx context.Context) ([]Lease, error) {
		return m.d.Table.Renew(ctx, m.cfg.InstanceID, m.held, m.cfg.TTL)
	})
	if err != nil {
		m.unproven(ctx, "renew leases", err)
		return false
	}
	var lost []Lease
	for _, l := range m.held {
		if !slices.Contains(renewed, l) {
			lost = append(lost, l)
		}
	}
	if len(lost) > 0 {
		m.cfg.Logger.Warn("leases lost", "partitions", PartitionsOf(lost))
		m.d.Counters.Lost.Add(uint64(len(lost)))
		m.drop(lost)
	}
	m.trust(sent)
	return true
}

// hedgeAfter is how long a heartbeat or renewal goes unanswered before
// hedge sends it again: a quarter of the renew interval, and no less than
// the probe interval.
func (m *Membership) hedgeAfter() time.Duration {
	return max(m.cfg.ProbeInterval, m.cfg.RenewInterval/4)
}

// hedge returns call's answer; when it has none after after, it calls
// again (the lease pool gives the second call another connection) and
// returns the first answer of the two, or the second when the first is an
// error, and ends the other (pgx closes a connection whose statement is
// abandoned). A connection that hangs alone (a flow dropped by a firewall
// or a NAT, a half-open TCP connection) so costs the round about after,
// as a reset one does, instead of the lease TTL, its lapse and its
// partitions. call must be idempotent: a heartbeat, a renewal.
func hedge[T any](ctx context.Context, after time.Duration, call func(context.Context) (T, error)) (T, error) {
	type answer struct {
		v   T
		err error
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	answers := make(chan answer, 2)
	send := func() {
		v, err := call(ctx)
		answers <- answer{v, err}
	}
	go send()
	t := time.NewTimer(after)
	defer t.Stop()
	select {
	case a := <-answers:
		return a.v, a.err
	case <-t.C:
	}
	go send()
	a := <-answers
	if a.err != nil {
		a = <-answers
	}
	return a.v, a.err
}

// rebalance brings the leases held to this instance's share among live
// instances: it hands the extra over, or acquires up to the share and
// takes the partitions over (trusting the first leases from sent).
func (m *Membership) rebalance(ctx, rctx context.Context, live int, sent time.Time) {
	m.share = shareOf(live)
	if !m.d.BrokerHealthy() && live > 1 {
		// Cut off from NATS, this instance can neither ingest nor publish:
		// its partitions go to the other instances, which may. (Alone, it
		// keeps them: nobody else could fire them, and it would reload
		// them all once NATS answers.)
		if len(m.held) > 0 {
			m.cfg.Logger.Warn("NATS does not answer; handing every partition over")
		}
		m.share = 0
	}
	switch {
	case len(m.held) > m.share:
		extra := slices.Clone(m.held[m.share:])
		m.drop(extra)
		// A fire batch may still be publishing for them: released once it
		// is done, so no event of theirs follows the release; a publish
		// that hangs leaves its leases to expire instead.
		release := extra
		if busy := m.d.Own.settled(ctx, extra, handoverWait); len(busy) > 0 {
			m.cfg.Logger.Warn("partitions still publishing; their leases expire instead", "partitions", PartitionsOf(busy))
			release = slices.DeleteFunc(slices.Clone(extra), func(l Lease) bool { return slices.Contains(busy, l) })
		}
		if err := m.d.Table.Release(rctx, m.cfg.InstanceID, release); err != nil {
			m.cfg.Logger.Warn("release leases", "err", err) // they expire instead
		}
		m.d.Counters.Released.Add(uint64(len(extra)))
		m.cfg.Logger.Info("partitions handed over", "partitions", PartitionsOf(extra), "live", live, "share", m.share)
	case len(m.held) < m.share && !m.now().Before(m.acquireAt):
		got, err := m.d.Table.Acquire(rctx, m.cfg.InstanceID, m.share-len(m.held), PartitionsOf(m.held), m.cfg.TTL)
		if err != nil {
			m.cfg.Logger.Warn("acquire leases", "err", err)
			return
		}
		if len(got) > 0 {
			if len(m.held) == 0 {
				m.trust(sent)
			}
			m.take(ctx, got, !m.firstDone)
			m.firstDone = true
		}
	}
}

// trust records a renewal sent at sent: the leases are trusted here until
// the renew deadline after it, for the membership and for the fire path.
func (m *Membership) trust(sent time.Time) {
	if m.lapsed {
		m.cfg.Logger.Info("leases renewed after a lapse; partitions resume", "partitions", PartitionsOf(m.held))
	}
	m.lapsed = false
	m.validUntil = sent.Add(m.cfg.RenewDeadline())
	m.d.Own.TrustUntil(m.validUntil)
}

// measureClock takes one heartbeat's reading of the database's clock,
// dbTime, by server, between the schedule's clock's readings sent and
// received: received minus dbTime bounds how far that clock is ahead of
// the database's (it may be negative: behind), and sent minus dbTime is
// as far ahead as it is at least. The schedule holds every deadline by the
// least such bound of the last aheadSamples heartbeats (the one whose
// round trip was the shortest), so that it judges deadlines by a clock
// that never runs ahead of the database's and none fires early. The
// schedule's clock runs on the monotonic clock: a step of the host's wall
// clock changes none of the samples, so none of them goes stale. The
// database's clock is another matter: after a failover another server's
// clock answers, and the samples of the one before say nothing of it
// (a standby's clock behind the old primary's by δ would make every fire
// for five heartbeats early by δ by the new one). The samples start over
// when the server changes, and when the database's clock is proven to
// have stepped back (this reading's least lead is above the hold).
//
// Never early by the primary's clock is not never early by every
// member's: a deadline due by the primary's clock is not yet due by a
// standby's that runs behind it, the clock of the next primary, or of the
// one that set the deadline. The hold adds the least of the same
// heartbeats' Beat.StandbyLag, each an upper bound of the slowest
// standby's lag (so the least of them is one too), and the fires wait
// until the slowest member's clock has reached the deadline. Only
// streaming standbys reply: after a failover the former primary (and any
// member that was slower) is not measured until it streams again, so the
// hold in force before the change stays a floor for clockFloorFor, which
// covers a rejoin.
func (m *Membership) measureClock(sent, received time.Time, beat Beat) {
	dbTime, server := beat.DBTime, beat.Server
	if dbTime.IsZero() {
		return
	}
	if len(m.aheads) > 0 && (server != m.server || sent.Sub(dbTime) > slices.Min(m.aheads)) {
		m.cfg.Logger.Warn("the database's clock changed: its samples start over", "server", server,
			"server_before", m.server, "hold_before", slices.Min(m.aheads), "least_lead", sent.Sub(dbTime))
		m.floor, m.floorUntil = m.hold, sent.Add(clockFloorFor) // a floor still in force carries over
		m.aheads, m.lags = m.aheads[:0], m.lags[:0]
		m.d.Counters.ClockResets.Add(1)
	}
	m.server = server
	m.aheads = append(m.aheads, received.Sub(dbTime))
	m.lags = append(m.lags, max(0, beat.StandbyLag))
	if len(m.aheads) > aheadSamples {
		m.aheads, m.lags = m.aheads[1:], m.lags[1:]
	}
	lag := slices.Min(m.lags)
	m.d.Counters.StandbyLag.Store(int64(lag))
	hold := slices.Min(m.aheads) + lag
	if sent.Before(m.floorUntil) {
		hold = max(hold, m.floor)
	}
	m.hold = hold
	m.d.Hold(hold)
	m.d.Counters.ClockAhead.Store(int64(received.Sub(sent)/2 + sent.Sub(dbTime)))
}

// readView hands the live instances and the leases to Deps.View, after
// the round's changes; a failure keeps the last view.
func (m *Membership) readView(ctx context.Context) {
	instances, err := m.d.Table.Instances(ctx)
	if err != nil {
		m.cfg.Logger.Debug("read the cluster view", "err", err)
		return
	}
	leases, err := m.d.Table.Ownership(ctx, m.cfg.TTL)
	if err != nil {
		m.cfg.Logger.Debug("read the cluster view", "err", err)
		return
	}
	m.d.View(instances, leases)
}

// unproven handles a failed heartbeat or renewal: the leases stay trusted
// until validUntil; past it, the partitions lapse (their fires wait, the
// fence refuses their writes) but stay loaded until a renewal tells
// whether they are still this instance's.
func (m *Membership) unproven(ctx context.Context, what string, err error) {
	if ctx.Err() != nil {
		return
	}
	if len(m.held) > 0 && !m.lapsed && m.now().After(m.validUntil) {
		m.lapsed = true
		m.d.Counters.Lapses.Add(1)
		m.cfg.Logger.Error("leases not renewed within the renew deadline; fires wait for a renewal", "op", what, "err", err,
			"partitions", PartitionsOf(m.held))
		return
	}
	m.cfg.Logger.Warn(what, "err", err)
}

// take takes the newly granted leases' partitions over in the background
// (a large load must not hold up the renewals): it loads them, and opens
// them once their backlog is consumed. first marks the first round's
// takeover, which reports ready and caught up. A takeover that fails (the
// partitions do not fit in MaxPending) gives its leases up, for another
// instance, and no lease is acquired here for a lease TTL.
func (m *Membership) take(ctx context.Context, got []Lease, first bool) {
	for _, l := range got {
		m.d.Own.Gain(l)
	}
	m.d.Counters.Gained.Add(uint64(len(got)))
	m.held = append(m.held, got...)
	slices.SortFunc(m.held, func(a, b Lease) int { return a.Partition - b.Partition })
	m.releases.Go(func() {
		defer m.Signals.Taken.Signal(got)
		t, err := m.d.Partitions.Load(ctx, got)
		m.mu.Lock()
		// Undo what the load did for a partition lost while it loaded,
		// unless it is owned again, by a newer takeover whose consumer and
		// timeouts are not this one's to touch.
		var gone []int
		for _, l := range got {
			if !m.d.Own.Owns(l.Partition) {
				gone = append(gone, l.Partition)
			}
		}
		m.forget(gone)
		if err != nil && ctx.Err() == nil {
			mine := m.current(got)
			m.cfg.Logger.Error("take partitions over; giving them up", "partitions", PartitionsOf(mine), "err", err)
			m.drop(mine)
			if err := m.d.Table.Release(ctx, m.cfg.InstanceID, mine); err != nil {
				m.cfg.Logger.Warn("release leases", "err", err) // they expire instead
			}
			m.d.Counters.Released.Add(uint64(len(mine)))
			m.acquireAt = m.now().Add(m.cfg.TTL)
		}
		m.mu.Unlock()
		if first {
			m.d.Ready(t.Loaded())
		}
		if err != nil {
			if first {
				m.d.CaughtUp()
			}
			return
		}
		if t.Open(ctx) && first {
			m.d.CaughtUp()
		}
	})
}

// current returns the leases of leases still held at their epoch.
func (m *Membership) current(leases []Lease) []Lease {
	var out []Lease
	for _, l := range leases {
		if m.d.Own.Epoch(l.Partition) == l.Epoch {
			out = append(out, l)
		}
	}
	return out
}

// drop stops the partitions of leases here: no more commands are fetched
// or written for them, and their timeouts leave the schedule.
func (m *Membership) drop(leases []Lease) {
	parts := PartitionsOf(leases)
	for _, p := range parts {
		m.d.Own.Lose(p)
	}
	m.forget(parts)
	m.held = slices.DeleteFunc(m.held, func(l Lease) bool { return slices.Contains(parts, l.Partition) })
}

// forget hands parts, when there are any, to Partitions.Forget.
func (m *Membership) forget(parts []int) {
	if len(parts) > 0 {
		m.d.Partitions.Forget(parts)
	}
}

// ReleaseAll gives every lease up at once and leaves the cluster, on a
// graceful shutdown, once the writes in flight are done: the survivors
// take the partitions over at their next round instead of after the TTL.
func (m *Membership) ReleaseAll(ctx context.Context) {
	m.mu.Lock()
	defer m.mu.Unlock()
	held := slices.Clone(m.held)
	m.drop(held)
	if len(held) > 0 {
		if err := m.d.Table.Release(ctx, m.cfg.InstanceID, held); err != nil {
			m.cfg.Logger.Warn("release leases on shutdown; they expire instead", "err", err)
		}
		m.d.Counters.Released.Add(uint64(len(held)))
	}
	if err := m.d.Table.Leave(ctx, m.cfg.InstanceID); err != nil {
		m.cfg.Logger.Warn("leave the cluster", "err", err)
	}
}
