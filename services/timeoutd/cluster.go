package timeoutd

import (
	"context"
	"encoding/json"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ordertimeout/ordertimeout/internal/startstop"
	"github.com/ordertimeout/ordertimeout/pkg/events"
	"github.com/ordertimeout/ordertimeout/services/timeoutd/internal/schedule"
)

// ownership is what this instance owns, read by ingest and the fire path on
// every batch: the epoch of each partition's lease (0: not owned) and
// whether its fires may go (the backlog that waited for it is consumed).
type ownership struct {
	id      string
	now     func() time.Time // the monotonic clock trusted() reads
	epochs  [events.Partitions]atomic.Int64
	opened  [events.Partitions]atomic.Bool
	changed atomic.Uint64 // bumped by every gain and loss, for the stats
	// until is when the leases stop being trusted without a renewal (the
	// membership's validUntil), read by the fire path before it publishes.
	until atomic.Pointer[time.Time]
	// contact is the send time of the last statement that reached the
	// database, and contactWindow how long after it fires are published
	// (contact.go).
	contact       atomic.Pointer[time.Time]
	contactWindow time.Duration
}

// trustUntil records when the leases stop being trusted without a renewal.
func (o *ownership) trustUntil(t time.Time) { o.until.Store(&t) }

// trusted reports whether the leases are still trusted: the last renewal
// was sent less than the renew deadline ago, by this process's monotonic
// clock (a process paused longer, or cut off from Postgres, is not).
func (o *ownership) trusted() bool {
	u := o.until.Load()
	return u != nil && o.now().Before(*u)
}

// gain records lease l; its fires stay shut until open.
func (o *ownership) gain(l Lease) {
	o.opened[l.Partition].Store(false)
	o.epochs[l.Partition].Store(l.Epoch)
	o.changed.Add(1)
}

// lose forgets partition p: every later write for it is refused here, and
// by the fence in Postgres whatever this instance still believes.
func (o *ownership) lose(p int) {
	o.epochs[p].Store(0)
	o.opened[p].Store(false)
	o.changed.Add(1)
}

// openAt opens partition p's fires if it is still owned at epoch, and
// reports whether it did.
func (o *ownership) openAt(p int, epoch int64) bool {
	if o.epochs[p].Load() != epoch {
		return false
	}
	o.opened[p].Store(true)
	return true
}

func (o *ownership) owns(p int) bool   { return o.epochs[p].Load() != 0 }
func (o *ownership) isOpen(p int) bool { return o.opened[p].Load() && o.owns(p) }

// fence returns the Fence of the partitions of parts this instance owns.
func (o *ownership) fence(parts []int) Fence {
	f := Fence{Owner: o.id}
	for _, p := range parts {
		if e := o.epochs[p].Load(); e != 0 {
			f.Leases = append(f.Leases, Lease{Partition: p, Epoch: e})
		}
	}
	return f
}

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

// owned returns the partitions owned, in order.
func (o *ownership) owned() []int {
	var out []int
	for p := range events.Partitions {
		if o.owns(p) {
			out = append(out, p)
		}
	}
	return out
}

// membership keeps this instance's share of the partitions. Every
// LeaseRenewInterval (sooner when another instance's lease expires before
// then, or when a probe finds partitions released or orphaned by a crash) it
// heartbeats, renews its leases, gives up those it holds beyond its share
// (ceil(Partitions / live instances)) and acquires free, expired or orphaned
// ones up to its share. Its calls go to a pool of their own (Deps.Leases).
//
// A lease the renewal did not return is lost: its partition stops here at
// once. A renewal that has not returned within the renew deadline is a
// lapse, not a loss: the fires wait (the leases are not trusted, see
// ownership.trusted) and the fence in Postgres refuses this instance's
// writes, but the partitions stay loaded, and a renewal at the same epoch
// (nobody took them meanwhile) resumes them without a reload.
//
// Every takeover is tied to the epochs it was started for: what it undoes
// when a partition was lost while it loaded never touches a newer takeover
// of the same partition.
type membership struct {
	startstop.Base
	cfg    Config
	leases Leases
	src    Source
	sched  *schedule.Schedule
	rec    *recovery
	own    *ownership
	stats  *stats
	info   func() InstanceInfo // what the heartbeat publishes of this instance
	// brokerHealthy reports whether NATS answered lately (Deps.BrokerHealthy).
	brokerHealthy func() bool
	view          *clusterView // refreshed every round
	// ready is called once the first round's partitions are loaded and
	// consumed; caughtUp once their fires are open.
	ready    func(loaded int)
	caughtUp func()
	// now is the clock the lease deadlines are measured on (monotonic).
	now func() time.Time
	// clock is the schedule's clock; the heartbeats measure it against
	// Postgres's.
	clock *monoClock

	mu   waitLock // guards what follows: the loop, takeovers, releaseAll
	held []Lease
	// validUntil is when the leases stop being trusted here without a
	// renewal: the last renewal's send time plus the renew deadline.
	validUntil time.Time
	lapsed     bool        // validUntil passed without a renewal (counted once)
	leaving    atomic.Bool // shutting down: renewals only (see leave)
	acquireAt  time.Time   // no acquisition before (after a failed takeover)
	aheads     []time.Duration
	releases   sync.WaitGroup // takeovers waiting to open their partitions
	firstDone  bool
	share      int // the share of the last round

	signals membershipSignals
}

