package timeouts_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/ordertimeout/ordertimeout/internal/streams"
	"github.com/ordertimeout/ordertimeout/internal/testinfra"
	"github.com/ordertimeout/ordertimeout/pkg/events"
	"github.com/ordertimeout/ordertimeout/pkg/outbox"
	"github.com/ordertimeout/ordertimeout/pkg/timeouts"
)

func TestMain(m *testing.M) { testinfra.Main(m) }

// TestWriterSetsOnlyWithTheCommit: on a real Postgres and NATS, a deadline
// written in a transaction that rolls back is never published; one that
// commits reaches its partition's command stream through the relay,
// packed, with its dedupe id and the trace context of the writer's span;
// a refused one fails the call and writes nothing.
func TestWriterSetsOnlyWithTheCommit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, testinfra.Postgres(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if err := outbox.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	js := testinfra.NATS(t).JetStream(t)
	if err := streams.Ensure(ctx, js, streams.Config{}); err != nil {
		t.Fatal(err)
	}
	relay, err := outbox.NewRelay(pool, js, outbox.Config{Pack: timeouts.Pack})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 11, 26, 9, 0, 0, 0, time.UTC)
	w := timeouts.Writer{Tenant: "res", FireSubjectPrefixes: []string{"reservations.expire."}, Now: func() time.Time { return now }}
	const writer = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	ctx = trace.ContextWithRemoteSpanContext(ctx, mustSpanContext(t, writer))
	set := func(key string, commit bool) error {
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = tx.Rollback(ctx) }()
		err = w.Set(ctx, tx, timeouts.Deadline{Key: key, Version: 1, At: now.Add(time.Minute), FireSubject: "reservations.expire." + key})
		if err != nil || !commit {
			return err
		}
		return tx.Commit(ctx)
	}
	if err := set("res-rolled-back", false); err != nil {
		t.Fatal(err)
	}
	if err := set("res-committed", true); err != nil {
		t.Fatal(err)
	}
	if err := set("res/bad", true); !errors.Is(err, timeouts.ErrRefused) {
		t.Fatalf("Set of key res/bad = %v, want refused", err)
	}
	n, err := relay.Flush(ctx)
	if err != nil || n != 1 {
		t.Fatalf("Flush = %d, %v; want the one committed command", n, err)
	}
	key := events.TenantKey("res", "res-committed")
	s, err := js.Stream(ctx, events.CommandStream(events.PartitionOf(key)))
	if err != nil {
		t.Fatal(err)
	}
	m, err := s.GetLastMsgForSubject(ctx, events.PartitionedCommandSubject(key))
	if err != nil {
		t.Fatalf("command of %s not in its partition's stream: %v", key, err)
	}
	if id := m.Header.Get(jetstream.MsgIDHeader); !strings.HasPrefix(id, "set:res.res-committed:1:") || events.CheckMsgID(id) != nil {
		t.Fatalf("Nats-Msg-Id %q, want set:res.res-committed:1 and a nonce", id)
	}
	if tp := m.Header.Get("traceparent"); tp != writer {
		t.Fatalf("traceparent %q, want the writer's span %q", tp, writer)
	}
	c, err := events.DecodeCommand(m.Data)
	if err != nil || c.FireSubject != "reservations.expire.res-committed" || !c.IssuedAt.Equal(now) {
		t.Fatalf("stored command %+v, %v", c, err)
	}
	for _, k := range []string{events.TenantKey("res", "res-rolled-back")} {
		s, err := js.Stream(ctx, events.CommandStream(events.PartitionOf(k)))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.GetLastMsgForSubject(ctx, events.PartitionedCommandSubject(k)); !errors.Is(err, jetstream.ErrMsgNotFound) {
			t.Fatalf("command of the rolled back %s: %v, want none", k, err)
		}
	}
}

