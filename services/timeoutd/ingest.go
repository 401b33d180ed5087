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
// ignores versions already stored. Ingest never waits for room in memory:
// the sets that do not fit are deferred (see admit).
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

// ingest processes one batch.
func (s *Service) ingest(ctx context.Context, msgs []Message) error {
	now := s.cfg.Now()
	cmds := make([]events.Command, 0, len(msgs))
	valid := make([]Message, 0, len(msgs))
	keys := make([]string, 0, len(msgs))      // keys[i] is valid[i]'s key
	newest := make(map[string]int, len(msgs)) // key → index in cmds
	for _, m := range msgs {
		cmd, err := s.decode(m, now)
		if err != nil {
			if err := s.deadLetter(ctx, m, err, now); err != nil {
				return err
			}
			continue
		}
		valid, keys = append(valid, m), append(keys, cmd.Key)
		if i, ok := newest[cmd.Key]; ok {
			if cmd.Version > cmds[i].Version {
				cmds[i] = cmd
			}
			continue
		}
		newest[cmd.Key] = len(cmds)
		cmds = append(cmds, cmd)
	}
	cmds, deferred, reserved := s.admit(cmds)
	defer s.unreserve(reserved)
	if len(cmds) > 0 {
		changes, err := s.store.Apply(ctx, cmds, s.cfg.Partitions, now)
		if err != nil {
			return fmt.Errorf("apply %d commands: %w", len(cmds), err)
		}
		defer s.apply(changes)
	}
	for i, m := range valid {
		if deferred[keys[i]] {
			if err := m.NakWithDelay(s.cfg.RetryDelay); err != nil {
				s.cfg.Logger.Warn("defer command", "seq", m.Seq(), "err", err)
			}
			continue
		}
		if err := m.Ack(); err != nil {
			// Committed already: a redelivery is a harmless no-op.
			s.cfg.Logger.Warn("ack command", "seq", m.Seq(), "err", err)
		}
	}
	if len(deferred) > 0 {
		s.cfg.Logger.Warn("pending timeouts at MaxPending; new sets deferred", "deferred", len(deferred),
			"max_pending", s.cfg.MaxPending, "retry_in", s.cfg.RetryDelay)
	}
	return nil
}

// admit reserves room in memory for the sets of cmds whose key is not held
// there, the only commands that can grow it, and returns the commands to
// apply, the keys of the sets deferred for want of room (their messages are
// redelivered after RetryDelay) and the number of slots reserved, to be
// given back with unreserve once the changes are applied. Clears and sets of
// a held key (a move, or a stale version) always pass, so a full memory
// never stops the commands that free it. A set older than a tombstone that
// only Postgres holds counts as new: telling it stale would cost a read.
// Deferring reorders a key's commands, which is safe: the upsert keeps the
// newest version whatever the order of arrival.
func (s *Service) admit(cmds []events.Command) (admitted []events.Command, deferred map[string]bool, reserved int) {
	s.sched.mu.Lock()
	defer s.sched.mu.Unlock()
	room := s.cfg.MaxPending - s.sched.x.len() - s.sched.reserved
	admitted = cmds[:0]
	for _, c := range cmds {
		if c.Kind == events.KindSet && !s.sched.has(c.Key) {
			if reserved == room {
				if deferred == nil {
					deferred = make(map[string]bool)
				}
				deferred[c.Key] = true
				continue
			}
			reserved++
		}
		admitted = append(admitted, c)
	}
	s.sched.reserved += reserved
	return admitted, deferred, reserved
}

// unreserve gives back n slots reserved by admit.
func (s *Service) unreserve(n int) {
	if n == 0 {
		return
	}
	s.sched.mu.Lock()
	s.sched.reserved -= n
	s.sched.mu.Unlock()
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
