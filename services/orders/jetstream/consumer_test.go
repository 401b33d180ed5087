package jetstream_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ordertimeout/ordertimeout/internal/streams"
	"github.com/ordertimeout/ordertimeout/internal/testinfra"
	"github.com/ordertimeout/ordertimeout/pkg/events"
	"github.com/ordertimeout/ordertimeout/services/orders"
	ojs "github.com/ordertimeout/ordertimeout/services/orders/jetstream"
)

func TestMain(m *testing.M) { testinfra.Main(m) }

// flakyExpirer fails a batch with a transient error when it holds an
// order's first call, then records the versions it applied; batches records
// the size of each batch it was given.
type flakyExpirer struct {
	mu      sync.Mutex
	calls   map[string]int
	applied map[string][]int64
	batches []int
}

func (f *flakyExpirer) ExpireAll(_ context.Context, exps []orders.Expiry) ([]orders.ExpireResult, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.batches = append(f.batches, len(exps))
	first := false
	for _, e := range exps {
		f.calls[e.ID]++
		first = first || f.calls[e.ID] == 1
	}
	if first {
		return nil, errors.New("postgres: connection refused")
	}
	results := make([]orders.ExpireResult, len(exps))
	for i, e := range exps {
		switch {
		case e.ID == "unknown":
			results[i].Err = orders.ErrNotFound
		case e.ID == "forged":
			results[i].Err = orders.ErrDeadlineMismatch
		case e.ID == "early" && f.calls[e.ID] == 2:
			results[i].Err = &orders.EarlyError{PayBy: time.Now().Add(200 * time.Millisecond)}
		default:
			f.applied[e.ID] = append(f.applied[e.ID], e.Version)
			results[i] = orders.ExpireResult{Order: orders.Order{ID: e.ID}, Applied: true}
		}
	}
	return results, nil
}

func (f *flakyExpirer) snapshot() (map[string]int, map[string][]int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	calls := map[string]int{}
	applied := map[string][]int64{}
	for k, v := range f.calls {
		calls[k] = v
	}
	for k, v := range f.applied {
		applied[k] = append([]int64(nil), v...)
	}
	return calls, applied
}

// newJetStream returns a JetStream client of a NATS server of t's own,
// with the platform's streams.
func newJetStream(t *testing.T) jetstream.JetStream {
	t.Helper()
	js := testinfra.NATS(t).JetStream(t)
	if err := streams.Ensure(context.Background(), js, streams.Config{}); err != nil {
		t.Fatal(err)
	}
	return js
}

func TestConsumerRetriesTransientFailuresAndDeadLetters(t *testing.T) {
	t.Parallel()
	js := newJetStream(t)
	ctx, cancel := context.WithCancel(context.Background())
	exp := &flakyExpirer{calls: map[string]int{}, applied: map[string][]int64{}}
	// One event per batch: each event's calls are counted alone.
	c, err := ojs.NewConsumer(ctx, js, exp, ojs.Config{Concurrency: 2, BatchMax: 1, RetryDelay: 50 * time.Millisecond,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	c.Start(ctx)

	d := time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)
	publish := func(subject string, data []byte, id string) {
		t.Helper()
		m := &nats.Msg{Subject: subject, Data: data, Header: nats.Header{}}
		m.Header.Set(jetstream.MsgIDHeader, id)
		if _, err := js.PublishMsg(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	fired := func(key string, outcome events.Outcome) []byte {
		b, _ := json.Marshal(events.Expiry{Schema: 1, Outcome: outcome, Key: key, Version: 3, Deadline: d, FiredAt: d})
		return b
	}
	publish(events.OrderCancelSubject("o-1"), fired("o-1", events.OutcomeFired), "1")
	publish(events.OrderCancelSubject("unknown"), fired("unknown", events.OutcomeFired), "2")
	publish(events.OrderCancelSubject("o-2"), fired("o-2", events.OutcomeMissed), "3")
	publish(events.OrderCancelSubject("o-3"), []byte(`{"schema":2,"outcome":"fired"}`), "4")
	publish(events.OrderCancelSubject("forged"), fired("forged", events.OutcomeFired), "6")
	publish(events.OrderCancelSubject("early"), fired("early", events.OutcomeFired), "7")

	tests := []struct {
		name    string
		subject string
		reason  events.Reason
		field   string
	}{
		{"missed outcome on a cancel subject", events.DeadLetterSubject("orders", events.ReasonUnknownKind), events.ReasonUnknownKind, "outcome"},
		{"newer schema", events.DeadLetterSubject("orders", events.ReasonUnsupportedSchema), events.ReasonUnsupportedSchema, "schema"},
		{"current version with another deadline", events.DeadLetterSubject("orders", events.ReasonInvalidDeadline), events.ReasonInvalidDeadline, "deadline"},
	}
	dlq, err := js.Stream(ctx, events.StreamDeadLetters)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var m *jetstream.RawStreamMsg
			poll(t, func() bool {
				m, err = dlq.GetLastMsgForSubject(ctx, tt.subject)
				return err == nil
			})
			var dl events.DeadLetter
			if err := json.Unmarshal(m.Data, &dl); err != nil || dl.Reason != tt.reason || dl.Field != tt.field || m.Header.Get(jetstream.MsgIDHeader) == "" {
				t.Fatalf("dead letter = %+v (%v)", dl, err)
			}
		})
	}
	poll(t, func() bool {
		calls, applied := exp.snapshot()
		return len(applied["o-1"]) == 1 && calls["unknown"] == 2 && len(applied["early"]) == 1
	})
	calls, applied := exp.snapshot()
	// early: a transient failure, then early (naked until pay_by), then applied.
	if calls["o-1"] != 2 || applied["o-1"][0] != 3 || calls["o-2"] != 0 || calls["o-3"] != 0 || calls["early"] != 3 || len(applied["forged"]) != 0 {
		t.Fatalf("calls %v applied %v: want one retry of o-1 and none for rejected events", calls, applied)
	}

	// A deleted consumer (say, JetStream state lost) is re-created and
	// pulled again.
	if err := js.DeleteConsumer(ctx, events.StreamExpiries, ojs.DurableDefault); err != nil {
		t.Fatal(err)
	}
	publish(events.OrderCancelSubject("o-4"), fired("o-4", events.OutcomeFired), "5")
	poll(t, func() bool {
		_, applied := exp.snapshot()
		return len(applied["o-4"]) == 1
	})
	cancel()
	stopWithin(t, c, 10*time.Second)
}

