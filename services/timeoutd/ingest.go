package timeoutd

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/ordertimeout/ordertimeout/internal/retry"
	"github.com/ordertimeout/ordertimeout/internal/startstop"
	"github.com/ordertimeout/ordertimeout/pkg/events"
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
	own   *ownership
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
// dead-letter the invalid, upsert the rest in one statement, commit, ack,
// apply to the schedule. The next batch starts when every lane is done. A
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
			if !sleep(ctx, wait.NextBackOff()) {
				return
			}
			continue
		}
		wait.Reset()
		in.m.BatchSize("ingest", len(msgs))
		for i := range lanes {
			lanes[i] = lanes[i][:0]
		}
		for _, m := range msgs {
			key, _ := events.KeyOfStoredCommand(m.Subject()) // "" when malformed: dead-lettered in lane 0's partition
			l := events.PartitionOf(key) % len(lanes)
			lanes[l] = append(lanes[l], m)
		}
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
// with them unacked is safe: they are redelivered.
func (in *ingester) ingestRetrying(ctx context.Context, msgs []Message) {
	wait := retry.Backoff(in.cfg.RetryDelay)
	for {
		err := in.ingest(in.hard, msgs)
		if err == nil {
			return
		}
		in.cfg.Logger.Warn("ingest batch failed; retrying", "size", len(msgs), "err", err)
		if !sleep(ctx, wait.NextBackOff()) {
			return
		}
	}
}

// ingest processes one batch.
func (in *ingester) ingest(ctx context.Context, msgs []Message) error {
	now := in.cfg.Now()
	cmds := make([]events.Command, 0, len(msgs))
	valid := make([]Message, 0, len(msgs))
	keys := make([]string, 0, len(msgs))      // keys[i] is valid[i]'s key
	newest := make(map[string]int, len(msgs)) // key → index in cmds
	for _, m := range msgs {
		cmd, err := in.decode(m, now)
		if err != nil {
			if err := in.deadLetter(ctx, m, err, now); err != nil {
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
	// Only sets of keys not held need room; those that find none are
	// deferred (redelivered after RetryDelay). A set older than a tombstone
	// that only Postgres holds counts as new: telling it stale would cost a
	// read. Deferring reorders a key's commands, which is safe: the upsert
	// keeps the newest version whatever the order of arrival.
	cmds, deferred, reserved := in.sched.Admit(cmds)
	defer in.sched.Unreserve(reserved)
	// The fence: only the partitions this instance owns, at their epoch, are
	// written; the commands of the others are negatively acknowledged at
	// once, so their owner gets them.
	refused := map[int]bool{}
	if len(cmds) > 0 {
		parts := make([]int, 0, len(cmds))
		for _, c := range cmds {
			if p := events.PartitionOf(c.Key); !slices.Contains(parts, p) {
				parts = append(parts, p)
			}
		}
		changes, lost, err := in.store.Apply(ctx, in.own.fence(parts), cmds, now)
		if err != nil {
			return fmt.Errorf("apply %d commands: %w", len(cmds), err)
		}
		for _, p := range lost {
			refused[p] = true
		}
		defer in.apply(changes)
	}
	for i, m := range valid {
		if refused[events.PartitionOf(keys[i])] {
			if err := m.NakWithDelay(0); err != nil {
				in.cfg.Logger.Warn("hand back a command of a partition not owned", "seq", m.Seq(), "err", err)
			}
			continue
		}
		if deferred[keys[i]] {
			if err := m.NakWithDelay(in.cfg.RetryDelay); err != nil {
				in.cfg.Logger.Warn("defer command", "seq", m.Seq(), "err", err)
			}
			continue
		}
		if err := m.Ack(); err != nil {
			// Committed already: a redelivery is a harmless no-op.
			in.cfg.Logger.Warn("ack command", "seq", m.Seq(), "err", err)
		}
	}
	if len(deferred) > 0 {
		in.cfg.Logger.Warn("pending timeouts at MaxPending; new sets deferred", "deferred", len(deferred),
			"max_pending", in.cfg.MaxPending, "retry_in", in.cfg.RetryDelay)
	}
	return nil
}

// apply brings the schedule in line with committed changes.
func (in *ingester) apply(changes []Change) {
	sc := make([]schedule.Change, 0, len(changes))
	for _, c := range changes {
		if !in.own.owns(events.PartitionOf(c.Key)) {
			continue // lost since the commit: the new owner loads it
		}
		sc = append(sc, schedule.Change{Entry: schedule.Entry{Key: c.Key, Version: c.Version, Deadline: c.Deadline}, Clear: c.State != StatePending})
	}
	set, cleared := in.sched.Apply(sc)
	in.stats.scheduled.Add(uint64(set))
	in.stats.cleared.Add(uint64(cleared))
}

// decode parses a command and applies the service's own rules: the subject
// matches the key, the fire subject is under an allowed prefix, and the
// deadline is within MaxHorizon.
func (in *ingester) decode(m Message, now time.Time) (events.Command, error) {
	cmd, err := events.DecodeCommand(m.Data())
	if err != nil {
		return cmd, err
	}
	if key, ok := events.KeyOfStoredCommand(m.Subject()); !ok || key != cmd.Key {
		return cmd, &events.Error{Reason: events.ReasonSubjectMismatch, Field: "key",
			Detail: fmt.Sprintf("key %q does not match subject %q", cmd.Key, m.Subject())}
	}
	if cmd.Kind != events.KindSet {
		return cmd, nil
	}
	allowed := false
	for _, p := range in.cfg.FireSubjectPrefixes {
		allowed = allowed || strings.HasPrefix(cmd.FireSubject, p)
	}
	if !allowed {
		return cmd, &events.Error{Reason: events.ReasonSubjectNotAllowed, Field: "fire_subject",
			Detail: fmt.Sprintf("must start with one of %v", in.cfg.FireSubjectPrefixes)}
	}
	if cmd.Deadline.After(now.Add(in.cfg.MaxHorizon)) {
		return cmd, &events.Error{Reason: events.ReasonDeadlineOutOfRange, Field: "deadline",
			Detail: fmt.Sprintf("is more than %v ahead", in.cfg.MaxHorizon)}
	}
	return cmd, nil
}

// deadLetter publishes the rejected message with its reason, waits for the
// PubAck, and terminates it so it is never redelivered.
func (in *ingester) deadLetter(ctx context.Context, m Message, cause error, now time.Time) error {
	// The subject as the producer published it: the server's mapping filed
	// it under its partition (timeouts.cmd.<p>.<key>). One published on a
	// partition not its key's keeps the subject it was stored under.
	subject := m.Subject()
	if key, ok := events.KeyOfStoredCommand(subject); ok {
		subject = events.CommandSubject(key)
	}
	d := events.NewDeadLetter(subject, m.Data(), m.Seq(), cause, now)
	if err := in.dlq.DeadLetter(ctx, d); err != nil {
		return fmt.Errorf("dead-letter seq %d: %w", m.Seq(), err)
	}
	if err := m.Term(); err != nil {
		in.cfg.Logger.Warn("terminate dead-lettered command", "seq", m.Seq(), "err", err)
	}
	in.stats.deadLettered.Add(1)
	in.m.DeadLettered(d.Reason)
	in.cfg.Logger.Info("command dead-lettered", "subject", m.Subject(), "seq", m.Seq(), "reason", d.Reason, "field", d.Field)
	return nil
}
