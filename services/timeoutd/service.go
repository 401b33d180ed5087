package timeoutd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ordertimeout/ordertimeout/internal/startstop"
	"github.com/ordertimeout/ordertimeout/pkg/events"
	"github.com/ordertimeout/ordertimeout/services/timeoutd/internal/lease"
	"github.com/ordertimeout/ordertimeout/services/timeoutd/internal/schedule"
)

// Deps are the adapters a Service uses.
type Deps struct {
	Store Store
	// Reads serves ListPending and GetPending; default Store. The daemon
	// passes a Store on a small pool of its own, so that the read API can
	// never starve ingest or fire of connections.
	Reads       Reader
	Source      Source
	DeadLetters DeadLetterer
	// Publisher publishes the expiry events.
	Publisher Publisher
	// Leases is the partition lease table.
	Leases lease.Table
	// BrokerHealthy, when set, reports whether the broker (NATS) answered
	// lately: while it does not, the instance can neither ingest nor
	// publish, so it hands every partition over to the instances that can,
	// and takes none. Nil: always healthy.
	BrokerHealthy func() bool
	// Metrics is optional; default NopMetrics.
	Metrics Metrics
}

// Service is the timeout daemon: it recovers, then ingests commands, fires
// expired timeouts and sweeps tombstones until its context ends. It wires
// one component per job (each in its own file) around the schedule:
// recovery, ingest, the fire path, the janitor and the stats sampler.
type Service struct {
	cfg   Config
	store Store
	reads Reader
	src   Source
	sched *schedule.Schedule
	stats *stats

	own        *lease.Ownership
	membership *lease.Membership
	view       *clusterView
	recovery   *recovery
	ingest     *ingester
	fire       *firer
	janitor    *janitor
	sampler    *sampler
	caughtUp   chan struct{}
	caughtOnce sync.Once

	m         Metrics
	ready     chan struct{}
	readyOnce sync.Once
	live      atomic.Bool // ready and not shutting down
	draining  atomic.Bool // Unready was called

	// hard is the context of every I/O; Kill cancels it, so an in-flight
	// batch is abandoned as in a crash.
	hard      context.Context
	kill      context.CancelFunc
	runOnce   sync.Once
	startedAt atomic.Pointer[time.Time]
}

// New returns a Service; it starts the wheel's goroutines, which Run stops.
func New(cfg Config, d Deps) (*Service, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	switch {
	case d.Store == nil:
		return nil, errors.New("timeoutd: Deps.Store is nil")
	case d.Source == nil:
		return nil, errors.New("timeoutd: Deps.Source is nil")
	case d.DeadLetters == nil:
		return nil, errors.New("timeoutd: Deps.DeadLetters is nil")
	case d.Publisher == nil:
		return nil, errors.New("timeoutd: Deps.Publisher is nil")
	case d.Leases == nil:
		return nil, errors.New("timeoutd: Deps.Leases is nil")
	}
	if d.Metrics == nil {
		d.Metrics = NopMetrics{}
	}
	if d.Reads == nil {
		d.Reads = d.Store
	}
	if d.BrokerHealthy == nil {
		d.BrokerHealthy = func() bool { return true }
	}
	s := &Service{cfg: cfg, store: d.Store, reads: d.Reads, src: d.Source, m: d.Metrics,
		ready: make(chan struct{}), stats: newStats(cfg.Recent)}
	s.hard, s.kill = context.WithCancel(context.Background())
	s.own = lease.NewOwnership(cfg.InstanceID, time.Now, cfg.contactWindow())
	// Every statement that reaches Postgres proves this instance's sessions
	// live (see lease.Ownership.Contacted).
	d.Store, d.Leases = contactStore{d.Store, s.own}, s.own.Watch(d.Leases)
	s.store = d.Store
	clock := newMonoClock(cfg.Now)
	s.view = &clusterView{}
	s.caughtUp = make(chan struct{})
	s.fire = &firer{cfg: cfg, store: d.Store, pub: d.Publisher, own: s.own, stats: s.stats, m: d.Metrics, hard: s.hard,
		slots: make(chan struct{}, cfg.FireConcurrency)}
	s.sched, err = schedule.New(schedule.Config{Tick: cfg.Tick, MaxPending: cfg.MaxPending, Partitions: events.Partitions,
		Partition: events.PartitionOf, OnDue: s.fire.onDue, Now: clock.Now, Logger: cfg.Logger, Clock: clock})
	if err != nil {
		return nil, fmt.Errorf("timeoutd: %w", err)
	}
	s.fire.sched = s.sched
	s.recovery = &recovery{cfg: cfg, store: d.Store, src: d.Source, pub: d.Publisher, sched: s.sched, own: s.own, hard: s.hard}
	s.membership = lease.NewMembership(lease.Config{InstanceID: cfg.InstanceID, TTL: cfg.LeaseTTL,
		RenewInterval: cfg.LeaseRenewInterval, ProbeInterval: cfg.LeaseProbeInterval, Logger: cfg.Logger},
		lease.Deps{Table: d.Leases, Own: s.own, Partitions: s.recovery, Clock: clock.Now, Hold: s.sched.Hold,
			Info: s.heartbeatInfo, BrokerHealthy: d.BrokerHealthy, View: func(in []lease.Instance, ls []lease.PartitionLease) { s.view.set(cfg.InstanceID, in, ls) },
			Ready: s.markReady, CaughtUp: func() { s.caughtOnce.Do(func() { close(s.caughtUp) }) }, Counters: &s.stats.members})
	s.ingest = &ingester{cfg: cfg, src: d.Source, store: d.Store, dlq: d.DeadLetters, sched: s.sched, own: s.own, stats: s.stats,
		m: d.Metrics, hard: s.hard}
	s.janitor = &janitor{cfg: cfg, store: d.Store, own: s.own}
	s.sampler = &sampler{cfg: cfg, stats: s.stats}
	return s, nil
}

