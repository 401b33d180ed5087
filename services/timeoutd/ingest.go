package timeoutd

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/ordertimeout/ordertimeout/internal/retry"
	"github.com/ordertimeout/ordertimeout/internal/startstop"
	"github.com/ordertimeout/ordertimeout/internal/tracing"
	"github.com/ordertimeout/ordertimeout/pkg/events"
	"github.com/ordertimeout/ordertimeout/services/timeoutd/internal/lease"
	"github.com/ordertimeout/ordertimeout/services/timeoutd/internal/schedule"
)

// ingester consumes the command source: it validates, commits, acks and
// applies each batch to the schedule. It starts once recovery has loaded
// the schedule.
type ingester struct {
	startstop.Base
	cfg   Config
	src   Source
	store Store
	dlq   DeadLetterer
	sched *schedule.Schedule
	own   *lease.Ownership
	stats *stats
	m     Metrics
	// hard is the context of every batch's I/O: Stop lets the batch in
	// flight finish, Kill abandons it.
	hard context.Context
}

// Start consumes command batches until ctx ends or Stop.
func (in *ingester) Start(ctx context.Context) { in.Base.Start(ctx, in.run) }

// run takes command batches from the source until ctx ends. Each
// batch is split into IngestLanes sub-batches by key partition (so the
// commands of one key stay in order in one lane) that are processed
// concurrently, each to the end with the hard context: validate,
// dead-letter the invalid, upsert the rest in one statement, commit, apply
// to the schedule, ack. The next batch starts when every lane is done. A
// failed sub-batch is retried as a whole, which is harmless: the upsert
// ignores versions already stored. Ingest never waits for room in memory:
// the sets that do not fit are deferred (see admit).
func (in *ingester) run(ctx context.Context) {
	lanes := make([][]Message, in.cfg.IngestLanes)
	wait := retry.Backoff(in.cfg.RetryDelay)
	for {
		msgs, err := in.src.Next(ctx)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			in.cfg.Logger.Warn("fetch commands", "err", err)
			if !retry.Sleep(ctx, wait.NextBackOff()) {
				return
			}
			continue
		}
		wait.Reset()
		for i := range lanes {
			lanes[i] = lanes[i][:0]
		}
		n := 0 // commands fetched
		for _, m := range msgs {
			n += events.BatchCount(m.Header(events.HeaderBatch))
			key, _ := events.KeyOfStoredCommand(m.Subject()) // "" when malformed: dead-lettered in lane 0's partition
			l := events.PartitionOf(key) % len(lanes)
			lanes[l] = append(lanes[l], m)
		}
		in.m.BatchSize("ingest", n)
		var wg sync.WaitGroup
		for _, lane := range lanes {
			if len(lane) > 0 {
				wg.Go(func() { in.ingestRetrying(ctx, lane) })
			}
		}
		wg.Wait()
		if ctx.Err() != nil {
			return
		}
	}
}

// ingestRetrying processes msgs until it succeeds or ctx ends; stopping
// with them unacked is safe: they are redelivered. A batch abandoned so
// after a write that failed keeps its room: that write may have committed
// its sets, and a set admitted by another lane while the shutdown drains
// must not take their room (the next owner would find more rows pending
// than MaxPending).
func (in *ingester) ingestRetrying(ctx context.Context, msgs []Message) {
	wait := retry.Backoff(in.cfg.RetryDelay)
	var b admitted
	var err error
	defer func() {
		if err == nil || len(b.uncertain.Leases) == 0 {
			in.sched.Unreserve(b.room)
		}
	}()
	for {
		if err = in.ingest(in.hard, msgs, &b); err == nil {
			return
		}
		in.cfg.Logger.Warn("ingest batch failed; retrying", "size", len(msgs), "err", err)
		if !retry.Sleep(ctx, wait.NextBackOff()) {
			return
		}
	}
}

// delivered is a message whose commands passed decode: its partition and
// the keys of those commands.
type delivered struct {
	m    Message
	part int
	keys []string
}

// admitted is a batch's commands once decoded and admitted: a retry of the
// batch writes them again with the room they were granted, so a set whose
// commit's outcome was lost finds its room still reserved whatever came
// in since (were it admitted anew, the schedule could be full by then, and
// the committed row left outside it).
type admitted struct {
	done     bool
	cmds     []events.Command
	valid    []delivered
	deferred map[string]bool
	room     schedule.Admission
	// uncertain is the fence of the last write of cmds that failed, so may
	// have committed (see ingest); no leases when none failed.
	uncertain lease.Fence
}

