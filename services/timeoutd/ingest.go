package timeoutd

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/ordertimeout/ordertimeout/pkg/events"
)

// runIngest takes command batches from the source until ctx ends. Each
// batch is split into IngestLanes sub-batches by key partition (so the
// commands of one key stay in order in one lane) that are processed
// concurrently, each to the end with the hard context: validate,
// dead-letter the invalid, upsert the rest in one statement, commit, ack,
// apply to the schedule. The next batch starts when every lane is done. A
// failed sub-batch is retried as a whole, which is harmless: the upsert
// ignores versions already stored.
func (s *Service) runIngest(ctx context.Context) {
	lanes := make([][]Message, s.cfg.IngestLanes)
	for {
		msgs, err := s.src.Next(ctx)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			s.cfg.Logger.Warn("fetch commands", "err", err)
			if !sleep(ctx, s.cfg.RetryDelay) {
				return
			}
			continue
		}
		if !s.waitRoom(ctx, len(msgs)) {
			return
		}
		s.m.BatchSize("ingest", len(msgs))
		for i := range lanes {
			lanes[i] = lanes[i][:0]
		}
		for _, m := range msgs {
			key := strings.TrimPrefix(m.Subject(), events.CommandSubjectPrefix)
			l := PartitionOf(key, len(lanes))
			lanes[l] = append(lanes[l], m)
		}
		var wg sync.WaitGroup
		for _, lane := range lanes {
			if len(lane) > 0 {
				wg.Go(func() { s.ingestRetrying(ctx, lane) })
			}
		}
		wg.Wait()
		if ctx.Err() != nil {
			return
		}
	}
}

// ingestRetrying processes msgs until it succeeds or ctx ends; stopping
// with them unacked is safe: they are redelivered.
func (s *Service) ingestRetrying(ctx context.Context, msgs []Message) {
	for {
		err := s.ingest(s.hard, msgs)
		if err == nil {
			return
		}
		s.cfg.Logger.Warn("ingest batch failed; retrying", "size", len(msgs), "err", err)
		if !sleep(ctx, s.cfg.RetryDelay) {
			return
		}
	}
}

// waitRoom blocks while taking n more commands could exceed MaxPending
// (backpressure: the commands wait in JetStream). It reports whether ctx is
// still alive.
func (s *Service) waitRoom(ctx context.Context, n int) bool {
	for warned := false; s.sched.len()+n > s.cfg.MaxPending; warned = true {
		if !warned {
			s.cfg.Logger.Warn("pending timeouts at MaxPending; ingest paused", "max_pending", s.cfg.MaxPending)
		}
		if !sleep(ctx, s.cfg.RetryDelay) {
			return false
		}
	}
	return true
}

// ingest processes one batch.
func (s *Service) ingest(ctx context.Context, msgs []Message) error {
	now := s.cfg.Now()
	cmds := make([]events.Command, 0, len(msgs))
	valid := make([]Message, 0, len(msgs))
	newest := make(map[string]int, len(msgs)) // key → index in cmds
	for _, m := range msgs {
		cmd, err := s.decode(m, now)
		if err != nil {
			if err := s.deadLetter(ctx, m, err, now); err != nil {
				return err
			}
			continue
		}
		valid = append(valid, m)
		if i, ok := newest[cmd.Key]; ok {
			if cmd.Version > cmds[i].Version {
				cmds[i] = cmd
			}
			continue
		}
		newest[cmd.Key] = len(cmds)
		cmds = append(cmds, cmd)
	}
	if len(cmds) == 0 {
		return nil
	}
	changes, err := s.store.Apply(ctx, cmds, s.cfg.Partitions, now)
	if err != nil {
		return fmt.Errorf("apply %d commands: %w", len(cmds), err)
	}
	for _, m := range valid {
		if err := m.Ack(); err != nil {
			// Committed already: a redelivery is a harmless no-op.
			s.cfg.Logger.Warn("ack command", "seq", m.Seq(), "err", err)
		}
	}
	s.apply(changes)
	return nil
}

// apply brings the schedule in line with committed changes.
func (s *Service) apply(changes []Change) {
	var set, cleared uint64
	s.sched.mu.Lock()
	for _, c := range changes {
		if c.State != StatePending {
			s.sched.clearLocked(c.Key, c.Version)
			cleared++
			continue
		}
		if err := s.sched.setLocked(c.Key, c.Version, c.Deadline, c.Deadline); err != nil {
			// Pending in Postgres, so the next recovery loads it.
			s.cfg.Logger.Error("timeout committed but not scheduled in memory", "key", c.Key, "err", err)
			continue
		}
		set++
	}
	s.sched.mu.Unlock()
	s.stats.scheduled.Add(set)
	s.stats.cleared.Add(cleared)
}

// decode parses a command and applies the service's own rules: the subject
// matches the key, the fire subject is under an allowed prefix, and the
// deadline is within MaxHorizon.
func (s *Service) decode(m Message, now time.Time) (events.Command, error) {
	cmd, err := events.DecodeCommand(m.Data())
	if err != nil {
		return cmd, err
	}
	if m.Subject() != cmd.Subject() {
		return cmd, &events.Error{Reason: events.ReasonSubjectMismatch, Field: "key",
			Detail: fmt.Sprintf("key %q does not match subject %q", cmd.Key, m.Subject())}
	}
	if cmd.Kind != events.KindSet {
		return cmd, nil
	}
	allowed := false
	for _, p := range s.cfg.FireSubjectPrefixes {
		allowed = allowed || strings.HasPrefix(cmd.FireSubject, p)
	}
	if !allowed {
		return cmd, &events.Error{Reason: events.ReasonSubjectNotAllowed, Field: "fire_subject",
			Detail: fmt.Sprintf("must start with one of %v", s.cfg.FireSubjectPrefixes)}
	}
	if cmd.Deadline.After(now.Add(s.cfg.MaxHorizon)) {
		return cmd, &events.Error{Reason: events.ReasonDeadlineOutOfRange, Field: "deadline",
			Detail: fmt.Sprintf("is more than %v ahead", s.cfg.MaxHorizon)}
	}
	return cmd, nil
}

// deadLetter publishes the rejected message with its reason, waits for the
// PubAck, and terminates it so it is never redelivered.
func (s *Service) deadLetter(ctx context.Context, m Message, cause error, now time.Time) error {
	d := events.NewDeadLetter(m.Subject(), m.Data(), m.Seq(), cause, now)
	if err := s.dlq.DeadLetter(ctx, d); err != nil {
		return fmt.Errorf("dead-letter seq %d: %w", m.Seq(), err)
	}
	if err := m.Term(); err != nil {
		s.cfg.Logger.Warn("terminate dead-lettered command", "seq", m.Seq(), "err", err)
	}
	s.stats.deadLettered.Add(1)
	s.m.DeadLettered(d.Reason)
	s.cfg.Logger.Info("command dead-lettered", "subject", m.Subject(), "seq", m.Seq(), "reason", d.Reason, "field", d.Field)
	return nil
}