// Ready returns a channel closed when recovery has finished.
func (s *Service) Ready() <-chan struct{} { return s.ready }

// CaughtUp returns a channel closed when ingest consumed the commands
// waiting at start, or after RecoveryCatchupMax, or when Run's context
// ends: then the overdue timeouts found by recovery are handed to the wheel,
// and timeouts fire; none fires before.
func (s *Service) CaughtUp() <-chan struct{} { return s.caughtUp }

// IsReady reports whether recovery has finished and shutdown has not begun.
func (s *Service) IsReady() bool { return s.live.Load() }

// Unready turns readiness false for good, ahead of a shutdown, so that
// load balancers stop routing before the listener closes. The service keeps
// working until Run's context ends.
func (s *Service) Unready() {
	s.draining.Store(true)
	s.live.Store(false)
}

// Kill stops the service abruptly, as a crash would: every database and
// NATS operation in flight is cancelled, nothing is drained, flushed or
// nacked. Run returns soon after. It is for tests of crash recovery.
func (s *Service) Kill() {
	s.fire.stopping.Store(true)
	s.kill()
}

// Run recovers the pending timeouts, reports ready, and then runs ingest,
// the fire path, the janitor and the stats sampler until ctx ends. Then it
// shuts down gracefully: readiness goes false, ingest finishes the batch in
// flight, the wheel stops (the timeouts it held stay pending in Postgres),
// the fires in flight are published and marked, and fetching stops. It
// returns nil after a graceful shutdown or Kill, or the error that
// prevented recovery. Run may be called once.
func (s *Service) Run(ctx context.Context) error {
	first := false
	s.runOnce.Do(func() { first = true })
	if !first {
		return errors.New("timeoutd: Run called twice")
	}
	hard := s.hard
	// ctx also ends on Kill, so every loop stops.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(hard, cancel)
	defer stop()
	defer s.sched.Stop()

	start := time.Now()
	s.startedAt.Store(&start)
	// The membership takes this instance's share of the partitions over
	// (load, consume, open) and reports ready; ingest consumes what it adds.
	// It outlives ctx: during a graceful shutdown it keeps renewing the
	// leases until the writes in flight are done and ReleaseAll hands them
	// over, so that no lease expires before the handover (Kill ends it).
	mctx, stopMembership := context.WithCancel(hard)
	defer stopMembership()
	s.membership.Start(mctx)
	components := []startstop.Service{s.ingest, s.janitor, s.sampler}
	for _, c := range components {
		c.Start(ctx)
	}
	<-ctx.Done()

	// Graceful shutdown (ctx ended, or Kill).
	s.live.Store(false)
	s.membership.Leave() // renewals only: nothing acquired or handed over now
	for _, c := range components {
		c.Stop() // ingest first: the batch in flight commits and is acked
	}
	s.fire.stopping.Store(true) // a batch the wheel cuts now stays pending
	s.sched.Stop()
	s.fire.drain()
	stopMembership()
	s.membership.Stop()
	s.caughtOnce.Do(func() { close(s.caughtUp) })
	if hard.Err() != nil {
		return nil
	}
	// Every write is done: hand the partitions over at once.
	rctx, cancel := context.WithTimeout(hard, s.cfg.LeaseTTL)
	s.membership.ReleaseAll(rctx)
	cancel()
	if err := s.src.Close(); err != nil {
		s.cfg.Logger.Warn("close command source", "err", err)
	}
	s.cfg.Logger.Info("timeoutd stopped")
	return nil
}

