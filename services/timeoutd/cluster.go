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
	epochs  [events.Partitions]atomic.Int64
	opened  [events.Partitions]atomic.Bool
	changed atomic.Uint64 // bumped by every gain and loss, for the stats
	// until is when the leases stop being trusted without a renewal (the
	// membership's validUntil), read by the fire path before it publishes.
	until atomic.Pointer[time.Time]
}

// trustUntil records when the leases stop being trusted without a renewal.
func (o *ownership) trustUntil(t time.Time) { o.until.Store(&t) }

// trusted reports whether the leases are still trusted: the last renewal
// was sent less than the renew deadline ago, by this process's monotonic
// clock (a process paused longer, or cut off from Postgres, is not).
func (o *ownership) trusted() bool {
	u := o.until.Load()
	return u != nil && time.Now().Before(*u)
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

// openAt opens partition p's fires if it is still owned at epoch.
func (o *ownership) openAt(p int, epoch int64) {
	if o.epochs[p].Load() == epoch {
		o.opened[p].Store(true)
	}
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

// membership keeps this instance's share of the partitions: every
// LeaseRenewInterval (sooner when another instance's lease expires before
// then) it heartbeats, renews its leases, gives up those it holds beyond
// its share (ceil(Partitions / live instances)) and acquires free or
// expired ones up to its share. A partition it can no longer prove
// it holds (the renewal failed and LeaseTTL minus one renew interval passed
// since the last renewal was sent, or the renewal did not return it) stops
// ingesting and firing here at once, before the lease can expire anywhere
// else; the fence in Postgres refuses its writes whatever happens.
type membership struct {
	startstop.Base
	cfg    Config
	leases Leases
	src    Source
	sched  *schedule.Schedule
	rec    *recovery
	own    *ownership
	info   func() InstanceInfo // what the heartbeat publishes of this instance
	view   *clusterView        // refreshed every round
	// ready is called once the first round's partitions are loaded and
	// consumed; caughtUp once their fires are open.
	ready    func(loaded int)
	caughtUp func()

	mu   sync.Mutex // guards held: the loop, and releaseAll after it
	held []Lease
	// validUntil is when the leases stop being trusted here without a
	// renewal: the last renewal's send time plus the renew deadline.
	validUntil time.Time
	releases   sync.WaitGroup // takeovers waiting to open their partitions
	firstDone  bool
}

// Start keeps the membership until ctx ends or Stop; leases are kept (to
// expire) unless releaseAll gives them up.
func (m *membership) Start(ctx context.Context) { m.Base.Start(ctx, m.run) }

func (m *membership) run(ctx context.Context) {
	defer m.releases.Wait()
	for {
		if !sleep(ctx, m.round(ctx)) {
			return
		}
	}
}

// expiryMargin is how long after another instance's lease expires, by the
// heartbeat's reckoning, the next round runs: past the expiry despite the
// round trip, so that a dead instance's partitions are taken at once
// rather than up to a renew interval later.
const expiryMargin = 20 * time.Millisecond

// round is one heartbeat, renewal and rebalance; it returns the pause
// until the next one: the renew interval, or less when another instance's
// lease expires sooner.
func (m *membership) round(ctx context.Context) time.Duration {
	m.mu.Lock()
	defer m.mu.Unlock()
	sent := time.Now()
	deadline := sent.Add(m.cfg.renewDeadline())
	if len(m.held) > 0 && m.validUntil.Before(deadline) {
		deadline = m.validUntil // a call still blocked then drops every partition
	}
	rctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	info, _ := json.Marshal(m.info()) // cannot fail: plain fields
	live, nextExpiry, err := m.leases.Heartbeat(rctx, m.cfg.InstanceID, m.cfg.LeaseTTL, info)
	if err != nil {
		m.unproven(ctx, "heartbeat", err)
		return m.cfg.LeaseRenewInterval
	}
	var wake time.Time // when another instance's first lease has expired
	if nextExpiry > 0 {
		wake = time.Now().Add(nextExpiry + expiryMargin)
	}
	defer m.readView(rctx)
	if len(m.held) > 0 {
		renewed, err := m.leases.Renew(rctx, m.cfg.InstanceID, m.held, m.cfg.LeaseTTL)
		if err != nil {
			m.unproven(ctx, "renew leases", err)
			return m.cfg.LeaseRenewInterval
		}
		var lost []Lease
		for _, l := range m.held {
			if !slices.Contains(renewed, l) {
				lost = append(lost, l)
			}
		}
		if len(lost) > 0 {
			m.cfg.Logger.Warn("leases lost", "partitions", partitionsOf(lost))
			m.drop(lost)
		}
		m.setValidUntil(sent.Add(m.cfg.renewDeadline()))
	}
	share := (events.Partitions + live - 1) / live
	switch {
	case len(m.held) > share:
		extra := slices.Clone(m.held[share:])
		m.drop(extra)
		if err := m.leases.Release(rctx, m.cfg.InstanceID, extra); err != nil {
			m.cfg.Logger.Warn("release leases", "err", err) // they expire instead
		}
		m.cfg.Logger.Info("partitions handed over", "partitions", partitionsOf(extra), "live", live, "share", share)
	case len(m.held) < share:
		got, err := m.leases.Acquire(rctx, m.cfg.InstanceID, share-len(m.held), partitionsOf(m.held), m.cfg.LeaseTTL)
		if err != nil {
			m.cfg.Logger.Warn("acquire leases", "err", err)
			break
		}
		if len(got) > 0 {
			if len(m.held) == 0 {
				m.setValidUntil(sent.Add(m.cfg.renewDeadline()))
			}
			m.take(ctx, got, !m.firstDone)
			m.firstDone = true
		}
	}
	if !m.firstDone {
		m.firstDone = true // nothing to take over: ready at once
		m.ready(0)
		m.caughtUp()
	}
	if !wake.IsZero() {
		return max(min(m.cfg.LeaseRenewInterval, time.Until(wake)), expiryMargin)
	}
	return m.cfg.LeaseRenewInterval
}

// setValidUntil records when the leases stop being trusted here without a
// renewal, for the membership and for the fire path.
func (m *membership) setValidUntil(t time.Time) {
	m.validUntil = t
	m.own.trustUntil(t)
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
// until validUntil, then every partition stops here.
func (m *membership) unproven(ctx context.Context, what string, err error) {
	if ctx.Err() != nil {
		return
	}
	if len(m.held) > 0 && time.Now().After(m.validUntil) {
		m.cfg.Logger.Error("leases not renewed within the renew deadline; stopping every partition", "op", what, "err", err,
			"partitions", partitionsOf(m.held))
		m.drop(m.held)
		return
	}
	m.cfg.Logger.Warn(what, "err", err)
}

// take takes the newly granted leases' partitions over in the background
// (a large load must not hold up the renewals): it loads them, and opens
// them once their backlog is consumed. first marks the first round's
// takeover, which reports ready and caught up.
func (m *membership) take(ctx context.Context, got []Lease, first bool) {
	for _, l := range got {
		m.own.gain(l)
	}
	m.held = append(m.held, got...)
	slices.SortFunc(m.held, func(a, b Lease) int { return a.Partition - b.Partition })
	m.releases.Go(func() {
		parts := partitionsOf(got)
		t, err := m.rec.load(ctx, got)
		m.mu.Lock()
		// A partition lost while it loaded: undo what the load did for it.
		var gone []int
		for _, l := range got {
			if m.own.epochs[l.Partition].Load() != l.Epoch {
				gone = append(gone, l.Partition)
			}
		}
		m.forget(gone)
		if err != nil && ctx.Err() == nil {
			m.cfg.Logger.Error("take partitions over; giving them up", "partitions", parts, "err", err)
			m.drop(got)
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
		m.cfg.Logger.Info("partitions acquired", "partitions", parts, "pending", t.loaded, "overdue", len(t.held))
		if m.rec.release(ctx, t) && first {
			m.caughtUp()
		}
	})
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
