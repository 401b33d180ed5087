package daemon_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ordertimeout/ordertimeout/internal/envconfig"
	"github.com/ordertimeout/ordertimeout/internal/eventstest"
	"github.com/ordertimeout/ordertimeout/internal/streams"
	"github.com/ordertimeout/ordertimeout/pkg/events"
	"github.com/ordertimeout/ordertimeout/services/timeoutd"
	"github.com/ordertimeout/ordertimeout/services/timeoutd/api"
	"github.com/ordertimeout/ordertimeout/services/timeoutd/daemon"
	tjs "github.com/ordertimeout/ordertimeout/services/timeoutd/jetstream"
	"github.com/ordertimeout/ordertimeout/services/timeoutd/postgres"
)

func TestSetFiresOnceAtDeadline(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	d := e.start(t, nil)
	deadline := time.Now().Add(400 * time.Millisecond).Truncate(time.Microsecond).Add(123) // nanoseconds survive
	e.publish(t, setCmd("o-1", 1, deadline))
	ex := e.expiry(t, events.OrderCancelSubject("o-1"), events.OutcomeFired, "o-1", 1, deadline)
	if ex.LatenessNs < 0 || ex.LatenessNs > int64(time.Second) {
		t.Errorf("lateness = %v", time.Duration(ex.LatenessNs))
	}
	// Exactly once: the row is a fired tombstone, no longer pending, so
	// nothing else can be published; the stream holds one event.
	eventually(t, 5*time.Second, "every due event published", func() bool { return e.unpublished(t) == 0 })
	if st, v := e.state(t, "o-1"); st != int16(timeoutd.StateFired) || v != 1 {
		t.Fatalf("row state, version = %d, %d; want fired, 1", st, v)
	}
	if n := e.count(t, events.StreamExpiries, events.OrderCancelSubject("o-1")); n != 1 {
		t.Fatalf("%d events, want 1", n)
	}
	if s := d.Service().Stats(); s.Fired != 1 || s.Scheduled != 1 || s.Pending != 0 {
		t.Fatalf("stats = %+v", s)
	}
	if got := d.Service().Recent(10); len(got) != 1 || got[0].Key != "o-1" {
		t.Fatalf("recent = %+v", got)
	}
}

func TestClearBeforeDeadlineNeverFires(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	d := e.start(t, nil)
	deadline := time.Now().Add(500 * time.Millisecond)
	e.publish(t, setCmd("o-2", 1, deadline))
	e.publish(t, clearCmd("o-2", 2))
	eventually(t, 5*time.Second, "clear stored", func() bool { st, v := e.state(t, "o-2"); return st == 1 && v == 2 })
	// Absence: watch past the deadline by a margin far above the tick.
	eventually(t, 5*time.Second, "deadline+300ms", func() bool {
		if e.last(t, events.StreamExpiries, events.OrderCancelSubject("o-2")) != nil {
			t.Fatal("a cleared timeout fired")
		}
		return time.Now().After(deadline.Add(300 * time.Millisecond))
	})
	if d.Service().Pending() != 0 {
		t.Fatalf("pending = %d, want 0", d.Service().Pending())
	}
}

func TestReschedule(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.start(t, nil)
	tests := []struct {
		name        string
		first, then time.Duration // from the subtest's start
	}{
		// The first deadline leaves room for both commands to be ingested
		// on a loaded machine: version 1 firing before version 2 arrived
		// would be correct behaviour, not what this test checks (with 1.5 s
		// and 5 s, a package run beside a benchmark saw ingest lag that
		// long).
		{"later", 3 * time.Second, 3500 * time.Millisecond},
		{"earlier", 15 * time.Second, 400 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			// Measured after t.Parallel: a parallel subtest may wait for a
			// slot longer than its deadlines.
			now := time.Now()
			key := "r-" + tt.name
			e.publish(t, setCmd(key, 1, now.Add(tt.first)))
			e.publish(t, setCmd(key, 2, now.Add(tt.then)))
			e.expiry(t, events.OrderCancelSubject(key), events.OutcomeFired, key, 2, now.Add(tt.then).UTC())
			eventually(t, 5*time.Second, "every due event published", func() bool { return e.unpublished(t) == 0 })
			if n := e.count(t, events.StreamExpiries, events.OrderCancelSubject(key)); n != 1 {
				t.Fatalf("%d events, want 1 (version 2 only)", n)
			}
		})
	}
}

func TestStaleAndDuplicateCommandsIgnored(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	d := e.start(t, nil)
	now := time.Now()
	dl := now.Add(600 * time.Millisecond)

	// Pending: a lower version and an equal version (a duplicate past the
	// JetStream dedupe, so timeoutd itself must ignore it) change nothing.
	// Each stale command is published after the newer one was consumed, so
	// the tombstones and stored versions are what rejects it.
	e.publish(t, setCmd("s-1", 5, dl))
	e.publish(t, setCmd("s-2", 1, now.Add(300*time.Millisecond)))
	e.publish(t, clearCmd("s-2", 2))
	eventually(t, 5*time.Second, "s-1@5 and s-2@2 stored", func() bool {
		_, v1 := e.state(t, "s-1")
		st2, v2 := e.state(t, "s-2")
		return v1 == 5 && st2 == int16(timeoutd.StateCleared) && v2 == 2
	})
	e.publish(t, setCmd("s-1", 4, now.Add(100*time.Millisecond)))
	e.publish(t, setCmd("s-1", 5, now.Add(200*time.Millisecond)), "-dup")
	e.publish(t, clearCmd("s-1", 3))
	// After a clear: the tombstone rejects the stale set.
	e.publish(t, setCmd("s-2", 1, now.Add(300*time.Millisecond)), "-redelivered")

	e.expiry(t, events.OrderCancelSubject("s-1"), events.OutcomeFired, "s-1", 5, dl.UTC())
	// After the fire: the tombstone rejects the same and older versions.
	e.publish(t, setCmd("s-1", 5, time.Now().Add(50*time.Millisecond)), "-after-fire")
	e.publish(t, setCmd("s-1", 2, time.Now().Add(50*time.Millisecond)))
	e.publish(t, clearCmd("s-1", 1))
	// A marker command proves the ones before it were consumed.
	e.publish(t, clearCmd("marker", 1))
	eventually(t, 5*time.Second, "marker consumed", func() bool { st, _ := e.state(t, "marker"); return st == 1 })
	eventually(t, 5*time.Second, "past every deadline", func() bool { return time.Now().After(dl.Add(300 * time.Millisecond)) })
	eventually(t, 5*time.Second, "every due event published", func() bool { return e.unpublished(t) == 0 })

	if n := e.count(t, events.StreamExpiries, events.OrderCancelSubject("s-1")); n != 1 {
		t.Errorf("s-1: %d events, want 1", n)
	}
	if n := e.count(t, events.StreamExpiries, events.OrderCancelSubject("s-2")); n != 0 {
		t.Errorf("s-2: %d events, want 0 (cleared)", n)
	}
	if st, v := e.state(t, "s-1"); st != int16(timeoutd.StateFired) || v != 5 {
		t.Errorf("s-1 state, version = %d, %d; want fired, 5", st, v)
	}
	if st, v := e.state(t, "s-2"); st != int16(timeoutd.StateCleared) || v != 2 {
		t.Errorf("s-2 state, version = %d, %d; want cleared, 2", st, v)
	}
	if p := d.Service().Pending(); p != 0 {
		t.Errorf("pending = %d, want 0", p)
	}
}