// TestConsumerHandlesDurablyAndDeadLetters: on a real NATS, valid expiry
// events reach Handle, a failed Handle is redelivered until it succeeds,
// an event that does not decode and a missed one are dead-lettered with
// their reasons, and everything ends acked or terminated. A redelivered
// duplicate reaches Handle again: the handler's conditional apply absorbs
// it. Handle's context carries the event's trace context.
func TestConsumerHandlesDurablyAndDeadLetters(t *testing.T) {
	t.Parallel()
	js := testinfra.NATS(t).JetStream(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := streams.Ensure(ctx, js, streams.Config{FireSubjectPrefixes: []string{"reservations.expire."}}); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	calls := map[string]int{} // msg id → Handle calls
	traces := map[string]string{}
	const fire = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	applied := map[string]int64{}
	failOnce := true
	c, err := timeouts.NewConsumer(ctx, js, timeouts.ConsumerConfig[events.Expiry]{
		Durable:       "reservations",
		FilterSubject: "reservations.expire.>",
		Decode:        timeouts.DecodeExpiry,
		RetryDelay:    50 * time.Millisecond,
		Logger:        slog.New(slog.DiscardHandler),
		Handle: func(ctx context.Context, e events.Expiry) error {
			mu.Lock()
			defer mu.Unlock()
			calls[e.MsgID()]++
			traces[e.Key] = trace.SpanContextFromContext(ctx).TraceID().String()
			if e.Key == "res-2" && failOnce {
				failOnce = false
				return errors.New("database unavailable")
			}
			if e.Version > applied[e.Key] { // the conditional apply
				applied[e.Key] = e.Version
			}
			return nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()

	at := time.Date(2026, 11, 26, 9, 0, 0, 0, time.UTC)
	publish := func(subject string, data []byte, id string) {
		t.Helper()
		m := &nats.Msg{Subject: subject, Data: data, Header: nats.Header{}}
		m.Header.Set(jetstream.MsgIDHeader, id)
		if subject == "reservations.expire.res-2" {
			m.Header.Set("traceparent", fire)
		}
		if _, err := js.PublishMsg(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	expiry := func(key string, outcome events.Outcome) (events.Expiry, []byte) {
		e := events.Expiry{Schema: 1, Outcome: outcome, Key: key, Version: 1, Deadline: at, FiredAt: at.Add(time.Millisecond), LatenessNs: 1e6}
		data, err := json.Marshal(e)
		if err != nil {
			t.Fatal(err)
		}
		return e, data
	}
	for _, key := range []string{"res-1", "res-2"} {
		e, data := expiry(key, events.OutcomeFired)
		publish("reservations.expire."+key, data, e.MsgID())
	}
	e, data := expiry("res-1", events.OutcomeFired)
	publish("reservations.expire.res-1", data, "republished-"+e.MsgID()) // beyond the dedupe window
	publish("reservations.expire.res-3", []byte(`{"schema":1,"outcome":"fired"`), "broken")
	e, data = expiry("res-4", events.OutcomeMissed)
	publish("reservations.expire.res-4", data, e.MsgID())

	dlq, err := js.Stream(ctx, events.StreamDeadLetters)
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(15 * time.Second); ; {
		cons, err := js.Consumer(ctx, events.StreamExpiries, "reservations")
		if err != nil {
			t.Fatal(err)
		}
		info, err := cons.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		_, malformed := dlq.GetLastMsgForSubject(ctx, events.DeadLetterSubject("reservations", events.ReasonMalformed))
		_, missed := dlq.GetLastMsgForSubject(ctx, events.DeadLetterSubject("reservations", events.ReasonUnknownKind))
		if info.AckFloor.Stream == 5 && info.NumAckPending == 0 && malformed == nil && missed == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not drained: ack floor %d, pending %d, dead letters %v / %v", info.AckFloor.Stream, info.NumAckPending, malformed, missed)
		}
		time.Sleep(20 * time.Millisecond)
	}
	mu.Lock()
	if calls["fired:res-1:1"] != 2 || calls["fired:res-2:1"] != 2 || len(calls) != 2 {
		t.Errorf("Handle calls %v, want res-1 twice (republished), res-2 twice (failed once), nothing else", calls)
	}
	if applied["res-1"] != 1 || applied["res-2"] != 1 {
		t.Errorf("applied %v", applied)
	}
	if traces["res-2"] != "0af7651916cd43dd8448eb211c80319c" || traces["res-1"] != "00000000000000000000000000000000" {
		t.Errorf("Handle's trace ids %v, want res-2's from its header and none for res-1", traces)
	}
	mu.Unlock()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return")
	}
}

// TestNewConsumerValidates: a configuration without its required fields
// is refused, naming them.
func TestNewConsumerValidates(t *testing.T) {
	t.Parallel()
	_, err := timeouts.NewConsumer(context.Background(), nil, timeouts.ConsumerConfig[events.Expiry]{Durable: "r", FilterSubject: "x.>"})
	if err == nil || err.Error() != "timeouts: Decode and Handle are required" {
		t.Fatalf("NewConsumer without Decode = %v", err)
	}
	_, err = timeouts.NewConsumer(context.Background(), nil, timeouts.ConsumerConfig[events.Expiry]{Durable: "a.b"})
	if err == nil {
		t.Fatal("NewConsumer with durable a.b succeeded")
	}
	for field, cfg := range map[string]timeouts.ConsumerConfig[events.Expiry]{
		"AckWait":       {AckWait: 500 * time.Millisecond},
		"HandleTimeout": {HandleTimeout: -time.Second},
		"RetryDelay":    {RetryDelay: -time.Second},
		"MaxAckPending": {MaxAckPending: -1},
	} {
		cfg.Durable, cfg.FilterSubject, cfg.Decode = "r", "x.>", timeouts.DecodeExpiry
		cfg.Handle = func(context.Context, events.Expiry) error { return nil }
		if _, err := timeouts.NewConsumer(context.Background(), nil, cfg); err == nil || !strings.Contains(err.Error(), field) {
			t.Errorf("NewConsumer with %s out of range = %v, want an error naming it", field, err)
		}
	}
}

// mustSpanContext parses a W3C traceparent.
func mustSpanContext(t *testing.T, traceparent string) trace.SpanContext {
	t.Helper()
	ctx := propagation.TraceContext{}.Extract(context.Background(), propagation.MapCarrier{"traceparent": traceparent})
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() {
		t.Fatalf("invalid traceparent %q", traceparent)
	}
	return sc
}

var _ outbox.Execer = pgx.Tx(nil) // a Writer writes in the caller's pgx transaction

// TestAConsumerKeepsSlowWorkAndACrashCostsSeconds: on a real NATS, with the
// default AckWait (2s), an event whose Handle takes 2.5 times AckWait is
// kept in progress and reaches Handle once, though another instance pulls
// meanwhile; an instance that dies holding an event (its connection
// closes, as a SIGKILLed process's does) costs about AckWait: another
// instance handles the event within 3s.
func TestAConsumerKeepsSlowWorkAndACrashCostsSeconds(t *testing.T) {
	t.Parallel()
	srv := testinfra.NATS(t)
	ctx := t.Context()
	js := srv.JetStream(t)
	if err := streams.Ensure(ctx, js, streams.Config{FireSubjectPrefixes: []string{"reservations.expire."}}); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	calls := map[string]map[string]int{} // instance → key → Handle calls
	got := make(chan string, 8)          // "instance key" as Handle starts
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	// instance runs a Consumer on a connection of its own until its
	// context ends or its connection closes.
	instance := func(name string) (*nats.Conn, context.CancelFunc, <-chan error) {
		nc, err := nats.Connect(srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		ijs, err := jetstream.New(nc)
		if err != nil {
			t.Fatal(err)
		}
		c, err := timeouts.NewConsumer(ctx, ijs, timeouts.ConsumerConfig[events.Expiry]{
			Durable: "reservations", FilterSubject: "reservations.expire.>", Decode: timeouts.DecodeExpiry,
			Logger: slog.New(slog.DiscardHandler),
			Handle: func(_ context.Context, e events.Expiry) error {
				mu.Lock()
				if calls[name] == nil {
					calls[name] = map[string]int{}
				}
				calls[name][e.Key]++
				mu.Unlock()
				got <- name + " " + e.Key
				switch e.Key {
				case "res-slow":
					time.Sleep(5 * time.Second) // the handler's work
				case "res-held":
					<-release // held until the instance dies
				}
				return nil
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		ictx, stop := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- c.Run(ictx) }()
		return nc, stop, done
	}
	receive := func() string {
		t.Helper()
		select {
		case s := <-got:
			return s
		case <-time.After(10 * time.Second):
			t.Fatal("no event handled within 10s")
			return ""
		}
	}
	publish := func(key string) {
		t.Helper()
		at := time.Now().UTC()
		data, _ := json.Marshal(events.Expiry{Schema: 1, Outcome: events.OutcomeFired, Key: key, Version: 1, Deadline: at, FiredAt: at})
		if _, err := js.Publish(ctx, "reservations.expire."+key, data); err != nil {
			t.Fatal(err)
		}
	}
	drained := func() {
		t.Helper()
		cons, err := js.Consumer(ctx, events.StreamExpiries, "reservations")
		if err != nil {
			t.Fatal(err)
		}
		for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			if info, err := cons.Info(ctx); err == nil && info.NumAckPending == 0 && info.NumPending == 0 {
				return
			}
			if time.Now().After(deadline) {
				t.Fatal("events still pending after 20s")
			}
		}
	}

	ncA, _, _ := instance("a")
	publish("res-slow")
	if s := receive(); s != "a res-slow" {
		t.Fatalf("handled %q first, want a res-slow", s)
	}
	_, stopB, doneB := instance("b")
	drained()
	mu.Lock()
	if calls["a"]["res-slow"] != 1 || calls["b"]["res-slow"] != 0 {
		t.Errorf("res-slow handled %d times by its instance and %d by the other, want once in all", calls["a"]["res-slow"], calls["b"]["res-slow"])
	}
	mu.Unlock()
	stopB()
	if err := <-doneB; err != nil {
		t.Fatal(err)
	}

	publish("res-held")
	if s := receive(); s != "a res-held" {
		t.Fatalf("handled %q, want a res-held", s)
	}
	ncA.Close() // the crash: no ack, no progress, ever
	crashedAt := time.Now()
	instance("c")
	if s := receive(); s != "c res-held" {
		t.Fatalf("handled %q, want c res-held", s)
	}
	took := time.Since(crashedAt)
	t.Logf("the crashed instance's event reached another %s after the crash", took.Round(time.Millisecond))
	if took > 3*time.Second {
		t.Fatalf("the crashed instance's event reached another %s after the crash, want within 3s", took)
	}
}
