package main

import (
	"context"
	"encoding/json"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ordertimeout/ordertimeout/internal/streams"
	"github.com/ordertimeout/ordertimeout/internal/testinfra"
	"github.com/ordertimeout/ordertimeout/pkg/events"
)

func TestMain(m *testing.M) { testinfra.Main(m) }

// TestConsumerAppliesEachCancellationOnce publishes cancelled events, a
// duplicate beyond JetStream's dedupe (another Nats-Msg-Id) and a malformed
// one, and checks each order is handled once and the bad one dead-lettered.
func TestConsumerAppliesEachCancellationOnce(t *testing.T) {
	t.Parallel()
	ns := testinfra.NATS(t)
	nc, err := nats.Connect(ns.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := streams.Ensure(ctx, js, streams.Config{}); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	applied := map[string]int{}
	once := &applyOnce{apply: func(_ context.Context, e events.OrderEvent) error {
		mu.Lock()
		defer mu.Unlock()
		applied[e.OrderID]++
		return nil
	}}
	c, err := newConsumer(ctx, js, "inventory", once, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()

	at := time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)
	publish := func(subject string, data []byte, msgID string) {
		t.Helper()
		m := &nats.Msg{Subject: subject, Data: data, Header: nats.Header{}}
		m.Header.Set(jetstream.MsgIDHeader, msgID)
		if _, err := js.PublishMsg(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range []string{"o-1", "o-2"} {
		e := events.OrderEvent{Schema: 1, Type: events.OrderCancelled, OrderID: id, Version: 2, Status: events.StatusCancelled,
			CancelReason: events.CancelPaymentTimeout, PayBy: at, At: at}
		data, _ := json.Marshal(e)
		publish(e.Subject(), data, e.MsgID())
		if id == "o-1" {
			publish(e.Subject(), data, "redelivery-of-"+e.MsgID())
		}
	}
	publish("orders.cancelled.o-3", []byte(`{"type":"cancelled"`), "bad")

	dlq, err := js.Stream(ctx, events.StreamDeadLetters)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := js.Consumer(ctx, events.StreamOrderEvents, "inventory")
		if err != nil {
			t.Fatal(err)
		}
		info, err := c.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		_, dlErr := dlq.GetLastMsgForSubject(ctx, events.DeadLetterSubject("inventory", events.ReasonMalformed))
		if info.AckFloor.Stream == 4 && info.NumAckPending == 0 && dlErr == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not drained: ack floor %d, pending %d, dead letter %v", info.AckFloor.Stream, info.NumAckPending, dlErr)
		}
		time.Sleep(20 * time.Millisecond)
	}
	mu.Lock()
	if applied["o-1"] != 1 || applied["o-2"] != 1 || len(applied) != 2 {
		t.Errorf("applied = %v, want o-1 and o-2 once each", applied)
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