// errLapsed is an ingest batch's retry while a partition that an earlier
// attempt may have written is refused by the fence but still owned here.
var errLapsed = errors.New("the fence refused a partition still owned here, after a write whose outcome is unknown")

// ingest processes one batch of messages, each one command or a batch of
// a partition's commands (events.HeaderBatch): it decodes them, admits the
// sets that find room (once: b keeps them for the retries), writes what it
// admitted for the partitions it owns, applies the committed changes to the
// schedule, then settles every message.
func (in *ingester) ingest(ctx context.Context, msgs []Message, b *admitted) error {
	now := in.cfg.Now()
	if !b.done {
		cmds, valid, err := in.collect(ctx, msgs, now)
		if err != nil {
			return err
		}
		// Only sets of keys not held need room; those that find none are
		// deferred (redelivered after RetryDelay, with the rest of their
		// message). A set older than a tombstone that only Postgres holds
		// counts as new: telling it stale would cost a read. Deferring
		// reorders a key's commands, which is safe: the upsert keeps the
		// newest version whatever the order of arrival, and the commands of
		// a deferred message that were committed are no-ops when it comes
		// again.
		b.cmds, b.deferred, b.room = in.sched.Admit(cmds)
		b.valid, b.done = valid, true
	}
	var refused map[int]bool
	if len(b.cmds) > 0 {
		changes, fence, lost, err := in.write(ctx, b.cmds, now)
		if err != nil {
			b.uncertain = fence
			return err
		}
		// After a write whose outcome is unknown (a commit whose reply was
		// lost), a partition the fence refuses while this instance still
		// owns it at that write's epoch (its lease lapsed: not renewed in
		// time, but nobody took it) is retried, not handed back: the
		// earlier attempt may have committed its sets, which only this
		// batch, with the room it was granted, puts in the schedule.
		// Handed back, the rows would stay pending outside any schedule,
		// and their room could go to other sets: more rows pending than
		// MaxPending, which no restart could load. Once the partition is
		// lost, or taken again at a newer epoch, its takeover loads the
		// rows, and the commands are handed back.
		if len(lost) > 0 && len(b.uncertain.Leases) > 0 {
			mayHaveCommitted := in.own.HeldAt(b.uncertain.Leases)
			for p := range lost {
				if mayHaveCommitted(p) {
					return fmt.Errorf("partition %d: %w", p, errLapsed)
				}
			}
		}
		refused = lost
		// Applied before the acks: once a command is acknowledged, no
		// event of a version it replaced is published (Schedule.Apply
		// waits for those being published).
		in.apply(changes, fence)
	}
	in.settle(b.valid, refused, b.deferred)
	return nil
}

// collect decodes msgs (dead-lettering what fails) and returns their
// commands, the newest of each key only, and the messages that carried
// any.
func (in *ingester) collect(ctx context.Context, msgs []Message, now time.Time) ([]events.Command, []delivered, error) {
	cmds := make([]events.Command, 0, len(msgs))
	valid := make([]delivered, 0, len(msgs))
	newest := make(map[string]int, len(msgs)) // key → index in cmds
	for _, m := range msgs {
		got, err := in.commands(ctx, m, now)
		if err != nil {
			return nil, nil, err
		}
		if len(got) == 0 {
			continue // dead-lettered
		}
		// A message's commands are of one partition (commands checks it).
		d := delivered{m: m, part: events.PartitionOf(got[0].Key), keys: make([]string, len(got))}
		for i, cmd := range got {
			d.keys[i] = cmd.Key
			if i, ok := newest[cmd.Key]; ok {
				if cmd.Version > cmds[i].Version {
					cmds[i] = cmd
				}
				continue
			}
			newest[cmd.Key] = len(cmds)
			cmds = append(cmds, cmd)
		}
		valid = append(valid, d)
	}
	return cmds, valid, nil
}

