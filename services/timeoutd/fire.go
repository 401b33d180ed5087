package timeoutd

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ordertimeout/ordertimeout/pkg/events"
	"github.com/ordertimeout/ordertimeout/services/timeoutd/internal/schedule"
)

// firer is the fire path: it receives the schedule's due timeouts in
// batches of at most FireBatch, at most FireConcurrency in flight; for each
// batch it reads the rows still pending, publishes their expiry events and
// waits for the PubAcks, then marks the rows fired (fenced) and reports
// each outcome to the schedule. The timeout row is the outbox: it stays
// pending until its event is stored in JetStream, so a crash at any point
// leaves it to be published again, under the same Nats-Msg-Id.
type firer struct {
	cfg   Config
	store Store
	pub   Publisher
	sched *schedule.Schedule
	own   *ownership
	stats *stats
	m     Metrics
	// hard is the context of every fire's I/O; Kill cancels it.
	hard     context.Context
	mu       sync.Mutex     // held by an onDue call in progress
	slots    chan struct{}  // one per batch in flight
	inFlight sync.WaitGroup // the batches in flight
	stopping atomic.Bool

	flightMu sync.Mutex
	flights  map[*flight]struct{} // the batches in flight, for backlog
}

// flight is a batch in flight: its size and fire time.
type flight struct {
	n       int
	firedAt time.Time
}

// onDue is the schedule's OnDue callback, never called concurrently with
// itself. A timeout of a partition still catching up is offered again
// catchupPoll later: none fires before the commands that waited for its
// partition (a clear, an extend) are applied; one of a partition no longer
// owned leaves the schedule. It returns once the last batch has started,
// so while the batches run the wheel gathers the next one, and blocks
// while FireConcurrency are in flight, so that the next batch grows with
// the backlog instead of the batches multiplying.
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

// fire reads the rows of due still pending, publishes their expiry
// events, waits for the PubAcks and marks the rows fired, then takes due
// out of the schedule. A failure at any step re-arms due to be retried
// after RetryDelay (unless a newer command replaced them meanwhile): they
// never left the schedule, so re-arming needs no room that ingest could
// have taken in between. Events published before a failure are published
// again under the same Nats-Msg-Id, which JetStream deduplicates.
func (f *firer) fire(due []schedule.Due, now time.Time) {
	fl := f.track(len(due), now)
	defer f.untrack(fl)
	rows := make([]Due, len(due))
	refs := make([]schedule.Ref, len(due))
	for i, d := range due {
		rows[i], refs[i] = Due{Key: d.Key, Version: d.Version, Deadline: d.Deadline}, d.Ref
	}
	start := time.Now()
	retry := func(step string, err error) {
		if f.hard.Err() != nil {
			return // killed: the rows are still pending in Postgres
		}
		f.cfg.Logger.Warn("fire batch failed; retrying", "step", step, "size", len(due), "err", err)
		f.sched.Rearm(refs, now.Add(f.cfg.RetryDelay))
	}
	found, err := f.store.DueRows(f.hard, rows)
	if err != nil {
		retry("read", err)
		return
	}
	if !f.own.trusted() {
		// The leases were not renewed in time: publish nothing a new owner
		// may be publishing too; the membership drops them or renews.
		retry("lease", errLeasesUntrusted)
		return
	}
	var fired, missed uint64
	evs := make([]Event, len(found))
	exps := make([]events.Expiry, len(found))
	marks := make([]Due, len(found))
	var parts []int
	for i, t := range found {
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
		e.Payload = nil            // the recent expiries keep the event without it
		evs[i], exps[i] = Event{Subject: subject, MsgID: e.MsgID(), Data: data}, e
		marks[i] = Due{Key: t.Key, Version: t.Version, Deadline: t.Deadline}
		if p := events.PartitionOf(t.Key); !slices.Contains(parts, p) {
			parts = append(parts, p)
		}
	}
	ackedAt, err := f.pub.Publish(f.hard, evs)
	if err != nil {
		retry("publish", err)
		return
	}
	// Fenced: the rows of a partition this instance no longer holds are
	// not marked; their owner publishes them again, deduplicated.
	refused, err := f.store.MarkFired(f.hard, f.own.fence(parts), marks, now)
	if err != nil {
		retry("mark", err)
		return
	}
	f.cfg.Logger.Debug("fire batch", "size", len(due), "published", len(evs), "refused", refused,
		"took", time.Since(start), "behind", time.Since(now))
	f.sched.Done(refs)
	f.m.BatchSize("fire", len(due))
	f.stats.fired.Add(fired)
	f.stats.missed.Add(missed)
	f.stats.published(exps, ackedAt, f.m)
}

// errLeasesUntrusted is a fire's error while the leases are not known to
// be renewed.
var errLeasesUntrusted = errors.New("the partition leases were not renewed within the renew deadline")

// track records a batch in flight, for backlog.
func (f *firer) track(n int, firedAt time.Time) *flight {
	fl := &flight{n: n, firedAt: firedAt}
	f.flightMu.Lock()
	defer f.flightMu.Unlock()
	if f.flights == nil {
		f.flights = make(map[*flight]struct{})
	}
	f.flights[fl] = struct{}{}
	return fl
}

func (f *firer) untrack(fl *flight) {
	f.flightMu.Lock()
	defer f.flightMu.Unlock()
	delete(f.flights, fl)
}

// backlog returns the timeouts fired and not yet done (read, publishing or
// being marked) and the age of the oldest batch's fire time at now.
func (f *firer) backlog(now time.Time) (n int64, oldest time.Duration) {
	f.flightMu.Lock()
	defer f.flightMu.Unlock()
	for fl := range f.flights {
		n += int64(fl.n)
		oldest = max(oldest, now.Sub(fl.firedAt))
	}
	return n, oldest
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
