package timeoutd

import (
	"encoding/json"
	"time"

	"github.com/ordertimeout/ordertimeout/internal/outbox"
	"github.com/ordertimeout/ordertimeout/pkg/events"
	"github.com/ordertimeout/ordertimeout/pkg/wheel"
)

// onExpire is the wheel's callback: it is never called concurrently with
// itself. It checks every expired timer against the wall clock (never early:
// a timer whose deadline has not passed by the wall clock, say because the
// clock was stepped back, is rescheduled), marks the due ones in flight
// (they keep their slot in the index until their transaction commits) and
// fires them in transactions of at most FireBatch, at most FireConcurrency
// of them in flight. It returns once the last transaction
// has started, so while the transactions run the wheel gathers the next
// batch, and blocks while FireConcurrency are in flight, so that batch
// grows with the backlog instead of the transactions multiplying.
//
// Until CaughtUp is closed it waits: no timeout fires before the commands
// that waited in the source at start (a clear, an extend) are applied.
func (s *Service) onExpire(batch []wheel.Expired[uint64]) {
	s.fireMu.Lock()
	defer s.fireMu.Unlock()
	<-s.caughtUp // closed at the latest when Run's context ends
	if s.stopping.Load() {
		return // still pending in Postgres; the next process fires them
	}
	now := s.cfg.Now()
	nowNs := now.UnixNano()
	due := make([]Due, 0, len(batch))
	refs := make([]uint64, 0, len(batch))
	s.sched.mu.Lock()
	for _, e := range batch {
		i, sl := s.sched.x.valid(e.Value)
		if sl == nil {
			continue // replaced or cleared after the wheel cut it
		}
		if sl.deadline > nowNs {
			if err := s.sched.arm(i, sl, time.Unix(0, sl.deadline)); err != nil {
				s.cfg.Logger.Error("reschedule early timer", "key", s.sched.x.key(i), "err", err)
				s.sched.removeLocked(s.sched.x.pos(i), i)
			}
			continue
		}
		due = append(due, Due{Key: s.sched.x.key(i), Version: sl.version, Deadline: time.Unix(0, sl.deadline).UTC()})
		refs = append(refs, s.sched.inFlightLocked(i, sl))
	}
	s.sched.mu.Unlock()
	for len(due) > 0 {
		n := min(len(due), s.cfg.FireBatch)
		chunk, chunkRefs := due[:n], refs[:n]
		due, refs = due[n:], refs[n:]
		s.fireSlots <- struct{}{}
		// The wall clock was checked at now; a later reading (the wait for
		// a slot) is a truer fire time, an earlier one (a clock stepped
		// back) is not used, so firedAt stays at or after every deadline.
		firedAt := now
		if t := s.cfg.Now(); t.After(now) {
			firedAt = t
		}
		s.fires.Go(func() {
			defer func() { <-s.fireSlots }()
			s.fire(chunk, chunkRefs, firedAt)
		})
	}
}

// fire marks due fired and queues their expiry events in one transaction,
// then hands the committed events to the relay, which publishes them
// without reading them back, and takes them out of memory. refs are their
// in-flight slots. On failure the timeouts are re-armed to be retried after
// RetryDelay (unless a newer command replaced them meanwhile): their slots
// never left memory, so re-arming needs no room that ingest could have
// taken in between.
func (s *Service) fire(due []Due, refs []uint64, now time.Time) {
	var fired, missed uint64
	build := func(t Timeout) outbox.Message {
		e := events.Expiry{Schema: events.SchemaVersion, Outcome: events.OutcomeFired, Key: t.Key, Version: t.Version,
			Deadline: t.Deadline, FiredAt: now.UTC(), LatenessNs: int64(now.Sub(t.Deadline)), Payload: t.Payload}
		subject := t.FireSubject
		if t.MaxLateness > 0 && now.Sub(t.Deadline) > t.MaxLateness {
			e.Outcome, subject = events.OutcomeMissed, events.MissedSubject(t.Key)
			missed++
		} else {
			fired++
		}
		data, _ := json.Marshal(e) // cannot fail: plain fields and valid JSON payload
		e.Payload = nil            // Published keeps the event without it
		return outbox.Message{Subject: subject, MsgID: e.MsgID(), Data: data, Tag: &e}
	}
	start := time.Now()
	msgs, err := s.store.Fire(s.hard, due, now, build)
	s.cfg.Logger.Debug("fire batch", "size", len(due), "took", time.Since(start), "behind", time.Since(now))
	if err != nil {
		if s.hard.Err() != nil {
			return // killed: the rows are still pending in Postgres
		}
		s.cfg.Logger.Warn("fire batch failed; retrying", "size", len(due), "err", err)
		s.sched.rearm(refs, now.Add(s.cfg.RetryDelay), s.cfg.Logger)
		return
	}
	s.sched.done(refs)
	s.m.BatchSize("fire", len(due))
	s.stats.fired.Add(fired)
	s.stats.missed.Add(missed)
	s.relay.Handoff(s.hard, msgs) // false only when killed: the rows stay in the outbox
}