func TestInvalidCommandsAreDeadLettered(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	d := e.start(t, nil)
	future := time.Now().Add(time.Hour).UTC().Format(time.RFC3339Nano)
	tests := []struct {
		name    string
		subject string
		data    string
		reason  events.Reason
		field   string
	}{
		{"malformed", "timeouts.cmd.x1", `{"kind":`, events.ReasonMalformed, ""},
		{"newer schema", "timeouts.cmd.x2", `{"schema":2,"kind":"clear","key":"x2","version":1}`, events.ReasonUnsupportedSchema, "schema"},
		{"unknown kind", "timeouts.cmd.x3", `{"kind":"delete","key":"x3","version":1}`, events.ReasonUnknownKind, "kind"},
		{"subject mismatch", "timeouts.cmd.x4", `{"kind":"clear","key":"other","version":1}`, events.ReasonSubjectMismatch, "key"},
		{"fire subject not allowed", "timeouts.cmd.x5", `{"kind":"set","key":"x5","version":1,"deadline":"` + future + `","fire_subject":"payments.refund.x5"}`, events.ReasonSubjectNotAllowed, "fire_subject"},
		{"deadline too far", "timeouts.cmd.x6", `{"kind":"set","key":"x6","version":1,"deadline":"2999-01-01T00:00:00Z","fire_subject":"orders.cancel.x6"}`, events.ReasonDeadlineOutOfRange, "deadline"},
		{"zero version", "timeouts.cmd.x7", `{"kind":"clear","key":"x7","version":0}`, events.ReasonInvalidVersion, "version"},
	}
	for _, tt := range tests {
		e.publishRaw(t, tt.subject, []byte(tt.data), "bad-"+tt.name)
	}
	// The consumer keeps going: a valid command after them fires.
	deadline := time.Now().Add(200 * time.Millisecond)
	e.publish(t, setCmd("ok-after-bad", 1, deadline))
	e.expiry(t, events.OrderCancelSubject("ok-after-bad"), events.OutcomeFired, "ok-after-bad", 1, deadline.UTC())

	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			subject := events.TenantDeadLetterSubject("timeoutd", events.OrdersTenant, tt.reason)
			var m *jetstream.RawStreamMsg
			eventually(t, 5*time.Second, "dead letter on "+subject, func() bool {
				m = e.last(t, events.StreamDeadLetters, subject)
				return m != nil
			})
			var dl events.DeadLetter
			if err := json.Unmarshal(m.Data, &dl); err != nil {
				t.Fatal(err)
			}
			if dl.Reason != tt.reason || dl.Field != tt.field || dl.Subject != tt.subject || string(dl.Data) != tt.data {
				t.Fatalf("dead letter = %+v", dl)
			}
			if m.Header.Get(jetstream.MsgIDHeader) != dl.MsgID() {
				t.Fatalf("Nats-Msg-Id = %q, want %q", m.Header.Get(jetstream.MsgIDHeader), dl.MsgID())
			}
		})
	}
	// Terminated, so never redelivered: the work queue is empty of them.
	eventually(t, 5*time.Second, "command stream empty", func() bool {
		n, err := streams.CommandBacklog(context.Background(), e.js)
		return err == nil && n == 0
	})
	if got := d.Service().Stats().DeadLettered; got != uint64(len(tests)) {
		t.Errorf("dead-lettered counter = %d, want %d", got, len(tests))
	}
	_, metrics := get(t, "http://"+d.Addr()+"/metrics")
	for _, tt := range tests {
		line := `timeoutd_dead_lettered_total{reason="` + string(tt.reason) + `"} 1`
		if !strings.Contains(metrics, line) {
			t.Errorf("/metrics lacks %s", line)
		}
	}
}