// stopWithin fails unless c's Stop returns within d.
func stopWithin(t *testing.T, c *ojs.Consumer, d time.Duration) {
	t.Helper()
	stopped := make(chan struct{})
	go func() { c.Stop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(d):
		t.Fatal("the consumer did not stop")
	}
}

// poll waits up to 10s for cond.
func poll(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 10s")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestConsumerAppliesABacklogInBatches: events already waiting when the
// consumer starts are applied in batches of up to BatchMax, each event
// once, and every one is acked.
func TestConsumerAppliesABacklogInBatches(t *testing.T) {
	t.Parallel()
	js := newJetStream(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const n, batchMax = 300, 64
	// Every order already had its first call: no transient failure.
	exp := &flakyExpirer{calls: map[string]int{}, applied: map[string][]int64{}}
	d := time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)
	for i := range n {
		key := fmt.Sprintf("batch-%d", i)
		exp.calls[key] = 1
		data, _ := json.Marshal(events.Expiry{Schema: 1, Outcome: events.OutcomeFired, Key: key, Version: 1, Deadline: d, FiredAt: d})
		if _, err := js.Publish(ctx, events.OrderCancelSubject(key), data); err != nil {
			t.Fatal(err)
		}
	}
	c, err := ojs.NewConsumer(ctx, js, exp, ojs.Config{Durable: "batches", Concurrency: 1, BatchMax: batchMax,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	c.Start(ctx)
	defer c.Stop()
	poll(t, func() bool {
		_, applied := exp.snapshot()
		return len(applied) == n
	})
	_, applied := exp.snapshot()
	for key, versions := range applied {
		if len(versions) != 1 {
			t.Fatalf("%s applied %d times", key, len(versions))
		}
	}
	exp.mu.Lock()
	batches := slices.Clone(exp.batches)
	exp.mu.Unlock()
	if slices.Max(batches) < 2 || slices.Max(batches) > batchMax {
		t.Fatalf("batch sizes %v: want some above 1, none above %d", batches, batchMax)
	}
	cons, err := js.Consumer(ctx, events.StreamExpiries, "batches")
	if err != nil {
		t.Fatal(err)
	}
	poll(t, func() bool {
		info, err := cons.Info(ctx)
		return err == nil && info.NumAckPending == 0 && info.NumPending == 0
	})
}

// outageExpirer answers orders.ErrUnavailable, as the store does while
// the database is down, until up is closed; it reports every call on
// calls and the time of its first success on applied.
type outageExpirer struct {
	up      chan struct{}
	calls   chan struct{}
	applied chan time.Time
}

func (o *outageExpirer) ExpireAll(_ context.Context, exps []orders.Expiry) ([]orders.ExpireResult, error) {
	select {
	case o.calls <- struct{}{}:
	default:
	}
	select {
	case <-o.up:
	default:
		return nil, fmt.Errorf("%w: dial tcp: connection refused", orders.ErrUnavailable)
	}
	select {
	case o.applied <- time.Now():
	default:
	}
	results := make([]orders.ExpireResult, len(exps))
	for i := range results {
		results[i].Applied = true
	}
	return results, nil
}

// TestABatchWaitsHeldWhileTheDatabaseIsUnavailable: an event whose batch
// meets a database outage (a failover) is tried again, held, and applied
// within a fraction of a second of the database's return, not after the
// nak's delay (RetryDelay, 5s here), and it is delivered once.
func TestABatchWaitsHeldWhileTheDatabaseIsUnavailable(t *testing.T) {
	t.Parallel()
	js := newJetStream(t)
	ctx := t.Context()
	exp := &outageExpirer{up: make(chan struct{}), calls: make(chan struct{}), applied: make(chan time.Time, 1)}
	c, err := ojs.NewConsumer(ctx, js, exp, ojs.Config{Durable: "outage", Concurrency: 1, RetryDelay: 5 * time.Second,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	c.Start(ctx)
	defer stopWithin(t, c, 10*time.Second)
	publishFired(t, js, "o-outage")
	for range 3 { // refused three times: retried in place
		select {
		case <-exp.calls:
		case <-time.After(10 * time.Second):
			t.Fatal("the batch was not tried again within 10s")
		}
	}
	upAt := time.Now()
	close(exp.up)
	select {
	case at := <-exp.applied:
		if d := at.Sub(upAt); d > time.Second {
			t.Fatalf("applied %v after the database came back, want within 1s (a nak waits 5s)", d)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("not applied within 10s of the database's return")
	}
	cons, err := js.Consumer(ctx, events.StreamExpiries, "outage")
	if err != nil {
		t.Fatal(err)
	}
	poll(t, func() bool {
		info, err := cons.Info(ctx)
		return err == nil && info.NumAckPending == 0
	})
	info, err := cons.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.Delivered.Consumer != 1 {
		t.Fatalf("delivered %d times, want once", info.Delivered.Consumer)
	}
}

// holdingExpirer takes its events and holds them, as an instance whose
// transaction has not committed yet: it reports each event's id on got,
// then blocks until release is closed and applies it.
type holdingExpirer struct {
	got     chan string
	release chan struct{}
	// hold, when positive, is how long it holds instead: the apply of a
	// slow transaction.
	hold time.Duration
}

func (h *holdingExpirer) ExpireAll(_ context.Context, exps []orders.Expiry) ([]orders.ExpireResult, error) {
	for _, e := range exps {
		h.got <- e.ID
	}
	if h.hold > 0 {
		time.Sleep(h.hold) // the transaction's work
	} else {
		<-h.release
	}
	results := make([]orders.ExpireResult, len(exps))
	for i := range results {
		results[i].Applied = true
	}
	return results, nil
}

// connect returns a JetStream client on a connection of its own to srv,
// as another instance of the service has.
func connect(t *testing.T, srv *testinfra.NATSServer) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	nc, err := nats.Connect(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return nc, js
}

// publishFired publishes the cancel event of key, due a minute ago.
func publishFired(t *testing.T, js jetstream.JetStream, key string) {
	t.Helper()
	d := time.Now().Add(-time.Minute).UTC()
	data, _ := json.Marshal(events.Expiry{Schema: 1, Outcome: events.OutcomeFired, Key: key, Version: 1, Deadline: d, FiredAt: d})
	if _, err := js.Publish(t.Context(), events.OrderCancelSubject(key), data); err != nil {
		t.Fatal(err)
	}
}

// receive returns the next id on got, failing t after 10s.
func receive(t *testing.T, got <-chan string) string {
	t.Helper()
	select {
	case id := <-got:
		return id
	case <-time.After(10 * time.Second):
		t.Fatal("no event within 10s")
		return ""
	}
}

// TestACrashedInstancesEventsGoToAnotherWithinSeconds: an instance that
// received a cancel event and dies before acking it (its connection
// closes, as a SIGKILLed process's does) costs about AckWait (2s), not
// half a minute: another instance applies the event within 3s. The durable
// consumer starts with the previous release's AckWait of 30s, which the
// first instance's start updates.
func TestACrashedInstancesEventsGoToAnotherWithinSeconds(t *testing.T) {
	t.Parallel()
	srv := testinfra.NATS(t)
	ctx := t.Context()
	js := srv.JetStream(t)
	if err := streams.Ensure(ctx, js, streams.Config{}); err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateOrUpdateConsumer(ctx, events.StreamExpiries, jetstream.ConsumerConfig{Durable: ojs.DurableDefault,
		FilterSubject: events.OrderCancelSubjects, AckPolicy: jetstream.AckExplicitPolicy, AckWait: 30 * time.Second,
		MaxDeliver: -1, MaxAckPending: ojs.MaxAckPendingDefault}); err != nil {
		t.Fatal(err)
	}
	quiet := slog.New(slog.DiscardHandler)
	crashing := &holdingExpirer{got: make(chan string, 1), release: make(chan struct{})}
	t.Cleanup(func() { close(crashing.release) })
	ncA, jsA := connect(t, srv)
	a, err := ojs.NewConsumer(ctx, jsA, crashing, ojs.Config{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	cons, err := js.Consumer(ctx, events.StreamExpiries, ojs.DurableDefault)
	if err != nil {
		t.Fatal(err)
	}
	if got := cons.CachedInfo().Config.AckWait; got != ojs.AckWaitDefault {
		t.Fatalf("the durable's AckWait after a start = %v, want it updated to %v", got, ojs.AckWaitDefault)
	}
	a.Start(ctx)
	publishFired(t, js, "crash-1")
	receive(t, crashing.got)
	ncA.Close() // the crash: no ack, no progress, ever
	crashedAt := time.Now()

	survivor := &flakyExpirer{calls: map[string]int{"crash-1": 1}, applied: map[string][]int64{}}
	_, jsB := connect(t, srv)
	b, err := ojs.NewConsumer(ctx, jsB, survivor, ojs.Config{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	b.Start(ctx)
	defer stopWithin(t, b, 10*time.Second)
	poll(t, func() bool {
		_, applied := survivor.snapshot()
		return len(applied["crash-1"]) == 1
	})
	took := time.Since(crashedAt)
	t.Logf("the crashed instance's event applied by the other %s after the crash", took.Round(time.Millisecond))
	if took > 3*time.Second {
		t.Fatalf("the crashed instance's event was applied %s after the crash, want within 3s", took)
	}
}

// TestASlowApplyIsNotRedelivered: a batch whose transaction lasts 3.5
// times AckWait is kept in progress: the event is not redelivered, to
// another instance or to its own, and is applied once.
func TestASlowApplyIsNotRedelivered(t *testing.T) {
	t.Parallel()
	srv := testinfra.NATS(t)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	js := srv.JetStream(t)
	if err := streams.Ensure(ctx, js, streams.Config{}); err != nil {
		t.Fatal(err)
	}
	quiet := slog.New(slog.DiscardHandler)
	cfg := ojs.Config{AckWait: time.Second, Logger: quiet}
	slow := &holdingExpirer{got: make(chan string, 4), hold: 3500 * time.Millisecond}
	_, jsA := connect(t, srv)
	a, err := ojs.NewConsumer(ctx, jsA, slow, cfg)
	if err != nil {
		t.Fatal(err)
	}
	a.Start(ctx)
	defer stopWithin(t, a, 10*time.Second)
	publishFired(t, js, "slow-1")
	receive(t, slow.got)
	// Another instance pulls meanwhile: a redelivery would reach it.
	other := &flakyExpirer{calls: map[string]int{"slow-1": 1}, applied: map[string][]int64{}}
	_, jsB := connect(t, srv)
	b, err := ojs.NewConsumer(ctx, jsB, other, cfg)
	if err != nil {
		t.Fatal(err)
	}
	b.Start(ctx)
	defer stopWithin(t, b, 10*time.Second)
	cons, err := js.Consumer(ctx, events.StreamExpiries, ojs.DurableDefault)
	if err != nil {
		t.Fatal(err)
	}
	poll(t, func() bool {
		info, err := cons.Info(ctx)
		return err == nil && info.NumAckPending == 0 && info.NumPending == 0
	})
	calls, _ := other.snapshot()
	if len(slow.got) != 0 || calls["slow-1"] != 1 {
		t.Fatalf("the slow event was redelivered: %d more times to its instance, %d to the other; want none",
			len(slow.got), calls["slow-1"]-1)
	}
}

// TestConfigIsValidated: a setting out of range is refused with an error
// naming it.
func TestConfigIsValidated(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		cfg  ojs.Config
		want string
	}{
		{"AckWait below a second", ojs.Config{AckWait: 500 * time.Millisecond}, "AckWait"},
		{"negative ApplyTimeout", ojs.Config{ApplyTimeout: -time.Second}, "ApplyTimeout"},
		{"negative RetryDelay", ojs.Config{RetryDelay: -time.Second}, "RetryDelay"},
		{"MaxAckPending below a round of batches", ojs.Config{MaxAckPending: 10}, "MaxAckPending"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := ojs.NewConsumer(t.Context(), nil, nil, tt.cfg)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want one naming %s", err, tt.want)
			}
		})
	}
}