// membershipSignals are the membership's test signals; zero (nil
// channels) in production, where signalling costs nothing.
type membershipSignals struct {
	// taken receives the leases of a takeover once it is over: opened,
	// given up, or undone because they were lost while it loaded.
	taken testSignal[[]Lease]
}

// Start keeps the membership until ctx ends or Stop; leases are kept (to
// expire) unless releaseAll gives them up.
func (m *membership) Start(ctx context.Context) { m.Base.Start(ctx, m.run) }

func (m *membership) run(ctx context.Context) {
	defer m.releases.Wait()
	for {
		if !m.wait(ctx, m.round(ctx)) {
			return
		}
	}
}

// wait pauses for d, probing every LeaseProbeInterval for partitions
// takeable at once (released, or orphaned by a crash) that this instance
// has room for: then it returns at once, for a round that takes them over;
// and so it does when the probe's connection fails, after stopping the
// fires until that round renews the leases. It reports whether ctx is
// still alive.
func (m *membership) wait(ctx context.Context, d time.Duration) bool {
	until := m.now().Add(d)
	for {
		left := until.Sub(m.now())
		if left <= 0 {
			return ctx.Err() == nil
		}
		if !sleep(ctx, min(left, m.cfg.LeaseProbeInterval)) {
			return false
		}
		if !m.now().Before(until) {
			return true
		}
		// A probe may take longer than the interval on a busy database; a
		// slow answer is still an answer (the round it triggers is what
		// takes the partitions).
		pctx, cancel := context.WithTimeout(ctx, max(m.cfg.LeaseProbeInterval, m.cfg.LeaseRenewInterval/2))
		live, takeable, err := m.leases.Probe(pctx, m.cfg.InstanceID, m.cfg.LeaseTTL)
		slow := pctx.Err() != nil
		cancel()
		switch {
		case err != nil && !slow && ctx.Err() == nil:
			// The connection failed (reset, closed), not merely slow: this
			// instance's sessions may all be gone, which the others read
			// as a crash and take its partitions at once. The fires wait
			// for a round to prove the leases.
			m.own.trustUntil(time.Time{})
			m.cfg.Logger.Warn("lease connection failed; fires wait for a renewal", "err", err)
			return true
		case err == nil && takeable > 0 && m.heldCount() < shareOf(live) && m.brokerHealthy() && !m.leaving.Load():
			return true
		case err == nil && !m.own.trusted() && m.heldCount() > 0:
			// Back in contact after a gap (see ownership.contacted): a
			// renewal proves the leases, and the fires resume.
			return true
		}
	}
}

func (m *membership) heldCount() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.held)
}

// shareOf is an instance's share of the partitions among live instances.
func shareOf(live int) int { return (events.Partitions + max(live, 1) - 1) / max(live, 1) }

// leave turns the membership, on a graceful shutdown, to renewals only:
// it acquires and hands over nothing more, and keeps the leases valid
// while the writes in flight finish, until releaseAll gives them up.
func (m *membership) leave() { m.leaving.Store(true) }

// expiryMargin is how long after another instance's lease expires, by the
// heartbeat's reckoning, the next round runs: past the expiry despite the
// round trip, so that a dead instance's partitions are taken at once
// rather than up to a renew interval later.
const expiryMargin = 20 * time.Millisecond

// aheadSamples is how many heartbeats the clock's offset is taken over.
const aheadSamples = 5