// TestBatchedCommands: a batch message (events.HeaderBatch) published on
// its first key's subject reaches the key's partition stream through the
// server's mapping; its valid commands take effect, its invalid one is
// dead-lettered alone with its line, and the message is acknowledged.
func TestBatchedCommands(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.start(t, nil)
	keys := eventstest.KeysOfPartition("batch-", events.PartitionOf("batch-0"), 3)
	deadline := time.Now().Add(300 * time.Millisecond)
	bad := setCmd(keys[2], 1, deadline)
	bad.FireSubject = "payments.refund." + keys[2]
	var msgs []events.CommandMessage
	for _, c := range []events.Command{setCmd(keys[0], 1, deadline), setCmd(keys[1], 1, deadline.Add(time.Hour)), clearCmd(keys[1], 2), bad} {
		data, err := json.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		msgs = append(msgs, events.CommandMessage{Subject: c.Subject(), MsgID: c.MsgID(events.NewNonce()), Data: data, Count: 1})
	}
	batch := events.Batch(msgs)
	if len(batch) != 1 || batch[0].Count != 4 {
		t.Fatalf("packed into %+v, want one batch of 4", batch)
	}
	m := &nats.Msg{Subject: batch[0].Subject, Data: batch[0].Data, Header: nats.Header{}}
	m.Header.Set(jetstream.MsgIDHeader, batch[0].MsgID)
	m.Header.Set(events.HeaderBatch, strconv.Itoa(batch[0].Count))
	if _, err := e.js.PublishMsg(context.Background(), m); err != nil {
		t.Fatal(err)
	}

	e.expiry(t, events.OrderCancelSubject(keys[0]), events.OutcomeFired, keys[0], 1, deadline.UTC())
	if st, v := e.state(t, keys[1]); st != int16(timeoutd.StateCleared) || v != 2 {
		t.Errorf("%s: state %d version %d, want cleared at 2", keys[1], st, v)
	}
	subject := events.TenantDeadLetterSubject("timeoutd", events.OrdersTenant, events.ReasonSubjectNotAllowed)
	var dm *jetstream.RawStreamMsg
	eventually(t, 5*time.Second, "dead letter on "+subject, func() bool {
		dm = e.last(t, events.StreamDeadLetters, subject)
		return dm != nil
	})
	var dl events.DeadLetter
	if err := json.Unmarshal(dm.Data, &dl); err != nil {
		t.Fatal(err)
	}
	if want, _ := json.Marshal(bad); dl.Line != 4 || dl.Subject != bad.Subject() || !bytes.Equal(dl.Data, want) || dm.Header.Get(jetstream.MsgIDHeader) != dl.MsgID() {
		t.Errorf("dead letter %+v (id %s), want line 4 of %s alone", dl, dm.Header.Get(jetstream.MsgIDHeader), bad.Subject())
	}
	if st, _ := e.state(t, keys[2]); st != -1 {
		t.Errorf("%s stored (state %d), want nothing", keys[2], st)
	}
	eventually(t, 5*time.Second, "command stream empty (the batch acked)", func() bool {
		n, err := streams.CommandBacklog(context.Background(), e.js)
		return err == nil && n == 0
	})
}

func TestMisfireBoundEmitsMissed(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.start(t, nil)
	late := setCmd("m-1", 1, time.Now().Add(-2*time.Second))
	late.MaxLatenessMs = 100
	e.publish(t, late)
	lenient := setCmd("m-2", 1, time.Now().Add(-2*time.Second))
	lenient.MaxLatenessMs = 60_000
	lenient.Payload = json.RawMessage(`{"shop":"s1"}`)
	e.publish(t, lenient)

	ex := e.expiry(t, events.MissedSubject("m-1"), events.OutcomeMissed, "m-1", 1, late.Deadline)
	// 2 s past due when published, judged by timeoutd's estimate of
	// Postgres's clock, which trails this host's by up to its hold (tens
	// of milliseconds under load): well beyond MaxLateness either way.
	if ex.LatenessNs < int64(1500*time.Millisecond) {
		t.Errorf("missed lateness = %v, want about 2s", time.Duration(ex.LatenessNs))
	}
	fired := e.expiry(t, events.OrderCancelSubject("m-2"), events.OutcomeFired, "m-2", 1, lenient.Deadline)
	if string(fired.Payload) != `{"shop":"s1"}` {
		t.Errorf("payload = %s", fired.Payload)
	}
	if n := e.count(t, events.StreamExpiries, events.OrderCancelSubject("m-1")); n != 0 {
		t.Errorf("missed timeout also fired (%d events)", n)
	}
}

// The crash tests reproduce, in Postgres and JetStream, the exact state a
// process leaves when it dies at each point, then start a daemon on it and
// check that the effect happens exactly once.

func TestCrashBetweenCommitAndAck(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	deadline := time.Now().Add(700 * time.Millisecond)
	cmd := setCmd("c-1", 1, deadline)
	// The command is in the stream, unacked, and already committed.
	e.publish(t, cmd)
	if _, _, err := postgres.NewStore(e.pool, events.OrderCancelSubjectPrefix).Apply(context.Background(), e.previous(t), []events.Command{cmd}, time.Now()); err != nil {
		t.Fatal(err)
	}
	e.start(t, nil)
	e.expiry(t, events.OrderCancelSubject("c-1"), events.OutcomeFired, "c-1", 1, deadline.UTC())
	eventually(t, 5*time.Second, "command acked", func() bool {
		n, err := streams.CommandBacklog(context.Background(), e.js)
		return err == nil && n == 0
	})
	eventually(t, 5*time.Second, "every due event published", func() bool { return e.unpublished(t) == 0 })
	if n := e.count(t, events.StreamExpiries, events.OrderCancelSubject("c-1")); n != 1 {
		t.Fatalf("%d events, want 1", n)
	}
}

