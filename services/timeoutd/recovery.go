package timeoutd

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/ordertimeout/ordertimeout/internal/startstop"
	"github.com/ordertimeout/ordertimeout/services/timeoutd/internal/schedule"
)

// recovery rebuilds the schedule from the store at start (load) and then,
// as a component (Start), holds the fires until the command backlog that
// waited at start is consumed and releases the overdue timeouts.
type recovery struct {
	startstop.Base
	cfg   Config
	store Store
	src   Source
	relay Relay
	sched *schedule.Schedule
	// hard is the context of the store reads and the outbox flush.
	hard context.Context
	// open is closed when the backlog is consumed (or after
	// RecoveryCatchupMax, or when the release loop ends): fires may go.
	open chan struct{}

	held []schedule.Ref // the overdue timeouts, held by load
	mark uint64         // the source's backlog at load
}

// load puts every pending row into the schedule in keyset-paginated
// batches (the next page is read while the previous one goes into the
// wheel), reads the source's backlog mark and flushes what a previous
// process left in the outbox. The overdue rows are held, for Start to
// release; the others are armed, but none fires before open is closed, so
// a row due during the catch-up cannot beat a clear queued in the backlog
// either. A failed page is retried until ctx ends. It returns the number
// of rows loaded.
func (r *recovery) load(ctx context.Context) (int, error) {
	pages := make(chan []Timeout, 1)
	loadErr := make(chan error, 1)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() { loadErr <- r.loadPages(ctx, pages) }()
	loaded := 0
	for rows := range pages {
		entries := make([]schedule.Entry, len(rows))
		for i, t := range rows {
			entries[i] = schedule.Entry{Key: t.Key, Version: t.Version, Deadline: t.Deadline}
		}
		held, err := r.sched.Load(entries, r.cfg.Now())
		r.held = append(r.held, held...)
		if err != nil {
			cancel()
			<-loadErr
			return loaded, fmt.Errorf("load pending timeouts (%d loaded, MaxPending %d): %w", loaded, r.cfg.MaxPending, err)
		}
		loaded += len(rows)
	}
	if err := <-loadErr; err != nil {
		return loaded, err
	}
	var err error
	if r.mark, err = r.src.Mark(ctx); err != nil {
		// Without a mark the fires wait the whole RecoveryCatchupMax.
		r.cfg.Logger.Warn("read the command backlog; fires wait RecoveryCatchupMax", "err", err)
		r.mark = math.MaxUint64
	}
	flushed, err := r.relay.Flush(r.hard)
	if err != nil {
		// The relay keeps retrying; readiness does not wait for NATS to
		// come back, the outbox is durable.
		r.cfg.Logger.Warn("flush outbox at recovery", "err", err)
	}
	r.cfg.Logger.Info("pending timeouts loaded", "pending", loaded, "overdue", len(r.held), "outbox_flushed", flushed)
	return loaded, nil
}

// loadPages sends the pending rows page by page on pages, then closes it.
func (r *recovery) loadPages(ctx context.Context, pages chan<- []Timeout) error {
	defer close(pages)
	after := ""
	for {
		rows, err := r.store.LoadPending(r.hard, after, r.cfg.RecoveryBatch)
		if err != nil {
			r.cfg.Logger.Warn("load pending timeouts; retrying", "after", after, "err", err)
			if !sleep(ctx, r.cfg.RetryDelay) {
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
			return nil
		}
		after = rows[len(rows)-1].Key
	}
}

// Start releases the fires once the source has consumed every command up
// to the mark read by load (the backlog that waited while no process ran:
// a clear among it must reach Postgres and the schedule before the timeout
// it clears is fired), or RecoveryCatchupMax passed: it hands the held
// overdue timeouts to the wheel spread at OverdueRate from now, so a long
// outage does not flood NATS, and closes open, which lets every fire go.
// A held timeout that a newer command replaced or cleared meanwhile is
// skipped. open is closed too when ctx ends first.
func (r *recovery) Start(ctx context.Context) { r.Base.Start(ctx, r.release) }

func (r *recovery) release(ctx context.Context) {
	defer close(r.open)
	start := time.Now()
	for {
		done, err := r.src.Consumed(ctx, r.mark)
		if done {
			break
		}
		if err != nil && ctx.Err() == nil {
			r.cfg.Logger.Warn("check the command backlog", "err", err)
		}
		if time.Since(start) >= r.cfg.RecoveryCatchupMax {
			r.cfg.Logger.Warn("command backlog not consumed within RecoveryCatchupMax; releasing the fires",
				"mark", r.mark, "waited", time.Since(start))
			break
		}
		if !sleep(ctx, catchupPoll) {
			return
		}
	}
	if len(r.held) == 0 {
		return
	}
	released := r.sched.Release(r.held, r.cfg.Now(), r.cfg.OverdueRate)
	r.cfg.Logger.Info("overdue timeouts released", "held", len(r.held), "released", released, "waited", time.Since(start))
	r.held = nil
}

// catchupPoll is how often the release loop asks the source whether the
// backlog is consumed.
const catchupPoll = 20 * time.Millisecond
