package timeoutd

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/ordertimeout/ordertimeout/internal/tracing"
	"github.com/ordertimeout/ordertimeout/pkg/events"
	"github.com/ordertimeout/ordertimeout/services/timeoutd/internal/lease"
	"github.com/ordertimeout/ordertimeout/services/timeoutd/internal/schedule"
	"github.com/ordertimeout/ordertimeout/services/timeoutd/internal/waitlock"
)

// firer is the fire path: it receives the schedule's due timeouts in
// batches of at most FireBatch, at most FireConcurrency in flight; for each
// batch it reads the rows still pending of the timeouts that are not plain
// (a plain one's event is made from what the schedule holds), publishes
// their expiry events and waits for the PubAcks. That frees the batch's
// slot; the rows are then marked fired (fenced) together with those of
// every other batch published within MarkDelay, in one transaction, and
// each outcome is reported to the schedule. The timeout row is the outbox: it stays pending until its
// event is stored in JetStream and the mark is committed, so a crash at any
// point leaves it to be published again, under the same Nats-Msg-Id.
type firer struct {
	cfg   Config
	store Store
	pub   Publisher
	sched *schedule.Schedule
	own   *lease.Ownership
	stats *stats
	m     Metrics
	// hard is the context of every fire's I/O; Kill cancels it.
	hard     context.Context
	mu       waitlock.Mutex // held by an onDue call in progress
	slots    chan struct{}  // one per batch in flight
	inFlight sync.WaitGroup // the batches in flight
	stopping atomic.Bool

	flightMu sync.Mutex
	flights  map[*flight]struct{} // the batches in flight, for backlog

	markMu  sync.Mutex
	marks   []*published // published, waiting for the next mark
	marking bool         // a goroutine is marking; it takes marks until none is left
}