// write commits cmds behind the fence: only the partitions this instance
// owns, at their epoch, are written. It returns the committed changes, the
// fence they were written under, and the partitions the fence refused,
// whose commands are to be handed back (see settle), so their owner gets
// them.
func (in *ingester) write(ctx context.Context, cmds []events.Command, now time.Time) ([]Change, lease.Fence, map[int]bool, error) {
	var parts []int
	for _, c := range cmds {
		parts = appendPartitions(parts, events.PartitionOf(c.Key))
	}
	spans := startIngestSpans(ctx, cmds)
	fence := in.own.Gate(parts).Fence()
	changes, lost, err := in.store.Apply(ctx, fence, cmds, now)
	endSpans(spans, err)
	if err != nil {
		return nil, fence, nil, fmt.Errorf("apply %d commands: %w", len(cmds), err)
	}
	refused := map[int]bool{}
	for _, p := range lost {
		refused[p] = true
	}
	return changes, fence, refused, nil
}

// settle acknowledges each message of valid, or hands it back: after
// LeaseProbeInterval when its partition was refused, after RetryDelay when
// one of its sets was deferred.
func (in *ingester) settle(valid []delivered, refused map[int]bool, deferred map[string]bool) {
	for _, d := range valid {
		if refused[d.part] {
			// Handed back after a probe interval, not at once: an instance
			// whose lease lapsed would fetch and hand it back in a loop
			// until its renewal. A new owner's takeover resets the
			// consumer, which redelivers it at once.
			if err := d.m.NakWithDelay(in.cfg.LeaseProbeInterval); err != nil {
				in.cfg.Logger.Warn("hand back a command of a partition not owned", "seq", d.m.Seq(), "err", err)
			}
			continue
		}
		if slices.ContainsFunc(d.keys, func(k string) bool { return deferred[k] }) {
			if err := d.m.NakWithDelay(in.cfg.RetryDelay); err != nil {
				in.cfg.Logger.Warn("defer command", "seq", d.m.Seq(), "err", err)
			}
			continue
		}
		if err := d.m.Ack(); err != nil {
			// Committed already: a redelivery is a harmless no-op.
			in.cfg.Logger.Warn("ack command", "seq", d.m.Seq(), "err", err)
		}
	}
	if len(deferred) > 0 {
		in.cfg.Logger.Warn("pending timeouts at MaxPending; new sets deferred", "deferred", len(deferred),
			"max_pending", in.cfg.MaxPending, "retry_in", in.cfg.RetryDelay)
	}
}

// commands returns the commands of m that pass decode. A message of one
// command that fails is dead-lettered and terminated, and so is a batch
// whose framing is broken (its HeaderBatch count is not its number of
// lines, its subject not a key's), and a message whose Nats-Msg-Id
// another tenant could have guessed (events.CheckMsgID), which a producer
// of the contract never sends. A batch's commands that fail are
// dead-lettered one by one (events.DeadLetter.Line) and the others
// returned, to be acknowledged together once committed; a batch left with
// none is terminated.
func (in *ingester) commands(ctx context.Context, m Message, now time.Time) ([]events.Command, error) {
	stored, _ := events.KeyOfStoredCommand(m.Subject())
	tenant := tenantOfStored(m.Subject())
	prefixes, terr := in.checkTenant(tenant, m.Subject())
	header := m.Header(events.HeaderBatch)
	if header == "" {
		var c events.Command
		err := terr
		if err == nil {
			c, err = in.decode(m.Data(), tenant, prefixes, now)
		}
		if err == nil && c.Key != stored {
			err = &events.Error{Reason: events.ReasonSubjectMismatch, Field: "key",
				Detail: fmt.Sprintf("key %q does not match subject %q", c.Key, m.Subject())}
		}
		if err == nil {
			err = events.CheckMsgID(m.Header(events.HeaderMsgID))
		}
		if err != nil {
			return nil, in.deadLetter(ctx, m, in.deadLetterOf(m, producerSubject(m.Subject()), tenant, m.Data(), err, now), true)
		}
		if tracing.Enabled() {
			c.TraceParent = m.Header(tracing.HeaderTraceParent)
		}
		return []events.Command{c}, nil
	}
	lines, err := events.SplitBatch(m.Data(), header)
	if err == nil && stored == "" {
		err = &events.Error{Reason: events.ReasonSubjectMismatch, Field: "key",
			Detail: fmt.Sprintf("batch stored under subject %q, which is not its first key's partition", m.Subject())}
	}
	if err == nil {
		err = terr
	}
	if err == nil {
		err = events.CheckMsgID(m.Header(events.HeaderMsgID))
	}
	if err != nil {
		return nil, in.deadLetter(ctx, m, in.deadLetterOf(m, producerSubject(m.Subject()), tenant, m.Data(), err, now), true)
	}
	part := events.PartitionOf(stored)
	var traces []string
	if tracing.Enabled() {
		traces = events.SplitTraceParents(m.Header(events.HeaderBatchTraceParents), len(lines))
	}
	out := make([]events.Command, 0, len(lines))
	for i, line := range lines {
		cmd, err := in.decode(line, tenant, prefixes, now)
		if err == nil && events.PartitionOf(cmd.Key) != part {
			err = &events.Error{Reason: events.ReasonSubjectMismatch, Field: "key",
				Detail: fmt.Sprintf("key %q is not of partition %d, the batch's (subject %q)", cmd.Key, part, m.Subject())}
		}
		if err == nil {
			if traces != nil {
				cmd.TraceParent = traces[i]
			}
			out = append(out, cmd)
			continue
		}
		subject := producerSubject(m.Subject())
		if t, _ := events.SplitKey(cmd.Key); events.ValidTimeoutKey(cmd.Key) && t == tenant {
			// Where the fixed command is replayed. A line naming another
			// tenant's key keeps the subject it came on: its dead letter,
			// and its id, are its sender's.
			subject = events.CommandSubject(cmd.Key)
		}
		d := in.deadLetterOf(m, subject, tenant, line, err, now)
		d.Line = i + 1
		if err := in.deadLetter(ctx, m, d, false); err != nil {
			return nil, err
		}
	}
	if len(out) == 0 {
		in.term(m) // every command dead-lettered
	}
	return out, nil
}

