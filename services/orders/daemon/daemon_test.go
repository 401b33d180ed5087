package daemon_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
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
	"github.com/ordertimeout/ordertimeout/services/orders/daemon"
)

func TestMain(m *testing.M) { testinfra.Main(m) }

const token = "it-token"

// run runs the daemon of environ as cmd/orders does, until ctx ends.
func run(ctx context.Context, environ map[string]string) error {
	cfg, err := daemon.FromEnv(environ)
	if err != nil {
		return err
	}
	cfg.Logger = slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: cfg.LogLevel}))
	m, err := daemon.New(ctx, cfg)
	if err != nil {
		return err
	}
	return m.Run(ctx)
}

// app is the orders daemon running in-process against real Postgres and
// NATS, with a test client of both.
type app struct {
	base string
	js   jetstream.JetStream
}

// start runs the daemon on a new database; each of opts may change its
// environment first.
func start(t *testing.T, opts ...func(env map[string]string)) *app {
	t.Helper()
	ns := testinfra.NATS(t)
	env := map[string]string{
		"ORDERS_DATABASE_URL": testinfra.Postgres(t),
		"ORDERS_NATS_URL":     ns.URL,
		"ORDERS_HTTP_ADDR":    freeAddr(t),
		"ORDERS_API_TOKENS":   "other," + token,
		"ORDERS_LOG_LEVEL":    "error",
	}
	for _, opt := range opts {
		opt(env)
	}
	nc, err := nats.Connect(ns.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	a := &app{base: "http://" + env["ORDERS_HTTP_ADDR"]}
	if a.js, err = jetstream.New(nc); err != nil {
		t.Fatal(err)
	}
	// The bootstrap step, which orders no longer does itself.
	if err := streams.Ensure(t.Context(), a.js, streams.Config{}); err != nil {
		t.Fatalf("streams bootstrap: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx, env) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("run after shutdown: %v", err)
			}
		case <-time.After(20 * time.Second):
			t.Error("run did not return after shutdown")
		}
	})
	waitFor(t, "readyz", func() (bool, error) {
		select {
		case err := <-done:
			return false, fmt.Errorf("run returned early: %v", err)
		default:
		}
		resp, err := http.Get(a.base + "/readyz")
		if err != nil {
			return false, nil
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
	return a
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// waitFor polls cond every 20ms for up to 15s.
func waitFor(t *testing.T, what string, cond func() (bool, error)) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		ok, err := cond()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (a *app) call(t *testing.T, method, path, body string, hdr ...string) (int, http.Header, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, a.base+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, b
}

func (a *app) order(t *testing.T, method, path, body string, want int) orders.Order {
	t.Helper()
	code, _, b := a.call(t, method, path, body)
	if code != want {
		t.Fatalf("%s %s = %d %s, want %d", method, path, code, b, want)
	}
	var o orders.Order
	if err := json.Unmarshal(b, &o); err != nil {
		t.Fatal(err)
	}
	return o
}

const createBody = `{"customer_id":"c-1","currency":"EUR","items":[{"sku":"A-1","quantity":2,"unit_price_minor":1250}],"pay_within":"15m"}`

// lastMsg waits until the last message on subject in stream has msgID as its
// Nats-Msg-Id ("" = any) and returns it.
func (a *app) lastMsg(t *testing.T, stream, subject, msgID string) *jetstream.RawStreamMsg {
	t.Helper()
	s, err := a.js.Stream(context.Background(), stream)
	if err != nil {
		t.Fatal(err)
	}
	var m *jetstream.RawStreamMsg
	waitFor(t, msgID+" on "+subject, func() (bool, error) {
		m, err = s.GetLastMsgForSubject(context.Background(), subject)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return false, nil
		}
		return err == nil && (msgID == "" || sameID(m.Header.Get(jetstream.MsgIDHeader), msgID)), err
	})
	return m
}

// sameID reports whether id is want, or a command's id want followed by
// its nonce.
func sameID(id, want string) bool {
	return id == want || strings.HasPrefix(id, want+":") && events.CheckMsgID(id) == nil
}

// count returns how many messages stream holds on subject.
func (a *app) count(t testing.TB, stream, subject string) uint64 {
	t.Helper()
	return testinfra.Count(t, a.js, stream, subject)
}

func TestCommandsAndEventsArePublished(t *testing.T) {
	t.Parallel()
	a := start(t)
	o := a.order(t, "POST", "/v1/orders", createBody, http.StatusCreated)

	// Published on timeouts.cmd.<id>, filed by the server's mapping under
	// the id's partition, in its partition's stream.
	m := a.lastMsg(t, events.CommandStream(events.PartitionOf(o.ID)), events.PartitionedCommandSubject(o.ID), "set:"+o.ID+":1")
	cmd, err := events.DecodeCommand(m.Data)
	if err != nil {
		t.Fatal(err)
	}
	if cmd.Kind != events.KindSet || cmd.Version != 1 || !cmd.Deadline.Equal(o.PayBy) || cmd.FireSubject != events.OrderCancelSubject(o.ID) {
		t.Fatalf("set command = %+v for order %+v", cmd, o)
	}
	a.lastMsg(t, events.StreamOrderEvents, "orders.created."+o.ID, "order.created:"+o.ID+":1")

	ext := a.order(t, "POST", "/v1/orders/"+o.ID+"/extend", `{"pay_within":"1h"}`, http.StatusOK)
	m = a.lastMsg(t, events.CommandStream(events.PartitionOf(o.ID)), events.PartitionedCommandSubject(o.ID), "set:"+o.ID+":2")
	if cmd, err = events.DecodeCommand(m.Data); err != nil || !cmd.Deadline.Equal(ext.PayBy) {
		t.Fatalf("extend command = %+v (%v), want deadline %v", cmd, err, ext.PayBy)
	}

	a.order(t, "POST", "/v1/orders/"+o.ID+"/pay", "", http.StatusOK)
	m = a.lastMsg(t, events.CommandStream(events.PartitionOf(o.ID)), events.PartitionedCommandSubject(o.ID), "clear:"+o.ID+":3")
	if cmd, err = events.DecodeCommand(m.Data); err != nil || cmd.Kind != events.KindClear || cmd.Version != 3 {
		t.Fatalf("clear command = %+v (%v)", cmd, err)
	}
	m = a.lastMsg(t, events.StreamOrderEvents, "orders.paid."+o.ID, "order.paid:"+o.ID+":3")
	if ev, err := events.DecodeOrderEvent(m.Data); err != nil || ev.Status != events.StatusPaid || ev.AmountMinor != 2500 {
		t.Fatalf("paid event = %+v (%v)", ev, err)
	}

	// Idempotent retries through the real store.
	code1, _, b1 := a.call(t, "POST", "/v1/orders", createBody, "Idempotency-Key", "idem-1")
	code2, h2, b2 := a.call(t, "POST", "/v1/orders", createBody, "Idempotency-Key", "idem-1")
	code3, _, b3 := a.call(t, "POST", "/v1/orders", strings.Replace(createBody, "c-1", "c-2", 1), "Idempotency-Key", "idem-1")
	if code1 != 201 || code2 != 201 || !bytes.Equal(b1, b2) || h2.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("retry: %d %s / %d %s", code1, b1, code2, b2)
	}
	if code3 != http.StatusUnprocessableEntity || !strings.Contains(string(b3), `"status":422`) {
		t.Fatalf("different body under the same key: %d %s", code3, b3)
	}
	var first orders.Order
	_ = json.Unmarshal(b1, &first)
	if n := a.count(t, events.StreamOrderEvents, "orders.created."+first.ID); n != 1 {
		waitFor(t, "one created event of the idempotent order", func() (bool, error) {
			return a.count(t, events.StreamOrderEvents, "orders.created."+first.ID) == 1, nil
		})
	}

	// Text Postgres cannot store is a 400 naming the field, never a 500.
	for _, path := range []string{"/v1/orders?customer_id=a%00b", "/v1/orders?customer_id=%FF"} {
		if code, _, b := a.call(t, "GET", path, ""); code != http.StatusBadRequest || !strings.Contains(string(b), `"field":"customer_id"`) {
			t.Errorf("GET %s = %d %s, want 400 naming customer_id", path, code, b)
		}
	}
	if code, _, b := a.call(t, "POST", "/v1/orders", strings.Replace(createBody, "c-1", `c\u0000`, 1)); code != http.StatusBadRequest {
		t.Errorf("create with NUL = %d %s, want 400", code, b)
	}

	code, _, b := a.call(t, "GET", "/metrics", "")
	for _, want := range []string{`orders_by_status{status="paid"} 1`, `orders_outbox_rows`, `route="/v1/orders/{id}/pay"`} {
		if code != 200 || !strings.Contains(string(b), want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}

// publishExpiry publishes a cancel event as timeoutd does; msgID lets a test
// bypass JetStream's duplicate window to deliver a true duplicate.
func (a *app) publishExpiry(t *testing.T, subject string, e events.Expiry, msgID string) {
	t.Helper()
	data, err := json.Marshal(e)
	if err != nil {
		t.Fatal(err)
	}
	a.publishRaw(t, subject, data, msgID)
}

func (a *app) publishRaw(t *testing.T, subject string, data []byte, msgID string) {
	t.Helper()
	msg := &nats.Msg{Subject: subject, Data: data, Header: nats.Header{}}
	msg.Header.Set(jetstream.MsgIDHeader, msgID)
	if _, err := a.js.PublishMsg(context.Background(), msg); err != nil {
		t.Fatal(err)
	}
}

func expiry(o orders.Order, version int64) events.Expiry {
	return events.Expiry{Schema: events.SchemaVersion, Outcome: events.OutcomeFired, Key: o.ID, Version: version,
		Deadline: o.PayBy, FiredAt: o.PayBy.Add(time.Millisecond), LatenessNs: 1e6}
}

// drained waits until the orders consumer has acked or terminated every
// message of TIMEOUT_EXPIRIES.
func (a *app) drained(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	waitFor(t, "the cancel consumer to drain", func() (bool, error) {
		s, err := a.js.Stream(ctx, events.StreamExpiries)
		if err != nil {
			return false, err
		}
		si, err := s.Info(ctx)
		if err != nil {
			return false, err
		}
		c, err := a.js.Consumer(ctx, events.StreamExpiries, "orders-cancel")
		if err != nil {
			return false, err
		}
		ci, err := c.Info(ctx)
		if err != nil {
			return false, err
		}
		return ci.AckFloor.Stream == si.State.LastSeq && ci.NumAckPending == 0 && ci.NumPending == 0, nil
	})
}

func TestCancelEvents(t *testing.T) {
	t.Parallel()
	a := start(t)
	// Due in a second: its cancel event, published at once, arrives before
	// pay_by and is redelivered at pay_by (never early), then applied.
	short := strings.Replace(createBody, "15m", "1s", 1)
	o := a.order(t, "POST", "/v1/orders", short, http.StatusCreated)
	moved := a.order(t, "POST", "/v1/orders", createBody, http.StatusCreated)
	forged := a.order(t, "POST", "/v1/orders", createBody, http.StatusCreated)
	moved = a.order(t, "POST", "/v1/orders/"+moved.ID+"/extend", `{"pay_within":"2h"}`, http.StatusOK)

	subject := events.OrderCancelSubject(o.ID)
	a.publishExpiry(t, subject, expiry(o, 1), "fired:"+o.ID+":1")
	waitFor(t, "the order to be cancelled", func() (bool, error) {
		return a.order(t, "GET", "/v1/orders/"+o.ID, "", http.StatusOK).Status == orders.StatusCancelled, nil
	})
	if got := a.order(t, "GET", "/v1/orders/"+o.ID, "", http.StatusOK); got.UpdatedAt.Before(o.PayBy) {
		t.Fatalf("cancelled at %v, before pay_by %v", got.UpdatedAt, o.PayBy)
	}
	m := a.lastMsg(t, events.StreamOrderEvents, "orders.cancelled."+o.ID, "order.cancelled:"+o.ID+":2")
	ev, err := events.DecodeOrderEvent(m.Data)
	if err != nil || ev.CancelReason != events.CancelPaymentTimeout || ev.Version != 2 {
		t.Fatalf("cancelled event = %+v (%v)", ev, err)
	}

	// A duplicate beyond the dedupe window, a stale version and events for
	// an unknown order are acked no-ops; malformed events are dead-lettered.
	a.publishExpiry(t, subject, expiry(o, 1), "redelivered-1")
	a.publishExpiry(t, events.OrderCancelSubject(moved.ID), expiry(moved, 1), "fired:"+moved.ID+":1")
	a.publishExpiry(t, events.OrderCancelSubject("nobody"), expiry(orders.Order{ID: "nobody", PayBy: o.PayBy}, 1), "fired:nobody:1")
	a.publishRaw(t, subject, []byte(`{"outcome":"fired",`), "bad-1")
	a.publishExpiry(t, subject, expiry(moved, 2), "mismatch-1")
	lying := expiry(forged, 1)
	lying.Deadline, lying.FiredAt = time.Now().Add(-time.Second), time.Now()
	a.publishExpiry(t, events.OrderCancelSubject(forged.ID), lying, "forged-1")
	a.drained(t)
	if got := a.order(t, "GET", "/v1/orders/"+forged.ID, "", http.StatusOK); got.Status != orders.StatusPendingPayment || got.Version != 1 {
		t.Fatalf("a cancel event lying about the deadline changed the order: %+v", got)
	}

	if got := a.order(t, "GET", "/v1/orders/"+o.ID, "", http.StatusOK); got.Version != 2 || got.CancelReason != orders.CancelPaymentTimeout {
		t.Fatalf("order after the duplicate: %+v", got)
	}
	if got := a.order(t, "GET", "/v1/orders/"+moved.ID, "", http.StatusOK); got.Status != orders.StatusPendingPayment || got.Version != 2 {
		t.Fatalf("extended order after a stale event: %+v", got)
	}
	if n := a.count(t, events.StreamOrderEvents, "orders.cancelled."+o.ID); n != 1 {
		t.Fatalf("%d cancelled events, want exactly 1", n)
	}
	if n := a.count(t, events.StreamOrderEvents, "orders.cancelled."+moved.ID); n != 0 {
		t.Fatalf("the stale event cancelled the extended order (%d events)", n)
	}
	for _, tc := range []struct {
		reason  events.Reason
		field   string
		subject string
	}{{events.ReasonMalformed, "", subject}, {events.ReasonSubjectMismatch, "key", subject}, {events.ReasonInvalidDeadline, "deadline", events.OrderCancelSubject(forged.ID)}} {
		m := a.lastMsg(t, events.StreamDeadLetters, events.DeadLetterSubject("orders", tc.reason), "")
		if !strings.HasPrefix(m.Header.Get(jetstream.MsgIDHeader), "dlq:"+tc.subject+":") {
			t.Fatalf("dead letter %s without Nats-Msg-Id", tc.reason)
		}
		var dl events.DeadLetter
		if err := json.Unmarshal(m.Data, &dl); err != nil || dl.Reason != tc.reason || dl.Field != tc.field || dl.Subject != tc.subject {
			t.Fatalf("dead letter = %+v (%v), want reason %s field %q", dl, err, tc.reason, tc.field)
		}
	}

}

// TestPayRacesTheCancelAtPayBy races, through the binary, payments sent
// around pay_by against the order's cancel event: the event is published at
// once, so the consumer redelivers it at pay_by (plus its 50 ms margin), and
// each payment is sent at pay_by plus an offset from -100 ms to +150 ms, so
// some land before the deadline, some between the deadline and the cancel,
// and some after the cancel. Each order has one outcome: a 200 means paid
// with one paid event and no cancellation; a 409 means cancelled with one
// cancelled event. A payment sent after pay_by is never accepted (the
// deadline is the rule, whether or not the cancel has arrived).
func TestPayRacesTheCancelAtPayBy(t *testing.T) {
	t.Parallel()
	a := start(t)
	body := strings.Replace(createBody, "15m", "2s", 1)
	offsets := []time.Duration{-100, -60, -20, 20, 60, 100, 150}
	type race struct {
		o      orders.Order
		sentAt time.Time
		code   int
		body   []byte
	}
	races := make([]race, len(offsets))
	for i := range races {
		races[i].o = a.order(t, "POST", "/v1/orders", body, http.StatusCreated)
		a.publishExpiry(t, events.OrderCancelSubject(races[i].o.ID), expiry(races[i].o, 1), "fired:"+races[i].o.ID+":1")
	}
	var wg sync.WaitGroup
	for i := range races {
		wg.Go(func() {
			r := &races[i]
			<-time.After(time.Until(r.o.PayBy.Add(offsets[i] * time.Millisecond)))
			r.sentAt = time.Now()
			r.code, _, r.body = a.call(t, "POST", "/v1/orders/"+r.o.ID+"/pay", "")
		})
	}
	wg.Wait()
	a.drained(t)
	outcomes := map[string]int{}
	for i, r := range races {
		var final orders.Order
		var paid, cancelled uint64
		waitFor(t, "the race's outcome and its event", func() (bool, error) {
			final = a.order(t, "GET", "/v1/orders/"+r.o.ID, "", http.StatusOK)
			paid, cancelled = a.count(t, events.StreamOrderEvents, "orders.paid."+r.o.ID), a.count(t, events.StreamOrderEvents, "orders.cancelled."+r.o.ID)
			return final.Status != orders.StatusPendingPayment && paid+cancelled > 0, nil
		})
		switch {
		case r.code == http.StatusOK && r.sentAt.After(r.o.PayBy):
			t.Errorf("offset %s: a payment sent %s after pay_by was accepted", offsets[i]*time.Millisecond, r.sentAt.Sub(r.o.PayBy))
		case r.code == http.StatusOK:
			outcomes["paid"]++
			if final.Status != orders.StatusPaid || final.Version != 2 || paid != 1 || cancelled != 0 {
				t.Errorf("offset %s: pay answered 200 but the order is %+v with %d paid and %d cancelled events", offsets[i]*time.Millisecond, final, paid, cancelled)
			}
		case r.code == http.StatusConflict:
			switch {
			case strings.Contains(string(r.body), `"type":"/problems/payment_deadline_passed"`):
				outcomes["refused: deadline passed"]++
			case strings.Contains(string(r.body), `"order_status":"cancelled"`):
				outcomes["refused: already cancelled"]++
			default:
				t.Errorf("offset %s: 409 %s", offsets[i]*time.Millisecond, r.body)
			}
			if final.Status != orders.StatusCancelled || final.CancelReason != orders.CancelPaymentTimeout || final.Version != 2 || paid != 0 || cancelled != 1 {
				t.Errorf("offset %s: pay answered 409 but the order is %+v with %d paid and %d cancelled events", offsets[i]*time.Millisecond, final, paid, cancelled)
			}
		default:
			t.Errorf("offset %s: pay answered %d %s", offsets[i]*time.Millisecond, r.code, r.body)
		}
	}
	t.Logf("outcomes of %d payments around pay_by: %v", len(races), outcomes)

}
