package timeoutd

import (
	"context"
	"fmt"
	"math"
	"slices"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/ordertimeout/ordertimeout/internal/retry"
	"github.com/ordertimeout/ordertimeout/services/timeoutd/internal/lease"
	"github.com/ordertimeout/ordertimeout/services/timeoutd/internal/schedule"
)

// recovery takes partitions over: it loads their pending rows into the
// schedule, starts consuming their commands, and opens their fires once the
// command backlog that waited for them is consumed. It runs at start, for
// every partition acquired, and whenever the membership acquires more.
type recovery struct {
	cfg   Config
	store Store
	src   Source
	pub   Publisher
	sched *schedule.Schedule
	own   *lease.Ownership
	// hard is the context of the store reads.
	hard context.Context
}

// Load implements lease.Partitions: it loads the leases' partitions
// (load), logs what it found, and returns the takeover, whose Open
// releases it.
func (r *recovery) Load(ctx context.Context, leases []lease.Lease) (lease.Takeover, error) {
	t, err := r.load(ctx, leases)
	if err == nil {
		r.cfg.Logger.Info("partitions acquired", "partitions", t.parts, "pending", t.loaded, "overdue", len(t.held),
			"rows", t.rows, "consumers", t.consumers)
	}
	return t, err
}

// Forget implements lease.Partitions: it stops consuming parts and takes
// their timeouts out of the schedule.
func (r *recovery) Forget(parts []int) {
	for _, p := range parts {
		r.src.Remove(p)
	}
	r.sched.Drop(func(p int) bool { return slices.Contains(parts, p) })
}

// takeover is what load found for a set of partitions, for release; it
// implements lease.Takeover.
type takeover struct {
	r      *recovery
	leases []lease.Lease
	parts  []int
	held   []schedule.Ref // the overdue timeouts, held
	marks  []uint64       // per partition, the source's backlog at load
	loaded int
	// rows and consumers are how long reading the rows and starting the
	// consumers took, for the log.
	rows, consumers time.Duration
}

// load puts every pending row of the leases' partitions into the schedule in
// keyset-paginated batches, partition by partition (the next page is read
// while the previous one goes into the wheel), then starts consuming their
// commands and reads each one's backlog mark. Ingest cannot write for a
// partition before it is consumed here, so the rows read are every write
// of the previous owner, which committed before this instance's lease
// (the fence). The overdue rows are held, for release; the others are
// armed, but none fires before release opens its partition, so a row due
// during the catch-up cannot beat a clear queued in the backlog either. A
// failed page is retried until ctx ends.
func (r *recovery) load(ctx context.Context, leases []lease.Lease) (*takeover, error) {
	parts := lease.PartitionsOf(leases)
	t := &takeover{r: r, leases: leases, parts: parts, marks: make([]uint64, len(parts))}
	start := time.Now()
	pages := make(chan []Timeout, 1)
	loadErr := make(chan error, 1)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() { loadErr <- r.loadPages(ctx, parts, pages) }()
	// A partition lost while it loads is dropped from the schedule; the
	// pages read of it before then must not land after the drop (they
	// would outlive a newer takeover of it, which never removes keys).
	owned := r.own.HeldAt(leases)
	for rows := range pages {
		entries := make([]schedule.Entry, len(rows))
		for i, row := range rows {
			entries[i] = schedule.Entry{Key: row.Key, Version: row.Version, Deadline: row.Deadline, Plain: row.Plain}
		}
		held, err := r.sched.LoadOwned(entries, r.sched.Now(), owned)
		t.held = append(t.held, held...)
		if err != nil {
			cancel()
			<-loadErr
			return t, fmt.Errorf("load pending timeouts (%d loaded, MaxPending %d): %w", t.loaded, r.cfg.MaxPending, err)
		}
		t.loaded += len(rows)
	}
	if err := <-loadErr; err != nil {
		return t, err
	}
	t.rows = time.Since(start)
	start = time.Now()
	if err := r.fence(ctx, leases); err != nil {
		return t, err
	}
	// Every partition's consumer is started and its mark read at once: on
	// a cluster each takes round trips to its consumer's leader.
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(takeoverConcurrency)
	for i, p := range parts {
		g.Go(func() error {
			if !r.consume(gctx, leases[i]) {
				return gctx.Err() // ctx ended, or handed over or lost meanwhile (nil)
			}
			if r.own.Epoch(p) == 0 {
				r.src.Remove(p) // lost while it started, and not owned again
				return nil
			}
			m, err := r.src.Mark(gctx, p)
			if err != nil {
				// Without a mark the fires wait until the consumer has
				// nothing pending or unacked (Consumed), at most
				// RecoveryCatchupMax.
				r.cfg.Logger.Warn("read the command backlog; fires wait for an empty backlog", "partition", p, "err", err)
				m = math.MaxUint64
			}
			t.marks[i] = m
			return nil
		})
	}
	err := g.Wait()
	t.consumers = time.Since(start)
	return t, err
}

// consume starts consuming l's partition (Source.Add). A failed start is
// retried every RetryDelay while the lease is held: NATS down or without
// its JetStream quorum fails every instance alike, so giving the lease up
// (the membership does, for a takeover that fails) would only hand the
// partition round until the outage ends, a lease TTL each time. It
// reports false when ctx ended or the lease was lost first.
func (r *recovery) consume(ctx context.Context, l lease.Lease) bool {
	for {
		if r.own.Epoch(l.Partition) != l.Epoch {
			return false // handed over or lost while it loaded: not ours to consume
		}
		err := r.src.Add(ctx, l.Partition)
		if err == nil {
			return true
		}
		r.cfg.Logger.Warn("consume the partition; retrying", "partition", l.Partition, "err", err)
		if !retry.Sleep(ctx, r.cfg.RetryDelay) {
			return false
		}
	}
}