// deadLetterOf returns the dead letter of m, or of its command data, of
// tenant ("" when its subject names none) rejected with err, to replay on
// subject: published on the tenant's dead-letter subject, where the
// tenant may read it.
func (in *ingester) deadLetterOf(m Message, subject, tenant string, data []byte, err error, now time.Time) events.DeadLetter {
	d := events.NewDeadLetter(subject, data, m.Header(events.HeaderMsgID), m.Seq(), err, now)
	if events.ValidTenant(tenant) {
		d.Tenant = tenant
	}
	return d
}

// startIngestSpans starts an ingest span for each command that came with
// a trace context, as its child, and puts the span's own context in the
// command's TraceParent, so that the timeout is stored with it and its
// fire links to this span. A command whose producer's span was not
// sampled gets a span that records nothing, and stores no context.
func startIngestSpans(ctx context.Context, cmds []events.Command) []trace.Span {
	if !tracing.Enabled() {
		return nil
	}
	var spans []trace.Span
	for i := range cmds {
		c := &cmds[i]
		if c.TraceParent == "" {
			continue
		}
		_, span := tracing.Tracer().Start(tracing.WithRemote(ctx, c.TraceParent), "timeoutd ingest", trace.WithSpanKind(trace.SpanKindConsumer))
		if span.IsRecording() {
			span.SetAttributes(tracing.Timeout(c.Key, c.Version, events.PartitionOf(c.Key), c.Deadline)...)
			span.SetAttributes(attribute.String("timeout.kind", string(c.Kind)))
		}
		c.TraceParent = tracing.Format(span.SpanContext())
		spans = append(spans, span)
	}
	return spans
}

// endSpans ends spans, with err as their error when the commit failed.
func endSpans(spans []trace.Span, err error) {
	for _, s := range spans {
		if err != nil {
			s.RecordError(err)
			s.SetStatus(codes.Error, "commit failed")
		}
		s.End()
	}
}

// apply brings the schedule in line with the changes committed under
// fence; those of a partition no longer owned at the fence's epoch (lost
// since the commit, perhaps taken again since) are left to its takeover,
// which loads what is current.
func (in *ingester) apply(changes []Change, fence lease.Fence) {
	sc := make([]schedule.Change, 0, len(changes))
	for _, c := range changes {
		sc = append(sc, schedule.Change{Entry: schedule.Entry{Key: c.Key, Version: c.Version, Deadline: c.Deadline, Plain: c.Plain}, Clear: c.State != StatePending})
	}
	set, cleared := in.sched.ApplyOwned(sc, in.own.HeldAt(fence.Leases))
	in.stats.scheduled.Add(uint64(set))
	in.stats.cleared.Add(uint64(cleared))
}