// round is one heartbeat, renewal and rebalance; it returns the pause
// until the next one: the renew interval, or less when another instance's
// lease expires sooner, or the probe interval after a failure (a database
// back from an outage is answered within it, and the partitions resume). Each call is bounded by the lease TTL: a call
// still blocked then (a connection cut without a reset) is abandoned and
// retried at the next round, on a fresh connection.
func (m *membership) round(ctx context.Context) time.Duration {
	m.mu.Lock()
	defer m.mu.Unlock()
	sent := m.now()
	clockSent := m.clock.Now()
	rctx, cancel := context.WithTimeout(ctx, m.cfg.LeaseTTL)
	defer cancel()
	info, _ := json.Marshal(m.info()) // cannot fail: plain fields
	beat, err := m.leases.Heartbeat(rctx, m.cfg.InstanceID, m.cfg.LeaseTTL, info, m.brokerHealthy() && !m.leaving.Load())
	if err != nil {
		m.unproven(ctx, "heartbeat", err)
		return m.cfg.LeaseProbeInterval // the database is back: renew at once
	}
	m.measureClock(clockSent, m.clock.Now(), beat.DBTime)
	var wake time.Time // when another instance's first lease has expired
	if beat.NextExpiry > 0 {
		wake = m.now().Add(beat.NextExpiry + expiryMargin)
	}
	defer m.readView(rctx)
	if len(m.held) > 0 && !m.renew(ctx, rctx, sent) {
		return m.cfg.LeaseProbeInterval
	}
	if m.leaving.Load() {
		return m.cfg.LeaseRenewInterval
	}
	m.rebalance(ctx, rctx, beat.Live, sent)
	if !m.firstDone {
		m.firstDone = true // nothing to take over: ready at once
		m.ready(0)
		m.caughtUp()
	}
	if !wake.IsZero() {
		return max(min(m.cfg.LeaseRenewInterval, wake.Sub(m.now())), expiryMargin)
	}
	return m.cfg.LeaseRenewInterval
}

// renew renews the leases held, drops those the renewal did not return,
// and trusts the rest from sent; it reports false when the renewal failed
// (see unproven).
func (m *membership) renew(ctx, rctx context.Context, sent time.Time) bool {
	renewed, err := m.leases.Renew(rctx, m.cfg.InstanceID, m.held, m.cfg.LeaseTTL)
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
		m.cfg.Logger.Warn("leases lost", "partitions", partitionsOf(lost))
		m.stats.partitionsLost.Add(uint64(len(lost)))
		m.drop(lost)
	}
	m.trust(sent)
	return true
}