// fence fences the leases' partitions in the expiry stream
// (Publisher.Fence) before any command of theirs is consumed here: from
// then on the stream refuses what a former owner publishes for them late
// (a publish sent before its lease lapsed, stored after), so that none
// lands after a command this instance acknowledges. A partition lost
// meanwhile keeps no fence. A failed fence is retried until ctx ends.
func (r *recovery) fence(ctx context.Context, leases []lease.Lease) error {
	for {
		// Under ctx, not the hard context of the reads: a graceful stop
		// ends the takeover and waits for it with the renewals stopped, so
		// a publish held up (a stalled NATS) would let the leases expire
		// before they are handed over (the simulation's seed 303695).
		seqs, err := r.pub.Fence(ctx, lease.Fence{Owner: r.cfg.InstanceID, Leases: leases}, nil)
		if err == nil {
			for i, l := range leases {
				r.own.Fenced(l.Partition, l.Epoch, seqs[i])
			}
			return nil
		}
		r.cfg.Logger.Warn("fence the partitions in the expiry stream; retrying", "partitions", lease.PartitionsOf(leases), "err", err)
		if !retry.Sleep(ctx, r.cfg.RetryDelay) {
			return fmt.Errorf("fence the partitions: %w", err)
		}
	}
}

// loadPages sends the pending rows of parts page by page on pages, then
// closes it.
func (r *recovery) loadPages(ctx context.Context, parts []int, pages chan<- []Timeout) error {
	defer close(pages)
	for _, p := range parts {
		after := ""
		for {
			rows, err := r.store.LoadPending(r.hard, p, after, r.cfg.RecoveryBatch)
			if err != nil {
				r.cfg.Logger.Warn("load pending timeouts; retrying", "partition", p, "after", after, "err", err)
				if !retry.Sleep(ctx, r.cfg.RetryDelay) {
					return fmt.Errorf("load pending timeouts: %w", err)
				}
				continue
			}
			select {
			case pages <- rows:
			case <-ctx.Done():
				return ctx.Err()
			}
			if len(rows) < r.cfg.RecoveryBatch {
				break
			}
			after = rows[len(rows)-1].Key
		}
	}
	return nil
}

// Loaded implements lease.Takeover.
func (t *takeover) Loaded() int { return t.loaded }

// Open implements lease.Takeover with release.
func (t *takeover) Open(ctx context.Context) bool { return t.r.release(ctx, t) }

// release opens the fires of t's partitions once the source has consumed
// every command of each up to its mark (the backlog that waited while no
// instance owned it: a clear among it must reach Postgres and the schedule
// before the timeout it clears is fired), or RecoveryCatchupMax passed: it
// hands the held overdue timeouts to the wheel spread at OverdueRate from
// now, so a long outage does not flood NATS, and opens the partitions. A
// held timeout that a newer command replaced or cleared meanwhile is
// skipped. It returns early, leaving the partitions closed, when ctx ends.
func (r *recovery) release(ctx context.Context, t *takeover) bool {
	start := time.Now()
	waiting := make([]int, len(t.parts)) // indexes into t.parts
	for i := range waiting {
		waiting[i] = i
	}
	warned := make([]bool, len(t.parts)) // a failed check is logged once a partition
	for len(waiting) > 0 {
		done := make([]bool, len(waiting))
		var g errgroup.Group
		g.SetLimit(takeoverConcurrency)
		for j, i := range waiting {
			if r.own.Epoch(t.parts[i]) != t.leases[i].Epoch {
				done[j] = true // handed over or lost meanwhile: no longer ours to wait for
				continue
			}
			g.Go(func() error {
				ok, err := r.src.Consumed(ctx, t.parts[i], t.marks[i])
				if err != nil && ctx.Err() == nil && !warned[i] {
					warned[i] = true
					r.cfg.Logger.Warn("check the command backlog; retrying", "partition", t.parts[i], "err", err)
				}
				done[j] = ok
				return nil
			})
		}
		_ = g.Wait()
		left := waiting[:0]
		for j, i := range waiting {
			if !done[j] {
				left = append(left, i)
			}
		}
		waiting = left
		if len(waiting) == 0 {
			break
		}
		if time.Since(start) >= r.cfg.RecoveryCatchupMax {
			r.cfg.Logger.Warn("command backlog not consumed within RecoveryCatchupMax; releasing the fires",
				"partitions", len(waiting), "waited", time.Since(start))
			break
		}
		if !retry.Sleep(ctx, catchupPoll) {
			return false
		}
	}
	released := r.sched.Release(t.held, r.sched.Now(), r.cfg.OverdueRate)
	var opened []int // the partitions still owned at their takeover's epoch
	for _, l := range t.leases {
		if r.own.OpenAt(l.Partition, l.Epoch) {
			opened = append(opened, l.Partition)
		}
	}
	r.cfg.Logger.Info("partitions open", "partitions", opened, "pending", t.loaded, "overdue", len(t.held),
		"released", released, "waited", time.Since(start))
	return true
}

// takeoverConcurrency bounds the partitions of a takeover whose consumer
// is started, or whose backlog is checked, at once.
const takeoverConcurrency = 16

// catchupPoll is how often release asks the source whether the backlog is
// consumed, and how soon a timeout of a partition still catching up is
// offered again.
const catchupPoll = 20 * time.Millisecond