// markReady reports ready once the first partitions are loaded.
func (s *Service) markReady(loaded int) {
	s.readyOnce.Do(func() {
		took := time.Since(*s.startedAt.Load())
		s.live.Store(!s.draining.Load())
		close(s.ready)
		s.m.RecoveryDuration(took)
		s.cfg.Logger.Info("recovery done", "pending", loaded, "took", took)
	})
}

// Pending returns the number of pending timeouts held in memory.
func (s *Service) Pending() int { return s.sched.Len() }

// Scheduled returns the version of key the schedule holds, and whether
// it holds one: what a checker compares with what was acknowledged.
func (s *Service) Scheduled(key string) (version int64, held bool) { return s.sched.Version(key) }

// Open reports whether partition p is owned and open here: its takeover
// done, its commands applied and its timeouts scheduled.
func (s *Service) Open(p int) bool { return s.own.Open(p) }

// ListPending returns a page of pending timeouts from the read store.
func (s *Service) ListPending(ctx context.Context, q Query) ([]Timeout, error) {
	if q.Limit < 1 {
		return nil, fmt.Errorf("%w: limit must be positive", ErrInvalid)
	}
	if !q.After.Deadline.IsZero() {
		if err := events.CheckTime("after", q.After.Deadline); err != nil {
			return nil, fmt.Errorf("%w: cursor: %w", ErrInvalid, err)
		}
	}
	return s.reads.ListPending(ctx, q)
}

// GetPending returns the pending timeout of key, or ErrNotFound.
func (s *Service) GetPending(ctx context.Context, key string) (Timeout, error) {
	return s.reads.GetPending(ctx, key)
}

// Check reports whether Postgres answers; readiness also needs IsReady.
func (s *Service) Check(ctx context.Context) error { return s.store.Ping(ctx) }

// heartbeatInfo is what this instance's heartbeat publishes: its
// instanceInfo as JSON.
func (s *Service) heartbeatInfo() []byte {
	info, _ := json.Marshal(s.instanceInfo()) // cannot fail: plain fields
	return info
}

// instanceInfo is what this instance's heartbeat publishes.
func (s *Service) instanceInfo() InstanceInfo {
	st := s.Stats()
	info := InstanceInfo{Pending: st.Pending, Fired: st.Fired + st.Missed, FiredPerSec: st.FiredPerSec}
	for p, why := range s.own.View() {
		switch why {
		case "", lease.Unowned:
		case lease.Opening:
			info.Opening = append(info.Opening, p)
		default:
			info.Blocked = why
		}
	}
	recent := s.Recent(s.cfg.Recent)
	if len(recent) == 0 {
		return info
	}
	late := make([]time.Duration, len(recent))
	for i, e := range recent {
		late[i] = time.Duration(e.LatenessNs)
	}
	slices.Sort(late)
	info.LatenessP50, info.LatenessMax = late[len(late)/2], late[len(late)-1]
	return info
}

// Cluster returns the live instances of the cluster, with the partitions
// each holds and what each published, as of the last membership round
// (every LeaseRenewInterval).
func (s *Service) Cluster() []Member { return s.view.get() }

// Ownership returns every partition's owner as it really is, as of the
// last membership round: its lease by the rules (the grace after a
// restart or a silence, crash detection), and whether its owner may fire
// it, and why not, as its owner's gate said in its last heartbeat.
func (s *Service) Ownership() []PartitionOwnership { return s.view.ownership() }

// InstanceID returns this instance's id in the cluster.
func (s *Service) InstanceID() string { return s.cfg.InstanceID }

// Owned returns the partitions this instance owns.
func (s *Service) Owned() []int { return s.own.Owned() }

// Serves reports whether this instance owns partition p under leases it
// still trusts (renewed within the renew deadline). A former owner whose
// lease another instance took does not: that lease had to expire, or its
// sessions to vanish, first, and either leaves its leases untrusted here.
func (s *Service) Serves(p int) bool { return s.own.Owns(p) && s.own.Trusted() }