// published is a batch whose events are stored, waiting to be marked.
type published struct {
	fl   *flight
	refs []schedule.Ref
	keys []string // of refs
	rows []Due
	// outcomes are those of rows: fired (or found already stored), or
	// missed.
	outcomes []events.Outcome
	parts    []int
	exps     []events.Expiry
	ackedAt  time.Time
	firedAt  time.Time
	fired    uint64
	missed   uint64
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
	now := f.sched.Now()
	var parts []int
	var seen [events.Partitions]bool
	for _, d := range due {
		if p := events.PartitionOf(d.Key); !seen[p] {
			seen[p], parts = true, append(parts, p)
		}
	}
	gate := f.own.Gate(parts)
	var wait, gone []schedule.Ref
	ready := due[:0]
	for _, d := range due {
		switch p := events.PartitionOf(d.Key); {
		case gate.Open(p):
			ready = append(ready, d)
		case gate.Owned(p):
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
		// The schedule checked the clock before now; a later reading (the
		// wait for a slot) is a truer fire time, an earlier one (a lower
		// bound of Postgres's clock measured anew) is not used, so firedAt
		// stays at or after every deadline.
		firedAt := now
		if t := f.sched.Now(); t.After(now) {
			firedAt = t
		}
		f.inFlight.Go(func() {
			p := f.publish(chunk, firedAt)
			<-f.slots
			if p != nil {
				f.mark(p)
			}
		})
	}
}

// publish gets the rows of due to fire (firer.rows), publishes their
// expiry events and waits for the PubAcks; it returns the batch to mark,
// or nil when a step failed: then due is re-armed to be retried after
// RetryDelay (unless a newer command replaced it meanwhile). The timeouts
// never left the schedule, so re-arming needs no room that ingest could
// have taken in between. Events published before a failure are published
// again under the same Nats-Msg-Id, which JetStream deduplicates.
func (f *firer) publish(due []schedule.Due, now time.Time) *published {
	p := &published{fl: f.track(len(due), now), refs: make([]schedule.Ref, len(due)), keys: make([]string, len(due)), firedAt: now}
	for i, d := range due {
		p.refs[i], p.keys[i] = d.Ref, d.Key
	}
	found, refs, err := f.rows(due)
	if err != nil {
		f.retry(p, "read", err)
		return nil
	}
	// The gate of the batch's partitions, those open here pinned: one
	// handed over since the hand-out is not published for, and one handed
	// over from now on is released only after this publish
	// (lease.Membership waits for it).
	var parts []int
	for _, t := range found {
		parts = appendPartitions(parts, events.PartitionOf(t.Key))
	}
	gate := f.own.PinGate(parts)
	defer gate.Close()
	if !f.gated(p, gate.Why()) {
		return nil
	}
	// Claim what is still current: a timeout replaced or cleared by a
	// command applied since the hand-out is not published, and the
	// commands applied from now on wait for the PubAcks of those claimed
	// before they are acknowledged.
	inOpen := make([]bool, len(found))
	for i, t := range found {
		inOpen[i] = gate.Open(events.PartitionOf(t.Key))
	}
	found, refs = keep(found, inOpen), keep(refs, inOpen)
	keys := make([]string, len(found))
	for i, t := range found {
		keys[i] = t.Key
	}
	claimed := f.sched.Claim(refs, keys)
	found, keys = keep(found, claimed), keep(keys, claimed)
	defer f.sched.Unclaim(keys)
	evs := make([]Event, 0, len(found))
	var spans []trace.Span
	p.exps, p.rows, p.outcomes = make([]events.Expiry, 0, len(found)), make([]Due, len(found)), make([]events.Outcome, len(found))
	for i, t := range found {
		p.rows[i] = Due{Key: t.Key, Version: t.Version, Deadline: t.Deadline}
		p.parts = appendPartitions(p.parts, events.PartitionOf(t.Key))
		at := firedAt(now, t.Deadline)
		e := events.Expiry{Schema: events.SchemaVersion, Outcome: events.OutcomeFired, Key: t.Key, Version: t.Version,
			Deadline: t.Deadline, FiredAt: at.UTC(), LatenessNs: int64(at.Sub(t.Deadline)), Payload: t.Payload}
		subject := t.FireSubject
		refused := f.cfg.refusedFire(t.Key, subject)
		if refused != "" || t.MaxLateness > 0 && now.Sub(t.Deadline) > t.MaxLateness {
			// Refused (its fire subject no longer its tenant's) or past
			// its bound, unless its fired event was stored before
			// (published by an attempt whose mark failed or died): then
			// the row is only marked, and no missed event follows a fired.
			stored, err := f.pub.Stored(f.hard, subject, e.MsgID())
			if err != nil {
				f.retry(p, "lookup", err)
				return nil
			}
			if stored {
				p.fired++
				p.outcomes[i] = events.OutcomeFired
				continue
			}
			e.Outcome, e.Reason, subject = events.OutcomeMissed, refused, events.MissedSubject(t.Key)
			p.missed++
		} else {
			p.fired++
		}
		p.outcomes[i] = e.Outcome
		data, _ := json.Marshal(e) // cannot fail: plain fields and valid JSON payload
		e.Payload = nil            // the recent expiries keep the event without it
		part := events.PartitionOf(t.Key)
		ev := Event{Subject: subject, MsgID: e.MsgID(), Data: data, Partition: part, Fence: gate.StreamFence(part)}
		if tracing.Enabled() {
			span := startFireSpan(f.hard, t, e, subject)
			ev.TraceParent = tracing.Format(span.SpanContext())
			spans = append(spans, span)
		}
		evs, p.exps = append(evs, ev), append(p.exps, e)
	}
	// The gate again, right before the publish: what was read since (a
	// stored event looked up) took time, and the trust it was taken with
	// may have run out.
	if !f.gated(p, gate.Recheck()) {
		endSpans(spans, errLeasesUntrusted)
		return nil
	}
	// And the schedule's clock again: a heartbeat since the hand-out may
	// have held it back (its samples start over when another server
	// answers after a failover, lease.Membership.measureClock), and a
	// timeout due by the old samples may not be due by the new ones. The
	// batch goes back to the schedule, which arms each of its timeouts by
	// the hold of that moment.
	if later := f.sched.Now(); slices.ContainsFunc(p.rows, func(d Due) bool { return d.Deadline.After(later) }) {
		endSpans(spans, errNotDueYet)
		f.untrack(p.fl)
		f.sched.Rearm(p.refs, later)
		return nil
	}
	p.ackedAt, err = f.pub.Publish(f.hard, evs)
	endSpans(spans, err)
	if err != nil {
		if errors.Is(err, ErrFenced) {
			f.refence(p.parts)
		}
		f.retry(p, "publish", err)
		return nil
	}
	f.m.BatchSize("fire", len(due))
	return p
}

// refence fences again, after the stream refused a batch for its fence,
// those of parts still owned here, while trusted and in contact, whose
// last fence in the stream is not the one this instance names: one aged
// out of the stream (none left), or a former owner's that arrived late
// (an epoch below this one's), each on the condition that it is still
// the last. One at this epoch naming this instance is its own, published
// again: it is adopted. One at a newer epoch, or at this one naming
// another owner, is left as it is: the partition moved (the membership
// finds the lease lost), or the epoch was handed out twice.
func (f *firer) refence(parts []int) {
	gate := f.own.Gate(parts)
	if gate.Why() != "" {
		return
	}
	held := gate.Fence()
	again := lease.Fence{Owner: held.Owner}
	var expect []uint64
	for _, l := range held.Leases {
		last, err := f.pub.LastFence(f.hard, l.Partition)
		switch {
		case err != nil:
			f.cfg.Logger.Warn("read a partition's fence", "partition", l.Partition, "err", err)
		case last.Epoch == l.Epoch && last.Owner == held.Owner:
			f.own.Fenced(l.Partition, l.Epoch, last.Seq)
		case last.Epoch == l.Epoch:
			// Postgres handed this epoch out twice (a failover to a
			// standby that missed the acquisition): the other owner's
			// fence stands, and nothing is published under it here.
			f.cfg.Logger.Error("a partition's epoch is another owner's too: its fence stands, this instance publishes nothing for it",
				"partition", l.Partition, "epoch", l.Epoch, "owner", last.Owner)
		case last.Epoch < l.Epoch:
			again.Leases, expect = append(again.Leases, l), append(expect, last.Seq)
		}
	}
	if len(again.Leases) == 0 {
		return
	}
	seqs, err := f.pub.Fence(f.hard, again, expect)
	if err != nil {
		f.cfg.Logger.Warn("fence partitions again", "partitions", lease.PartitionsOf(again.Leases), "err", err)
		return
	}
	for i, l := range again.Leases {
		if seqs[i] != 0 {
			f.own.Fenced(l.Partition, l.Epoch, seqs[i])
		}
	}
	f.cfg.Logger.Info("partitions fenced again in the expiry stream", "partitions", lease.PartitionsOf(again.Leases))
}

// firedAt returns the fire time an event of deadline carries: now, the
// schedule's clock read after the hand-out, or the deadline when now is
// before it. The schedule handed the timeout out by a reading at or after
// its deadline, and a reading taken later can be earlier: its clock is a
// lower bound of Postgres's, and a heartbeat may have loosened the bound
// meanwhile (Membership.measureClock: the least lead of the last few
// samples, which grows when the best one leaves them). Both readings are
// lower bounds of when the fire was decided, so the later of the two is
// too; a fired_at before the deadline is refused by every consumer's
// decoder (events.DecodeExpiry), which would dead-letter the event and
// lose the deadline.
func firedAt(now, deadline time.Time) time.Time {
	if now.Before(deadline) {
		return deadline
	}
	return now
}

// gated reports whether a batch may go on past a gate whose reason is
// why, and when it may not, retries p: the leases were not renewed in
// time (publish nothing a new owner may be publishing too; the
// membership drops them or renews), or Postgres is out of contact (the
// others may read this instance as crashed and take its partitions; back
// in contact, the leases wait for a renewal too, Ownership.Contacted), or
// a partition open at the gate was lost since.
func (f *firer) gated(p *published, why lease.Why) bool {
	switch why {
	case "":
		return true
	case lease.Untrusted:
		f.retry(p, "lease", errLeasesUntrusted)
	case lease.OutOfContact:
		f.retry(p, "contact", errOutOfContact)
	default:
		f.retry(p, "lease", errLeasesUntrusted)
	}
	return false
}

// rows returns the rows of due to fire and their Refs: a plain timeout's
// made from what the schedule holds, the others' read from the store,
// which leaves out those no longer pending at their version. Either may
// have been replaced or cleared since: the Claim before the publish
// leaves out those the schedule knows of, and a command committed and not
// yet applied is acknowledged only after the PubAcks (Schedule.Apply).
func (f *firer) rows(due []schedule.Due) ([]Timeout, []schedule.Ref, error) {
	found := make([]Timeout, 0, len(due))
	refs := make([]schedule.Ref, 0, len(due))
	var read []Due
	var readRefs map[string]schedule.Ref
	for _, d := range due {
		if d.Plain {
			found = append(found, Timeout{Key: d.Key, Partition: events.PartitionOf(d.Key), Version: d.Version,
				State: StatePending, Deadline: d.Deadline, FireSubject: f.cfg.DefaultFireSubjectPrefix + d.Key, Plain: true})
			refs = append(refs, d.Ref)
			continue
		}
		if readRefs == nil {
			readRefs = make(map[string]schedule.Ref)
		}
		readRefs[d.Key] = d.Ref
		read = append(read, Due{Key: d.Key, Version: d.Version, Deadline: d.Deadline})
	}
	if len(read) == 0 {
		return found, refs, nil
	}
	rows, err := f.store.DueRows(f.hard, read)
	if err != nil {
		return nil, nil, err
	}
	for _, r := range rows {
		refs = append(refs, readRefs[r.Key])
	}
	return append(found, rows...), refs, nil
}

// keep returns the elements of s whose flag in keep is true, in place.
func keep[T any](s []T, keep []bool) []T {
	out := s[:0]
	for i, v := range s {
		if keep[i] {
			out = append(out, v)
		}
	}
	return out
}

// startFireSpan starts the span of t's fire, which ends with its PubAck:
// the root of a new trace (the cancel event's consumer continues it) with
// a link to the span that stored the timeout, when it was traced, rather
// than a child of that span's trace, which would stretch over the minutes
// or days between the set and the fire (docs/ARCHITECTURE.md, "A fire
// links to the span that set its deadline"). A fire linked to a sampled
// span is sampled (internal/tracing). The attributes are made only for a
// span that records: a fire the ratio does not sample costs a span start.
func startFireSpan(ctx context.Context, t Timeout, e events.Expiry, subject string) trace.Span {
	opts := []trace.SpanStartOption{trace.WithNewRoot(), trace.WithSpanKind(trace.SpanKindProducer)}
	if sc, ok := tracing.Parse(t.TraceParent); ok {
		opts = append(opts, trace.WithLinks(trace.Link{SpanContext: sc}))
	}
	_, span := tracing.Tracer().Start(ctx, "timeoutd fire", opts...)
	if span.IsRecording() {
		span.SetAttributes(tracing.Timeout(t.Key, t.Version, t.Partition, t.Deadline)...)
		span.SetAttributes(tracing.AttrLateness.Float64(float64(e.LatenessNs)/1e6), tracing.AttrSubject.String(subject),
			attribute.String("timeout.outcome", string(e.Outcome)))
	}
	return span
}

// mark queues p to be marked fired. The first caller finding no mark in
// progress waits MarkDelay, then marks, in one fenced transaction, every
// batch queued until then, and again until the queue is empty, so marks
// never wait for each other's commits one batch at a time: under load the
// transactions grow instead of multiplying. Its batch's slot is already
// free: the wait holds up no publish.
func (f *firer) mark(p *published) {
	f.markMu.Lock()
	f.marks = append(f.marks, p)
	if f.marking {
		f.markMu.Unlock()
		return
	}
	f.marking = true
	for {
		f.markMu.Unlock()
		f.gather()
		f.markMu.Lock()
		batch := f.marks
		f.marks = nil
		f.markMu.Unlock()
		f.markBatches(batch)
		f.markMu.Lock()
		if len(f.marks) == 0 {
			f.marking = false
			f.markMu.Unlock()
			return
		}
	}
}

// gather waits MarkDelay for more published batches to mark, or until the
// process is killed (the mark then fails, and the rows stay pending).
func (f *firer) gather() {
	t := time.NewTimer(f.cfg.MarkDelay)
	defer t.Stop()
	select {
	case <-t.C:
	case <-f.hard.Done():
	}
}

// markBatches marks the rows of ps fired in one fenced transaction (the
// rows of a partition this instance no longer holds are not marked; their
// owner publishes them again, deduplicated) and takes them out of the
// schedule, or re-arms them all when the transaction fails.
func (f *firer) markBatches(ps []*published) {
	var rows []Due
	var parts []int
	var firedAt time.Time // the latest, so no tombstone retires early
	for _, p := range ps {
		rows = append(rows, p.rows...)
		if p.firedAt.After(firedAt) {
			firedAt = p.firedAt
		}
		parts = appendPartitions(parts, p.parts...)
	}
	start := time.Now()
	refused, err := f.store.MarkFired(f.hard, f.own.Gate(parts).Fence(), rows, firedAt)
	if err != nil {
		for _, p := range ps {
			f.retry(p, "mark", err)
		}
		return
	}
	f.cfg.Logger.Debug("fire mark", "batches", len(ps), "rows", len(rows), "refused", refused, "took", time.Since(start))
	// A refused partition still held here lapsed (its lease expired by
	// Postgres's clock before the renewal that may yet resume it): its rows
	// stay pending, so its timeouts stay in the schedule and fire again,
	// under the same Nats-Msg-Id. One no longer held was dropped from the
	// schedule, and its new owner loaded the rows.
	var again []int
	for _, part := range refused {
		if f.own.Owns(part) {
			again = append(again, part)
		}
	}
	if len(again) > 0 {
		f.cfg.Logger.Warn("fire marks refused for partitions still held; they fire again", "partitions", again)
	}
	for _, p := range ps {
		done, retry := p.split(again, refused)
		f.sched.Done(done.refs)
		if len(retry) > 0 {
			// Lapsed: over at the renewal that resumes them; if the leases
			// are trusted here already, a retry after RetryDelay.
			f.wake(retry, p.firedAt, p.firedAt.Add(f.cfg.RetryDelay))
		}
		f.stats.fired.Add(done.fired)
		f.stats.missed.Add(done.missed)
		f.stats.published(done.exps, p.ackedAt, f.m)
		f.untrack(p.fl)
	}
}

// split returns what of p is done, and the refs of its timeouts of
// partitions again, whose marks were refused while they are still held
// here, to fire again. The rows of every refused partition (again, and
// those no longer held, whose new owner publishes them again and marks
// them) are not counted as fired or missed here, nor shown as recent.
func (p *published) split(again, refused []int) (done *published, retry []schedule.Ref) {
	if len(refused) == 0 {
		return p, nil
	}
	d := &published{}
	for i, r := range p.refs {
		if slices.Contains(again, events.PartitionOf(p.keys[i])) {
			retry = append(retry, r)
		} else {
			d.refs = append(d.refs, r)
		}
	}
	for i, row := range p.rows {
		if !slices.Contains(refused, events.PartitionOf(row.Key)) {
			if p.outcomes[i] == events.OutcomeMissed {
				d.missed++
			} else {
				d.fired++
			}
		}
	}
	for _, e := range p.exps {
		if !slices.Contains(refused, events.PartitionOf(e.Key)) {
			d.exps = append(d.exps, e)
		}
	}
	return d, retry
}

// retry re-arms p's timeouts to fire again after RetryDelay, unless the
// process is being killed (the rows are still pending in Postgres). A
// batch refused for want of trust (errLeasesUntrusted, errOutOfContact)
// fires again as soon as a renewal trusts the leases (a frozen database
// thawed, a lapse over), RetryDelay its bound.
func (f *firer) retry(p *published, step string, err error) {
	defer f.untrack(p.fl)
	if f.hard.Err() != nil {
		return
	}
	if errors.Is(err, errLeasesUntrusted) || errors.Is(err, errOutOfContact) {
		f.cfg.Logger.Warn("fire batch waits for the leases to be trusted", "step", step, "size", len(p.refs), "err", err)
		// Trusted again already (a renewal since the check): a poll later,
		// so that a contact that comes and goes cannot spin the batch.
		f.wake(p.refs, p.firedAt, f.sched.Now().Add(catchupPoll))
		return
	}
	f.cfg.Logger.Warn("fire batch failed; retrying", "step", step, "size", len(p.refs), "err", err)
	f.sched.Rearm(p.refs, p.firedAt.Add(f.cfg.RetryDelay))
}

// wake re-arms the in-flight timeouts of refs, fired at firedAt, once the
// leases are trusted again, or at firedAt plus RetryDelay, whichever comes
// first; at trustedAt when they are trusted (and in contact) already.
// Nothing is re-armed once the fire path stops (the rows stay pending in
// Postgres).
func (f *firer) wake(refs []schedule.Ref, firedAt, trustedAt time.Time) {
	retrusted := f.own.Retrusted()
	if f.own.Trusted() && f.own.InContact() {
		f.sched.Rearm(refs, trustedAt)
		return
	}
	t := time.NewTimer(firedAt.Add(f.cfg.RetryDelay).Sub(f.sched.Now()))
	go func() {
		defer t.Stop()
		select {
		case <-retrusted:
		case <-t.C:
		case <-f.hard.Done():
			return
		}
		if !f.stopping.Load() {
			f.sched.Rearm(refs, f.sched.Now())
		}
	}()
}

// errLeasesUntrusted is a fire's error while the leases are not known to
// be renewed.
var errLeasesUntrusted = errors.New("the partition leases were not renewed within the renew deadline")

// errNotDueYet ends the spans of a batch whose timeouts went back to the
// schedule: not yet due by its clock held back since the hand-out.
var errNotDueYet = errors.New("not yet due by the schedule's clock, held back since the hand-out")

// errOutOfContact is a fire's error while no statement reached the
// database within the contact window.
var errOutOfContact = errors.New("no statement reached the database within the contact window")

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