// A process that fetched a batch and died before its commit acked nothing:
// after AckWait the whole batch is redelivered to the next process, which
// applies the valid commands, dead-letters the invalid one between them, and
// acks or terminates each, so none is delivered again.
func TestCrashBeforeCommitRedeliversTheBatch(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	far := time.Now().Add(time.Hour)
	e.publish(t, setCmd("r-1", 1, far))
	e.publishRaw(t, "timeouts.cmd.r-bad", []byte(`{"kind":`), "bad-r")
	e.publish(t, setCmd("r-2", 1, far))
	e.publish(t, clearCmd("r-1", 2))
	e.publish(t, setCmd("r-3", 1, far))
	// The dead process: every command delivered, none acked.
	cfg := tjs.ConsumerConfig{BatchSize: tjs.BatchSizeDefault, AckWait: time.Second}
	var consumers []jetstream.Consumer
	delivered := 0
	for _, p := range []int{events.PartitionOf("r-1"), events.PartitionOf("r-bad"), events.PartitionOf("r-2"), events.PartitionOf("r-3")} {
		cons, err := e.js.CreateOrUpdateConsumer(ctx, events.CommandStream(p), tjs.ConsumerSettings(p, cfg))
		if err != nil {
			t.Fatal(err)
		}
		consumers = append(consumers, cons)
		batch, err := cons.FetchNoWait(10)
		if err != nil {
			t.Fatal(err)
		}
		for range batch.Messages() {
			delivered++
		}
	}
	if delivered != 5 {
		t.Fatalf("fetched %d commands, want 5", delivered)
	}

	d := e.start(t, func(c *daemon.Config) { c.Consumer.AckWait = time.Second })
	// Each key lives in its own partition, applied in its own batch: wait
	// for all of them, not for a count two of them can reach first.
	want := map[string]timeoutd.State{"r-1": timeoutd.StateCleared, "r-2": timeoutd.StatePending, "r-3": timeoutd.StatePending}
	applied := func() bool {
		for key, st := range want {
			if got, _ := e.state(t, key); got != int16(st) {
				return false
			}
		}
		return d.Service().Pending() == 2 // r-2 and r-3, in memory too
	}
	eventually(t, 10*time.Second, "redelivered batches committed and applied", applied)
	eventually(t, 5*time.Second, "the malformed command dead-lettered", func() bool {
		return e.last(t, events.StreamDeadLetters, events.TenantDeadLetterSubject("timeoutd", events.OrdersTenant, events.ReasonMalformed)) != nil
	})
	eventually(t, 5*time.Second, "command stream empty", func() bool {
		n, err := streams.CommandBacklog(ctx, e.js)
		return err == nil && n == 0
	})
	// Each was acked or terminated, so none can be delivered again.
	eventually(t, 5*time.Second, "no command awaiting an ack", func() bool {
		for _, cons := range consumers {
			info, err := cons.Info(ctx)
			if err != nil || info.NumAckPending != 0 || info.NumRedelivered != 0 || info.NumPending != 0 {
				return false
			}
		}
		return true
	})
	if got := d.Service().Stats().DeadLettered; got != 1 {
		t.Errorf("dead-lettered %d, want 1", got)
	}
}

// TestCrashBetweenPublishAndMarkFired: the event was published and
// PubAcked, the process died before its mark committed: the row is still
// pending after its deadline. The next process publishes it again under the
// same Nats-Msg-Id, which JetStream drops, and marks it fired; past the
// timeout's misfire bound it finds the fired event stored and publishes no
// missed event after it.
func TestCrashBetweenPublishAndMarkFired(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name  string
		bound int64 // the command's MaxLatenessMs
	}{
		{"no misfire bound", 0},
		{"taken over past the misfire bound", 100},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			ctx := context.Background()
			deadline := time.Now().Add(-time.Second).UTC()
			cmd := setCmd("c-3", 1, deadline)
			cmd.MaxLatenessMs = tt.bound
			if _, _, err := postgres.NewStore(e.pool, events.OrderCancelSubjectPrefix).Apply(ctx, e.previous(t), []events.Command{cmd}, time.Now()); err != nil {
				t.Fatal(err)
			}
			firedAt := deadline.Add(time.Duration(tt.bound) * time.Millisecond / 2)
			ex := events.Expiry{Schema: events.SchemaVersion, Outcome: events.OutcomeFired, Key: "c-3", Version: 1, Deadline: deadline,
				FiredAt: firedAt, LatenessNs: int64(firedAt.Sub(deadline))}
			data, err := json.Marshal(ex)
			if err != nil {
				t.Fatal(err)
			}
			e.publishRaw(t, events.OrderCancelSubject("c-3"), data, ex.MsgID())
			d := e.start(t, nil)
			eventually(t, 5*time.Second, "marked fired", func() bool { st, _ := e.state(t, "c-3"); return st == int16(timeoutd.StateFired) })
			if n := e.count(t, events.StreamExpiries, events.OrderCancelSubject("c-3")); n != 1 {
				t.Fatalf("%d events, want 1: the republish was not deduplicated by Nats-Msg-Id", n)
			}
			if n := e.count(t, events.StreamExpiries, events.MissedSubject("c-3")); n != 0 {
				t.Fatalf("%d missed events after the fired one, want 0", n)
			}
			if st := d.Service().Stats(); d.Service().Pending() != 0 || st.Fired != 1 || st.Missed != 0 {
				t.Fatalf("pending %d, fired %d, missed %d; want 0, 1, 0", d.Service().Pending(), st.Fired, st.Missed)
			}
		})
	}
}

