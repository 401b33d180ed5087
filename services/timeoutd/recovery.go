package timeoutd

import (
	"context"
	"fmt"
	"math"
	"time"
)

// recover loads every pending row into the schedule in keyset-paginated
// batches (the next page is read while the previous one goes into the
// wheel), flushes what a previous process left in the outbox, and then
// reports ready. The overdue rows go into the index but not into the wheel:
// they are held, and returned with the source's mark read after the load,
// for releaseOverdue. The other rows are armed, but no timer fires before
// releaseOverdue closes CaughtUp (onExpire waits for it), so a row due
// during the catch-up cannot beat a clear queued in the backlog either. A
// failed page is retried until ctx ends.
func (s *Service) recover(ctx context.Context) (held []uint64, mark uint64, err error) {
	start := s.cfg.Now()
	pages := make(chan []Timeout, 1)
	loadErr := make(chan error, 1)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() { loadErr <- s.loadPages(ctx, pages) }()
	loaded := 0
	for rows := range pages {
		nowNs := s.cfg.Now().UnixNano()
		s.sched.mu.Lock()
		for _, r := range rows {
			var err error
			if r.Deadline.UnixNano() <= nowNs {
				var h uint64
				if h, err = s.sched.holdLocked(r.Key, r.Version, r.Deadline); err == nil {
					held = append(held, h)
				}
			} else {
				err = s.sched.setLocked(r.Key, r.Version, r.Deadline, r.Deadline)
			}
			if err != nil {
				s.sched.mu.Unlock()
				cancel()
				<-loadErr
				return nil, 0, fmt.Errorf("load pending timeouts (%d loaded, MaxPending %d): %w", loaded, s.cfg.MaxPending, err)
			}
		}
		s.sched.mu.Unlock()
		loaded += len(rows)
	}
	if err := <-loadErr; err != nil {
		return nil, 0, err
	}
	if mark, err = s.src.Mark(ctx); err != nil {
		// Without a mark the fires wait the whole RecoveryCatchupMax.
		s.cfg.Logger.Warn("read the command backlog; fires wait RecoveryCatchupMax", "err", err)
		mark = math.MaxUint64
	}
	flushed, err := s.relay.Flush(s.hard)
	if err != nil {
		// The relay's Run keeps retrying; readiness does not wait for NATS
		// to come back, the outbox is durable.
		s.cfg.Logger.Warn("flush outbox at recovery", "err", err)
	}
	took := s.cfg.Now().Sub(start)
	s.markReady(took)
	s.cfg.Logger.Info("recovery done", "pending", loaded, "overdue", len(held), "outbox_flushed", flushed, "took", took)
	return held, mark, nil
}

// releaseOverdue waits until the source has consumed every command up to
// mark (the backlog that waited while no process ran: a clear among it must
// reach Postgres and the index before the timeout it clears is fired), or
// RecoveryCatchupMax passed, and then hands the held overdue timeouts to the
// wheel spread at OverdueRate from now, so a long outage does not flood
// NATS. A held timeout that a newer command replaced or cleared meanwhile is
// skipped. It closes CaughtUp's channel when done, which lets every fire
// go (onExpire waits for it), or when ctx ends.
func (s *Service) releaseOverdue(ctx context.Context, held []uint64, mark uint64) {
	defer close(s.caughtUp)
	start := time.Now()
	for {
		done, err := s.src.Consumed(ctx, mark)
		if done {
			break
		}
		if err != nil && ctx.Err() == nil {
			s.cfg.Logger.Warn("check the command backlog", "err", err)
		}
		if time.Since(start) >= s.cfg.RecoveryCatchupMax {
			s.cfg.Logger.Warn("command backlog not consumed within RecoveryCatchupMax; releasing the fires",
				"mark", mark, "waited", time.Since(start))
			break
		}
		if !sleep(ctx, catchupPoll) {
			return
		}
	}
	if len(held) == 0 {
		return
	}
	now := s.cfg.Now()
	released := 0
	s.sched.mu.Lock()
	for _, r := range held {
		at := now.Add(time.Duration(released) * time.Second / time.Duration(s.cfg.OverdueRate))
		if s.sched.releaseLocked(r, at) {
			released++
		}
	}
	s.sched.mu.Unlock()
	s.cfg.Logger.Info("overdue timeouts released", "held", len(held), "released", released, "waited", time.Since(start))
}

// catchupPoll is how often releaseOverdue asks the source whether the
// backlog is consumed.
const catchupPoll = 20 * time.Millisecond

// loadPages sends the pending rows page by page on pages, then closes it.
func (s *Service) loadPages(ctx context.Context, pages chan<- []Timeout) error {
	defer close(pages)
	after := ""
	for {
		rows, err := s.store.LoadPending(s.hard, after, s.cfg.RecoveryBatch)
		if err != nil {
			s.cfg.Logger.Warn("load pending timeouts; retrying", "after", after, "err", err)
			if !sleep(ctx, s.cfg.RetryDelay) {
				return fmt.Errorf("load pending timeouts: %w", err)
			}
			continue
		}
		select {
		case pages <- rows:
		case <-ctx.Done():
			return ctx.Err()
		}
		if len(rows) < s.cfg.RecoveryBatch {
			return nil
		}
		after = rows[len(rows)-1].Key
	}
}