// decode parses a command of tenant (its subject's) and applies the
// service's own rules: its key is the tenant's; with MarkRetention, the
// command was issued within it; the fire subject is under one of prefixes
// (the tenant's) and the deadline within MaxHorizon. The command is
// returned with the error when it parsed.
func (in *ingester) decode(data []byte, tenant string, prefixes []string, now time.Time) (events.Command, error) {
	cmd, err := events.DecodeCommand(data)
	if err != nil {
		return cmd, err
	}
	if err := checkKeyTenant(cmd.Key, tenant); err != nil {
		return cmd, err
	}
	if r := in.cfg.MarkRetention; r > 0 {
		if cmd.IssuedAt.IsZero() {
			return cmd, &events.Error{Reason: events.ReasonInvalidField, Field: "issued_at",
				Detail: fmt.Sprintf("is required: versions of keys are forgotten after %v (TIMEOUTD_MARK_RETENTION)", r)}
		}
		if age := now.Sub(cmd.IssuedAt); age > r {
			return cmd, &events.Error{Reason: events.ReasonCommandTooOld, Field: "issued_at",
				Detail: fmt.Sprintf("issued %v ago, beyond the %v for which the versions of keys are kept (TIMEOUTD_MARK_RETENTION)", age.Round(time.Second), r)}
		}
	}
	if cmd.Kind != events.KindSet {
		return cmd, nil
	}
	allowed := false
	for _, p := range prefixes {
		allowed = allowed || strings.HasPrefix(cmd.FireSubject, p)
	}
	if !allowed {
		return cmd, &events.Error{Reason: events.ReasonSubjectNotAllowed, Field: "fire_subject",
			Detail: fmt.Sprintf("must start with one of %v, its tenant's", prefixes)}
	}
	if cmd.Deadline.After(now.Add(in.cfg.MaxHorizon)) {
		return cmd, &events.Error{Reason: events.ReasonDeadlineOutOfRange, Field: "deadline",
			Detail: fmt.Sprintf("is more than %v ahead", in.cfg.MaxHorizon)}
	}
	return cmd, nil
}

// producerSubject returns the subject a stored command was published on:
// the server's mappings filed timeouts.cmd.<token> under its token's
// partition, as timeouts.cmd.<p>.<token>, and
// timeouts.cmd.<tenant>.<token> as timeouts.cmd.<p>.<tenant>.<token>,
// whatever the token (a valid key or not), and producerSubject undoes it.
// A subject the mappings did not make (another form, or a partition token
// that is not the token's) is returned as it was stored.
func producerSubject(stored string) string {
	rest, ok := strings.CutPrefix(stored, events.CommandSubjectPrefix)
	if !ok {
		return stored
	}
	part, key, ok := strings.Cut(rest, ".")
	if !ok || part != strconv.Itoa(events.PartitionOf(key)) {
		return stored
	}
	tenant, token, qualified := strings.Cut(key, ".")
	if !qualified {
		tenant, token = "", key
	}
	if token == "" || qualified && tenant == "" || strings.Contains(token, ".") {
		return stored
	}
	return events.CommandSubjectPrefix + key
}

// deadLetter publishes d, the dead letter of m or of one of its commands,
// and waits for the PubAck; with term it then terminates m so it is never
// redelivered.
func (in *ingester) deadLetter(ctx context.Context, m Message, d events.DeadLetter, term bool) error {
	if err := in.dlq.DeadLetter(ctx, d); err != nil {
		return fmt.Errorf("dead-letter seq %d: %w", m.Seq(), err)
	}
	in.stats.deadLettered.Add(1)
	in.m.DeadLettered(d.Reason)
	in.cfg.Logger.Info("command dead-lettered", "subject", m.Subject(), "seq", m.Seq(), "line", d.Line, "reason", d.Reason, "field", d.Field)
	if term {
		in.term(m)
	}
	return nil
}

// term terminates m, whose commands are all dead-lettered.
func (in *ingester) term(m Message) {
	if err := m.Term(); err != nil {
		in.cfg.Logger.Warn("terminate dead-lettered command", "seq", m.Seq(), "err", err)
	}
}