// TestCrashWhileNATSIsAway: the deadline passes while NATS is unreachable,
// so the event cannot be published: the row stays pending (the timeout row
// is the outbox), the process dies, and the next one publishes it once.
func TestCrashWhileNATSIsAway(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	first := e.start(t, nil)
	deadline := time.Now().Add(2 * time.Second)
	e.publish(t, setCmd("h-1", 1, deadline))
	eventually(t, 5*time.Second, "pending", func() bool { return first.Service().Pending() == 1 })
	timeout := time.Second
	if err := e.nats.Container.Stop(context.Background(), &timeout); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Until(deadline) + time.Second) // due, and tried
	if st, _ := e.state(t, "h-1"); st != int16(timeoutd.StatePending) || e.unpublished(t) != 1 {
		t.Fatalf("with NATS away past the deadline: state %d, %d unpublished; want pending, 1", st, e.unpublished(t))
	}
	first.Kill()
	<-first.done
	// The restarted container has a new port: connect again.
	nc, err := nats.Connect(e.nats.Restart(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	if e.js, err = jetstream.New(nc); err != nil {
		t.Fatal(err)
	}
	e.start(t, nil)
	e.expiry(t, events.OrderCancelSubject("h-1"), events.OutcomeFired, "h-1", 1, deadline.UTC())
	eventually(t, 5*time.Second, "every due event published", func() bool { return e.unpublished(t) == 0 })
	if n := e.count(t, events.StreamExpiries, events.OrderCancelSubject("h-1")); n != 1 {
		t.Fatalf("%d events, want 1", n)
	}
}

func TestRecoveryAfterAbruptStop(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	first := e.start(t, nil)
	now := time.Now()
	overdue := map[string]time.Time{}
	future := map[string]time.Time{}
	for i := range 20 {
		overdue["ov-"+string(rune('a'+i))] = now.Add(time.Duration(800+10*i) * time.Millisecond)
		future["fu-"+string(rune('a'+i))] = now.Add(time.Duration(2500+10*i) * time.Millisecond)
	}
	for k, dl := range overdue {
		e.publish(t, setCmd(k, 1, dl))
	}
	for k, dl := range future {
		e.publish(t, setCmd(k, 1, dl))
	}
	eventually(t, 5*time.Second, "all 40 pending in memory", func() bool { return first.Service().Pending() == 40 })
	first.Kill()
	<-first.done
	// Down past the first deadlines.
	eventually(t, 5*time.Second, "overdue", func() bool { return time.Now().After(now.Add(1200 * time.Millisecond)) })
	second := e.start(t, nil)
	if p := second.Service().Pending(); p > 40 || p < 20 {
		t.Fatalf("pending after recovery = %d, want 20 to 40", p)
	}
	for _, set := range []map[string]time.Time{overdue, future} {
		for k, dl := range set {
			e.expiry(t, events.OrderCancelSubject(k), events.OutcomeFired, k, 1, dl.UTC())
		}
	}
	eventually(t, 5*time.Second, "every due event published", func() bool { return e.unpublished(t) == 0 })
	for _, set := range []map[string]time.Time{overdue, future} {
		for k := range set {
			if n := e.count(t, events.StreamExpiries, events.OrderCancelSubject(k)); n != 1 {
				t.Errorf("%s: %d events, want 1", k, n)
			}
		}
	}
}

func TestGracefulShutdownKeepsPending(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	first := e.start(t, func(c *daemon.Config) { c.ShutdownDelay = 2 * time.Second })
	deadline := time.Now().Add(4 * time.Second)
	e.publish(t, setCmd("g-1", 1, deadline))
	eventually(t, 5*time.Second, "pending", func() bool { return first.Service().Pending() == 1 })
	// Readiness goes false first, while the server still answers.
	first.cancel()
	eventually(t, 2*time.Second, "/readyz 503 while draining", func() bool {
		code, _ := get(t, "http://"+first.Addr()+"/readyz")
		return code == 503
	})
	first.stop(t)
	if st, _ := e.state(t, "g-1"); st != int16(timeoutd.StatePending) {
		t.Fatalf("state after shutdown = %d, want pending", st)
	}
	e.start(t, nil)
	e.expiry(t, events.OrderCancelSubject("g-1"), events.OutcomeFired, "g-1", 1, deadline.UTC())
}

func TestHTTPEndpoints(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	d := e.start(t, func(c *daemon.Config) { c.Service.FireSubjectPrefixes = []string{"orders.cancel.", "carts.expire."} })
	base := "http://" + d.Addr()
	far := time.Now().Add(time.Hour)
	for i, k := range []string{"h-b", "h-a", "h-c", "x-1"} {
		cmd := setCmd(k, 1, far.Add(time.Duration(i)*time.Second))
		if k == "x-1" {
			cmd.FireSubject = "carts.expire.x-1"
		}
		e.publish(t, cmd)
	}
	eventually(t, 5*time.Second, "4 pending", func() bool { return d.Service().Pending() == 4 })

	if code, _ := get(t, base+"/healthz"); code != 200 {
		t.Errorf("/healthz = %d", code)
	}
	if code, body := get(t, base+"/readyz"); code != 200 {
		t.Errorf("/readyz = %d %s", code, body)
	}
	code, body := get(t, base+"/api/v1/timeouts?limit=2&key=h-")
	var p api.Page
	if err := json.Unmarshal([]byte(body), &p); code != 200 || err != nil {
		t.Fatalf("list = %d %s", code, body)
	}
	if len(p.Items) != 2 || p.Items[0].Key != "h-b" || p.Items[1].Key != "h-a" || p.NextCursor == "" {
		t.Fatalf("page 1 = %+v", p)
	}
	_, body = get(t, base+"/api/v1/timeouts?limit=2&key=h-&cursor="+p.NextCursor)
	p = api.Page{}
	_ = json.Unmarshal([]byte(body), &p)
	if len(p.Items) != 1 || p.Items[0].Key != "h-c" || p.NextCursor != "" {
		t.Fatalf("page 2 = %s", body)
	}
	_, body = get(t, base+"/api/v1/timeouts/x-1")
	var one api.Timeout
	_ = json.Unmarshal([]byte(body), &one)
	if one.FireSubject != "carts.expire.x-1" || one.Version != 1 {
		t.Fatalf("get = %s", body)
	}
	if code, body := get(t, base+"/api/v1/timeouts/nope"); code != 404 || !strings.Contains(body, `"status":404`) {
		t.Fatalf("missing key = %d %s", code, body)
	}
	eventually(t, 5*time.Second, "upcoming buckets", func() bool {
		_, body := get(t, base+"/api/v1/stats")
		var s api.Stats
		_ = json.Unmarshal([]byte(body), &s)
		return len(s.Upcoming) == 3 && s.Upcoming[2].Count == 4 && s.Upcoming[0].Count == 0 && s.Pending == 4 && s.Totals.Scheduled == 4
	})
	_, metrics := get(t, base+"/metrics")
	for _, name := range []string{"timeoutd_pending 4", "timeoutd_scheduled_total 4", "timeoutd_recovery_duration_seconds", "timeoutd_outbox_rows 0", "timeoutd_batch_size_bucket"} {
		if !strings.Contains(metrics, name) {
			t.Errorf("/metrics lacks %q", name)
		}
	}
}

// TestRecoveryWaitsForQueuedClears: orders paid while timeoutd was down
// queue clears in JetStream for timeouts that are overdue by the time it
// restarts; recovery must consume them before firing the overdue ones, so
// no cancel event is published for a paid order, and an overdue timeout
// without a clear fires exactly once.
func TestRecoveryWaitsForQueuedClears(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	first := e.start(t, nil)
	deadline := time.Now().Add(600 * time.Millisecond)
	var paid, unpaid []string
	for i := range 20 {
		paid = append(paid, fmt.Sprintf("rq-paid-%02d", i))
	}
	for i := range 3 {
		unpaid = append(unpaid, fmt.Sprintf("rq-unpaid-%d", i))
	}
	for _, k := range append(append([]string(nil), paid...), unpaid...) {
		e.publish(t, setCmd(k, 1, deadline))
	}
	eventually(t, 5*time.Second, "23 pending", func() bool { return first.Service().Pending() == 23 })
	first.Kill()
	<-first.done
	// During the outage: a backlog of new orders (so that ingest needs
	// several batches before it reaches the clears), then the payments.
	filler := make([]events.Command, 4000)
	for i := range filler {
		filler[i] = setCmd(fmt.Sprintf("rq-new-%04d", i), 1, time.Now().Add(time.Hour))
	}
	e.publishAll(t, filler)
	for _, k := range paid {
		e.publish(t, clearCmd(k, 2)) // paid during the outage
	}
	eventually(t, 5*time.Second, "overdue", func() bool { return time.Now().After(deadline.Add(200 * time.Millisecond)) })

	second := e.start(t, func(c *daemon.Config) { c.Consumer.BatchSize = 200 })
	for _, k := range unpaid {
		e.expiry(t, events.OrderCancelSubject(k), events.OutcomeFired, k, 1, deadline.UTC())
	}
	select {
	case <-second.Service().CaughtUp():
	case <-time.After(5 * time.Second):
		t.Fatal("overdue timeouts not released within 5s")
	}
	eventually(t, 5*time.Second, "every due event published", func() bool { return e.unpublished(t) == 0 })
	for _, k := range paid {
		if n := e.count(t, events.StreamExpiries, events.OrderCancelSubject(k)); n != 0 {
			t.Errorf("%s: %d cancel events for a timeout whose clear was queued", k, n)
		}
		if st, v := e.state(t, k); st != int16(timeoutd.StateCleared) || v != 2 {
			t.Errorf("%s: state, version = %d, %d; want cleared, 2", k, st, v)
		}
	}
	for _, k := range unpaid {
		if n := e.count(t, events.StreamExpiries, events.OrderCancelSubject(k)); n != 1 {
			t.Errorf("%s: %d events, want 1", k, n)
		}
	}
	eventually(t, 5*time.Second, "backlog pending", func() bool { return second.Service().Pending() == len(filler) })
}

func TestFromEnvMemoryLimit(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, value string
		want        envconfig.Bytes
		wantErr     bool
	}{
		{"unset", "", 0, false},
		{"MiB", "1400MiB", 1400 << 20, false},
		{"GiB", "2GiB", 2 << 30, false},
		{"MB", "900MB", 900e6, false},
		{"bytes", "123456", 123456, false},
		{"fraction", "1.5GiB", 3 << 29, false},
		{"spaces", " 2 GiB ", 2 << 30, false},
		{"off", "off", -1, false},
		{"negative", "-5MiB", 0, true},
		{"zero", "0", 0, true},
		{"unknown unit", "3 lots", 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			env := map[string]string{}
			if tt.value != "" {
				env["TIMEOUTD_MEMORY_LIMIT"] = tt.value
			}
			c, err := daemon.FromEnv(env)
			if tt.wantErr {
				if err == nil || !strings.Contains(err.Error(), "TIMEOUTD_MEMORY_LIMIT") {
					t.Fatalf("err = %v, want one naming TIMEOUTD_MEMORY_LIMIT", err)
				}
				return
			}
			if err != nil || c.MemoryLimit != tt.want {
				t.Fatalf("MemoryLimit = %d, %v; want %d", c.MemoryLimit, err, tt.want)
			}
		})
	}
}

