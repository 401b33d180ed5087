package timeoutd

import (
	"context"
	"encoding/json"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ordertimeout/ordertimeout/internal/outbox"
	"github.com/ordertimeout/ordertimeout/pkg/events"
	"github.com/ordertimeout/ordertimeout/services/timeoutd/internal/schedule"
)

// firer is the fire path: it receives the schedule's due timeouts, marks
// them fired and writes their expiry events to the outbox in transactions
// of at most FireBatch, at most FireConcurrency in flight, hands the
// committed events to the relay and reports each outcome to the schedule.
type firer struct {
	cfg   Config
	store Store
	relay Relay
	sched *schedule.Schedule
	own   *ownership
	stats *stats
	m     Metrics
	// hard is the context of every fire transaction; Kill cancels it.
	hard     context.Context
	mu       sync.Mutex     // held by an onDue call in progress
	slots    chan struct{}  // one per fire transaction in flight
	inFlight sync.WaitGroup // the fire transactions in flight
	stopping atomic.Bool
}

// onDue is the schedule's OnDue callback, never called concurrently with
// itself. A timeout of a partition still catching up is offered again
// catchupPoll later: none fires before the commands that waited for its
// partition (a clear, an extend) are applied; one of a partition no longer
// owned leaves the schedule. It returns once the last transaction has
// started, so while the
// transactions run the wheel gathers the next batch, and blocks while
// FireConcurrency are in flight, so that batch grows with the backlog
// instead of the transactions multiplying.
func (f *firer) onDue(due []schedule.Due) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.stopping.Load() {
		return // still pending in Postgres; the next process fires them
	}
	now := f.cfg.Now()
	var wait, gone []schedule.Ref
	ready := due[:0]
	for _, d := range due {
		switch p := events.PartitionOf(d.Key); {
		case f.own.isOpen(p):
			ready = append(ready, d)
		case f.own.owns(p):
			wait = append(wait, d.Ref)
		default:
			gone = append(gone, d.Ref)
		}
	}
	f.sched.Rearm(wait, now.Add(catchupPoll))
	f.sched.Done(gone)
	due = ready
	for len(due) > 0 {
		n := min(len(due), f.cfg.FireBatch)
		chunk := due[:n]
		due = due[n:]
		f.slots <- struct{}{}
		// The schedule checked the wall clock before now; a later reading
		// (the wait for a slot) is a truer fire time, an earlier one (a
		// clock stepped back) is not used, so firedAt stays at or after
		// every deadline.
		firedAt := now
		if t := f.cfg.Now(); t.After(now) {
			firedAt = t
		}
		f.inFlight.Go(func() {
			defer func() { <-f.slots }()
			f.fire(chunk, firedAt)
		})
	}
}

// fire marks due fired and queues their expiry events in one transaction,
// then hands the committed events to the relay, which publishes them
// without reading them back, and takes them out of the schedule. On
// failure the timeouts are re-armed to be retried after RetryDelay (unless
// a newer command replaced them meanwhile): they never left the schedule,
// so re-arming needs no room that ingest could have taken in between.
func (f *firer) fire(due []schedule.Due, now time.Time) {
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
	rows := make([]Due, len(due))
	refs := make([]schedule.Ref, len(due))
	var parts []int
	for i, d := range due {
		rows[i], refs[i] = Due{Key: d.Key, Version: d.Version, Deadline: d.Deadline}, d.Ref
		if p := events.PartitionOf(d.Key); !slices.Contains(parts, p) {
			parts = append(parts, p)
		}
	}
	start := time.Now()
	// Fenced: the rows of a partition this instance no longer holds are
	// not fired (and leave the schedule with the others: the owner fires
	// them).
	msgs, err := f.store.Fire(f.hard, f.own.fence(parts), rows, now, build)
	f.cfg.Logger.Debug("fire batch", "size", len(due), "took", time.Since(start), "behind", time.Since(now))
	if err != nil {
		if f.hard.Err() != nil {
			return // killed: the rows are still pending in Postgres
		}
		f.cfg.Logger.Warn("fire batch failed; retrying", "size", len(due), "err", err)
		f.sched.Rearm(refs, now.Add(f.cfg.RetryDelay))
		return
	}
	f.sched.Done(refs)
	f.m.BatchSize("fire", len(due))
	f.stats.fired.Add(fired)
	f.stats.missed.Add(missed)
	f.relay.Handoff(f.hard, msgs) // false only when killed: the rows stay in the outbox
}

// drain stops firing: an onDue call in progress finishes starting its
// transactions, later ones fire nothing, and drain returns when the
// transactions in flight are done. The schedule must be stopped first.
func (f *firer) drain() {
	f.stopping.Store(true)
	f.mu.Lock() // waits for an onDue call starting fire transactions
	//lint:ignore SA2001 a barrier: taking the lock is the point.
	f.mu.Unlock()
	f.inFlight.Wait()
}