// rebalance brings the leases held to this instance's share among live
// instances: it hands the extra over, or acquires up to the share and
// takes the partitions over (trusting the first leases from sent).
func (m *membership) rebalance(ctx, rctx context.Context, live int, sent time.Time) {
	m.share = shareOf(live)
	if !m.brokerHealthy() && live > 1 {
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
		if err := m.leases.Release(rctx, m.cfg.InstanceID, extra); err != nil {
			m.cfg.Logger.Warn("release leases", "err", err) // they expire instead
		}
		m.stats.partitionsReleased.Add(uint64(len(extra)))
		m.cfg.Logger.Info("partitions handed over", "partitions", partitionsOf(extra), "live", live, "share", m.share)
	case len(m.held) < m.share && !m.now().Before(m.acquireAt):
		got, err := m.leases.Acquire(rctx, m.cfg.InstanceID, m.share-len(m.held), partitionsOf(m.held), m.cfg.LeaseTTL)
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
func (m *membership) trust(sent time.Time) {
	if m.lapsed {
		m.cfg.Logger.Info("leases renewed after a lapse; partitions resume", "partitions", partitionsOf(m.held))
	}
	m.lapsed = false
	m.validUntil = sent.Add(m.cfg.renewDeadline())
	m.own.trustUntil(m.validUntil)
}

// measureClock takes one heartbeat's reading of the database's clock,
// dbTime, between the schedule's clock's readings sent and received:
// received minus dbTime bounds how far that clock is ahead of the
// database's (it may be negative: behind). The schedule holds every
// deadline by the least such bound of the last aheadSamples heartbeats
// (the one whose round trip was the shortest), so that it judges deadlines
// by a clock that never runs ahead of the database's and none fires early.
// The schedule's clock runs on the monotonic clock: a step of the host's
// wall clock changes none of the samples, so none of them goes stale.
func (m *membership) measureClock(sent, received, dbTime time.Time) {
	if dbTime.IsZero() {
		return
	}
	m.aheads = append(m.aheads, received.Sub(dbTime))
	if len(m.aheads) > aheadSamples {
		m.aheads = m.aheads[1:]
	}
	m.sched.Hold(slices.Min(m.aheads))
	m.stats.clockAhead.Store(int64(received.Sub(sent)/2 + sent.Sub(dbTime)))
}

// readView refreshes the cluster view, after the round's changes; a
// failure keeps the last one.
func (m *membership) readView(ctx context.Context) {
	instances, err := m.leases.Instances(ctx)
	if err != nil {
		m.cfg.Logger.Debug("read the cluster view", "err", err)
		return
	}
	m.view.set(m.cfg.InstanceID, instances)
}

// unproven handles a failed heartbeat or renewal: the leases stay trusted
// until validUntil; past it, the partitions lapse (their fires wait, the
// fence refuses their writes) but stay loaded until a renewal tells
// whether they are still this instance's.
func (m *membership) unproven(ctx context.Context, what string, err error) {
	if ctx.Err() != nil {
		return
	}
	if len(m.held) > 0 && !m.lapsed && m.now().After(m.validUntil) {
		m.lapsed = true
		m.stats.leaseLapses.Add(1)
		m.cfg.Logger.Error("leases not renewed within the renew deadline; fires wait for a renewal", "op", what, "err", err,
			"partitions", partitionsOf(m.held))
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
func (m *membership) take(ctx context.Context, got []Lease, first bool) {
	for _, l := range got {
		m.own.gain(l)
	}
	m.stats.partitionsGained.Add(uint64(len(got)))
	m.held = append(m.held, got...)
	slices.SortFunc(m.held, func(a, b Lease) int { return a.Partition - b.Partition })
	m.releases.Go(func() {
		defer m.signals.taken.signal(got)
		parts := partitionsOf(got)
		t, err := m.rec.load(ctx, got)
		m.mu.Lock()
		// Undo what the load did for a partition lost while it loaded,
		// unless it is owned again, by a newer takeover whose consumer and
		// timeouts are not this one's to touch.
		var gone []int
		for _, l := range got {
			if m.own.epochs[l.Partition].Load() == 0 {
				gone = append(gone, l.Partition)
			}
		}
		m.forget(gone)
		if err != nil && ctx.Err() == nil {
			mine := m.current(got)
			m.cfg.Logger.Error("take partitions over; giving them up", "partitions", partitionsOf(mine), "err", err)
			m.drop(mine)
			if err := m.leases.Release(ctx, m.cfg.InstanceID, mine); err != nil {
				m.cfg.Logger.Warn("release leases", "err", err) // they expire instead
			}
			m.stats.partitionsReleased.Add(uint64(len(mine)))
			m.acquireAt = m.now().Add(m.cfg.LeaseTTL)
		}
		m.mu.Unlock()
		if first {
			m.ready(t.loaded)
		}
		if err != nil {
			if first {
				m.caughtUp()
			}
			return
		}
		m.cfg.Logger.Info("partitions acquired", "partitions", parts, "pending", t.loaded, "overdue", len(t.held),
			"rows", t.rows, "consumers", t.consumers)
		if m.rec.release(ctx, t) && first {
			m.caughtUp()
		}
	})
}

// current returns the leases of leases still held at their epoch.
func (m *membership) current(leases []Lease) []Lease {
	var out []Lease
	for _, l := range leases {
		if m.own.epochs[l.Partition].Load() == l.Epoch {
			out = append(out, l)
		}
	}
	return out
}

// drop stops the partitions of leases here: no more commands are fetched
// or written for them, and their timeouts leave the schedule.
func (m *membership) drop(leases []Lease) {
	parts := partitionsOf(leases)
	for _, p := range parts {
		m.own.lose(p)
	}
	m.forget(parts)
	m.held = slices.DeleteFunc(m.held, func(l Lease) bool { return slices.Contains(parts, l.Partition) })
}

// forget stops consuming parts and takes their timeouts out of the
// schedule.
func (m *membership) forget(parts []int) {
	if len(parts) == 0 {
		return
	}
	for _, p := range parts {
		m.src.Remove(p)
	}
	m.sched.Drop(func(p int) bool { return slices.Contains(parts, p) })
}

// releaseAll gives every lease up at once and leaves the cluster, on a
// graceful shutdown, once the writes in flight are done: the survivors
// take the partitions over at their next round instead of after LeaseTTL.
func (m *membership) releaseAll(ctx context.Context) {
	m.mu.Lock()
	defer m.mu.Unlock()
	held := slices.Clone(m.held)
	m.drop(held)
	if len(held) > 0 {
		if err := m.leases.Release(ctx, m.cfg.InstanceID, held); err != nil {
			m.cfg.Logger.Warn("release leases on shutdown; they expire instead", "err", err)
		}
		m.stats.partitionsReleased.Add(uint64(len(held)))
	}
	if err := m.leases.Leave(ctx, m.cfg.InstanceID); err != nil {
		m.cfg.Logger.Warn("leave the cluster", "err", err)
	}
}

// partitionsOf returns the partitions of leases.
func partitionsOf(leases []Lease) []int {
	out := make([]int, len(leases))
	for i, l := range leases {
		out[i] = l.Partition
	}
	return out
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
func (v *clusterView) set(self string, instances []Instance) {
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