func TestOperatorSettingsValidated(t *testing.T) {
	t.Parallel()
	base := map[string]string{"TIMEOUTD_DATABASE_URL": "postgres://unused", "TIMEOUTD_NATS_URL": "nats://unused:4222"}
	tests := []struct {
		name string
		env  map[string]string
		want string // variable the error names
	}{
		{"operator token without orders URL", map[string]string{"TIMEOUTD_OPERATOR_TOKEN": "op", "TIMEOUTD_ORDERS_TOKEN": "o"}, "TIMEOUTD_ORDERS_URL"},
		{"orders URL without scheme", map[string]string{"TIMEOUTD_OPERATOR_TOKEN": "op", "TIMEOUTD_ORDERS_URL": "orders:8081", "TIMEOUTD_ORDERS_TOKEN": "o"}, "TIMEOUTD_ORDERS_URL"},
		{"operator token without orders token", map[string]string{"TIMEOUTD_OPERATOR_TOKEN": "op", "TIMEOUTD_ORDERS_URL": "http://orders:8081"}, "TIMEOUTD_ORDERS_TOKEN"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			env := maps.Clone(base)
			maps.Copy(env, tt.env)
			cfg, err := daemon.FromEnv(env)
			if err != nil {
				t.Fatal(err)
			}
			if cfg.OperatorToken != "op" {
				t.Fatalf("OperatorToken = %q, want op", cfg.OperatorToken)
			}
			_, err = daemon.New(context.Background(), cfg)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("New: err = %v, want one naming %s", err, tt.want)
			}
		})
	}
}

