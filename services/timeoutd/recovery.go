package timeoutd

import (
	"context"
	"fmt"
	"time"
)

// recover loads every pending row into the schedule in keyset-paginated
// batches (the next page is read while the previous one goes into the
// wheel), spreads the overdue ones at OverdueRate from now (so they fire at
// once but at a bounded rate), flushes what a previous process left in the
// outbox, and then reports ready. A failed page is retried until ctx ends.
func (s *Service) recover(ctx context.Context) error {
	start := s.cfg.Now()
	pages := make(chan []Timeout, 1)
	loadErr := make(chan error, 1)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() { loadErr <- s.loadPages(ctx, pages) }()
	loaded, overdue := 0, 0
	for rows := range pages {
		now := s.cfg.Now()
		s.sched.mu.Lock()
		for _, r := range rows {
			at := r.Deadline
			if !at.After(now) {
				at = now.Add(time.Duration(overdue) * time.Second / time.Duration(s.cfg.OverdueRate))
				overdue++
			}
			if err := s.sched.setLocked(r.Key, r.Version, r.Deadline, at); err != nil {
				s.sched.mu.Unlock()
				cancel()
				<-loadErr
				return fmt.Errorf("load pending timeouts (%d loaded, MaxPending %d): %w", loaded, s.cfg.MaxPending, err)
			}
		}
		s.sched.mu.Unlock()
		loaded += len(rows)
	}
	if err := <-loadErr; err != nil {
		return err
	}
	flushed, err := s.relay.Flush(s.hard)
	if err != nil {
		// The relay's Run keeps retrying; readiness does not wait for NATS
		// to come back, the outbox is durable.
		s.cfg.Logger.Warn("flush outbox at recovery", "err", err)
	}
	took := s.cfg.Now().Sub(start)
	s.markReady(took)
	s.cfg.Logger.Info("recovery done", "pending", loaded, "overdue", overdue, "outbox_flushed", flushed, "took", took)
	return nil
}

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