// TestStaleSetAfterTombstoneTTLNeverResurrects is issue 14 item 2.5 end to
// end: set v1, clear v2 (or fire v1), the janitor runs past the tombstone
// TTL, v1 is replayed past JetStream's dedupe (a dead letter replayed, a
// republish after a long outage): nothing pending, nothing fired.
func TestStaleSetAfterTombstoneTTLNeverResurrects(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	d := e.start(t, func(c *daemon.Config) { c.Service.TombstoneTTL = time.Millisecond })
	now := time.Now()
	cleared, fired := setCmd("r-cleared", 1, now.Add(time.Second)), setCmd("r-fired", 1, now.Add(100*time.Millisecond))
	e.publish(t, cleared)
	e.publish(t, clearCmd("r-cleared", 2))
	e.publish(t, fired)
	e.expiry(t, events.OrderCancelSubject("r-fired"), events.OutcomeFired, "r-fired", 1, fired.Deadline)
	// The janitor ran past the TTL: the tombstones are retired (or, before
	// the fix, deleted).
	for _, k := range []string{"r-cleared", "r-fired"} {
		eventually(t, 10*time.Second, k+" tombstone past its TTL", func() bool {
			st, _ := e.state(t, k)
			return st == int16(timeoutd.StateRetired) || st == -1
		})
	}
	replayed := setCmd("r-fired", 1, time.Now().Add(100*time.Millisecond))
	e.publish(t, cleared, "-replayed")
	e.publish(t, replayed, "-replayed")
	e.publish(t, clearCmd("marker", 1))
	eventually(t, 5*time.Second, "marker consumed", func() bool { st, _ := e.state(t, "marker"); return st == 1 })
	last := replayed.Deadline
	if cleared.Deadline.After(last) {
		last = cleared.Deadline
	}
	eventually(t, 5*time.Second, "past every deadline", func() bool { return time.Now().After(last.Add(300 * time.Millisecond)) })
	eventually(t, 5*time.Second, "every due event published", func() bool { return e.unpublished(t) == 0 })
	if n := e.count(t, events.StreamExpiries, events.OrderCancelSubject("r-cleared")); n != 0 {
		t.Errorf("r-cleared: %d events, want 0", n)
	}
	if n := e.count(t, events.StreamExpiries, events.OrderCancelSubject("r-fired")); n != 1 {
		t.Errorf("r-fired: %d events, want 1", n)
	}
	if p := d.Service().Pending(); p != 0 {
		t.Errorf("pending = %d, want 0", p)
	}
	for k, v := range map[string]int64{"r-cleared": 2, "r-fired": 1} {
		if st, ver := e.state(t, k); st != int16(timeoutd.StateRetired) || ver != v {
			t.Errorf("%s: state %d version %d, want retired (3) at %d", k, st, ver, v)
		}
	}
}

// TestForgottenMarksRefuseStaleCommandsByAge: with TIMEOUTD_MARK_RETENTION
// the janitor deletes the version marks older than the retention (plus the
// clock-skew margin), and a stale command of such a key, issued before the
// retention, is dead-lettered as command_too_old instead of resurrecting
// it; a command without issued_at is refused, a fresh one goes through,
// and a recent mark stays.
func TestForgottenMarksRefuseStaleCommandsByAge(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.start(t, func(c *daemon.Config) {
		c.Service.MarkRetention = timeoutd.MarkRetentionMin
		c.Service.TombstoneTTL = time.Millisecond
		c.Service.JanitorInterval = 20 * time.Millisecond
	})
	now := time.Now().UTC()
	issued := func(c events.Command, at time.Time) events.Command { c.IssuedAt = at; return c }
	for _, k := range []string{"f-old", "f-recent"} {
		e.publish(t, issued(setCmd(k, 1, now.Add(time.Hour)), now))
		e.publish(t, issued(clearCmd(k, 2), now))
		eventually(t, 10*time.Second, k+" retired to a mark", func() bool { st, _ := e.state(t, k); return st == int16(timeoutd.StateRetired) })
	}
	// f-old's mark is made older than the retention and the skew margin.
	old := now.Add(-timeoutd.MarkRetentionMin - timeoutd.MarkClockSkew - time.Minute)
	if _, err := e.pool.Exec(context.Background(), `UPDATE timeouts SET deadline_ns = $1 WHERE key = timeout_key($2)`, old.UnixNano(), "f-old"); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "f-old's mark forgotten", func() bool { st, _ := e.state(t, "f-old"); return st == -1 })

	stale := issued(setCmd("f-old", 1, now.Add(time.Hour)), now.Add(-timeoutd.MarkRetentionMin-time.Minute))
	e.publish(t, stale, "-replayed")
	e.publish(t, setCmd("f-unstamped", 1, now.Add(time.Hour)))
	e.publish(t, issued(setCmd("f-fresh", 1, now.Add(time.Hour)), now))
	eventually(t, 5*time.Second, "f-fresh pending", func() bool { st, _ := e.state(t, "f-fresh"); return st == int16(timeoutd.StatePending) })
	for _, tt := range []struct {
		reason events.Reason
		key    string
	}{{events.ReasonCommandTooOld, "f-old"}, {events.ReasonInvalidField, "f-unstamped"}} {
		subject := events.TenantDeadLetterSubject("timeoutd", events.OrdersTenant, tt.reason)
		var m *jetstream.RawStreamMsg
		eventually(t, 5*time.Second, "dead letter on "+subject, func() bool { m = e.last(t, events.StreamDeadLetters, subject); return m != nil })
		var dl events.DeadLetter
		if err := json.Unmarshal(m.Data, &dl); err != nil {
			t.Fatal(err)
		}
		if dl.Field != "issued_at" || dl.Subject != events.CommandSubject(tt.key) {
			t.Errorf("dead letter %+v, want %s's on issued_at", dl, tt.key)
		}
	}
	if st, _ := e.state(t, "f-old"); st != -1 {
		t.Errorf("f-old: state %d, want no row: the stale set must not be stored", st)
	}
	if st, v := e.state(t, "f-recent"); st != int16(timeoutd.StateRetired) || v != 2 {
		t.Errorf("f-recent: state %d version %d, want its mark kept", st, v)
	}
}

// TestReadsCannotStarveFires holds every connection of the read API's pool
// (as slow or many readers would): a read of the API waits, while a
// timeout is still ingested and fired, because ingest and fire have a pool
// of their own (issue 14, 2.6).
func TestReadsCannotStarveFires(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	d := e.start(t, func(c *daemon.Config) { c.ReadDBMaxConns = 2 })
	ctx := t.Context()
	for range 2 {
		c, err := d.ReadPool().Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Release()
	}

	// The read API waits for a connection of its pool.
	rctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(rctx, "GET", "http://"+d.Addr()+"/api/v1/timeouts?limit=1", nil)
	if resp, err := http.DefaultClient.Do(req); err == nil {
		resp.Body.Close()
		t.Fatalf("a read answered %d with its pool exhausted: the read API does not use its own pool", resp.StatusCode)
	}

	// Ingest and fire do not.
	deadline := time.Now().Add(300 * time.Millisecond)
	e.publish(t, setCmd("starve-1", 1, deadline))
	e.expiry(t, events.OrderCancelSubject("starve-1"), events.OutcomeFired, "starve-1", 1, deadline)
}

// TestSettingsValidated: settings that would stall ingest (TIMEOUTD_MAX_PENDING
// below the batch size used to stop ingest for good, issue 14 item 2.1) or
// misconfigure the read API are refused, naming their variable.
func TestSettingsValidated(t *testing.T) {
	t.Parallel()
	base := map[string]string{"TIMEOUTD_DATABASE_URL": "postgres://unused", "TIMEOUTD_NATS_URL": "nats://unused:4222"}
	tests := []struct {
		name, want string
		env        map[string]string
	}{
		{"max pending below the batch size", "TIMEOUTD_MAX_PENDING", map[string]string{"TIMEOUTD_MAX_PENDING": "100", "TIMEOUTD_BATCH_SIZE": "500"}},
		{"max pending below the default batch size", "TIMEOUTD_MAX_PENDING", map[string]string{"TIMEOUTD_MAX_PENDING": "10"}},
		{"read pool below one", "TIMEOUTD_READ_DB_MAX_CONNS", map[string]string{"TIMEOUTD_READ_DB_MAX_CONNS": "-1"}},
		{"negative stream bound", "TIMEOUTD_MAX_STREAMS", map[string]string{"TIMEOUTD_MAX_STREAMS": "-5"}},
		{"read token is the operator token", "TIMEOUTD_READ_TOKEN", map[string]string{"TIMEOUTD_READ_TOKEN": "t",
			"TIMEOUTD_OPERATOR_TOKEN": "t", "TIMEOUTD_ORDERS_URL": "http://orders:8081", "TIMEOUTD_ORDERS_TOKEN": "o"}},
		{"pull heartbeat beyond half the pull expiry", "PullHeartbeat", map[string]string{"TIMEOUTD_PULL_HEARTBEAT": "10s"}},
		{"ack wait below a second", "AckWait", map[string]string{"TIMEOUTD_ACK_WAIT": "100ms"}},
		{"prefetch beyond 10,000 messages", "Prefetch", map[string]string{"TIMEOUTD_PREFETCH": "20000"}},
		{"linger beyond 100ms", "Linger", map[string]string{"TIMEOUTD_LINGER": "1s"}},
		{"write timeout not a duration", "TIMEOUTD_STREAM_WRITE_TIMEOUT", map[string]string{"TIMEOUTD_STREAM_WRITE_TIMEOUT": "soon"}},
		{"nats CA missing", "TIMEOUTD_NATS_CA_FILE", map[string]string{"TIMEOUTD_NATS_CA_FILE": "/nonexistent/ca.crt"}},
		{"nats certificate without its key", "TIMEOUTD_NATS_KEY_FILE", map[string]string{"TIMEOUTD_NATS_CERT_FILE": "/etc/tls/client.crt"}},
		{"an application name of the URL's", "application_name", map[string]string{
			"TIMEOUTD_DATABASE_URL": "postgres://unused/timeouts?application_name=shared"}},
		{"an application name of the key=value pairs'", "application_name", map[string]string{
			"TIMEOUTD_DATABASE_URL": "host=unused dbname=timeouts application_name=shared"}},
		{"postgres CA missing", "TIMEOUTD_DATABASE_URL", map[string]string{
			"TIMEOUTD_DATABASE_URL": "postgres://unused/timeouts?sslmode=verify-full&sslrootcert=/nonexistent/ca.crt"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			env := maps.Clone(base)
			maps.Copy(env, tt.env)
			cfg, err := daemon.FromEnv(env)
			if err == nil {
				_, err = daemon.New(context.Background(), cfg)
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want one naming %s", err, tt.want)
			}
		})
	}
}

// TestDebugAddrServesProfilesApartFromTheAPI: with DebugAddr the runtime
// profiles answer there (a CPU profile among them) and never on the API's
// port; without it no listener is opened.
func TestDebugAddrServesProfilesApartFromTheAPI(t *testing.T) {
	e := newEnv(t)
	d := e.start(t, func(c *daemon.Config) { c.DebugAddr = "127.0.0.1:0" })
	if d.DebugAddr() == "" || d.DebugAddr() == d.Addr() {
		t.Fatalf("DebugAddr() = %q beside Addr() %q, want a listener of its own", d.DebugAddr(), d.Addr())
	}
	if code, body := get(t, "http://"+d.DebugAddr()+"/debug/pprof/profile?seconds=1"); code != http.StatusOK || len(body) == 0 {
		t.Fatalf("CPU profile on DebugAddr: %d, %d bytes", code, len(body))
	}
	if code, body := get(t, "http://"+d.DebugAddr()+"/debug/pprof/"); code != http.StatusOK || !strings.Contains(body, "goroutine") {
		t.Fatalf("profile index on DebugAddr: %d %.200q", code, body)
	}
	if code, _ := get(t, "http://"+d.Addr()+"/debug/pprof/"); code != http.StatusNotFound {
		t.Fatalf("profile index on the API's port: %d, want 404", code)
	}
	d.stop(t)
	if without := e.start(t, nil); without.DebugAddr() != "" {
		t.Fatalf("DebugAddr() without the setting = %q, want none", without.DebugAddr())
	}
}
