// Command consumer is an example to copy: a service that reacts to cancelled
// orders (say, to release reserved stock) by consuming orders.cancelled.>
// from the ORDER_EVENTS stream with pkg/timeouts' Consumer.
//
// What the Consumer gives it: a durable JetStream consumer with explicit
// acks (an event is acked only after it was handled, so a crash
// redelivers it); strict decoding with events.DecodeOrderEvent, a message
// that does not decode dead-lettered on dlq.<name>.<reason> and
// terminated, never retried forever and never silently dropped.
//
// What it must do itself: apply each event idempotently. JetStream drops
// republished duplicates only within its duplicate window, so the same
// (order id, version) can arrive twice. Here the applied pairs live in
// memory; in a real service record them in your database in the same
// transaction as the effect (INSERT … ON CONFLICT DO NOTHING, and skip the
// effect when no row was inserted), or make the effect conditional on the
// version (examples/reservations).
//
// Run it with NATS_URL (default nats://127.0.0.1:4222), CONSUMER_NAME
// (default "inventory") and NATS_INBOX_PREFIX (default _INBOX_observer, the
// only inbox the compose stack's observer user may subscribe to: JetStream
// replies and deliveries come there): go run ./examples/consumer
package main

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"sync"
	"syscall"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ordertimeout/ordertimeout/pkg/events"
	"github.com/ordertimeout/ordertimeout/pkg/timeouts"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "consumer:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context) error {
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	nc, err := nats.Connect(cmp.Or(os.Getenv("NATS_URL"), nats.DefaultURL), nats.MaxReconnects(-1),
		nats.CustomInboxPrefix(cmp.Or(os.Getenv("NATS_INBOX_PREFIX"), "_INBOX_observer")))
	if err != nil {
		return fmt.Errorf("connect nats: %w", err)
	}
	defer nc.Drain()
	js, err := jetstream.New(nc)
	if err != nil {
		return fmt.Errorf("jetstream: %w", err)
	}
	once := &applyOnce{apply: func(_ context.Context, e events.OrderEvent) error {
		// Your effect goes here, e.g. release the stock of e.OrderID.
		log.Info("order cancelled", "order_id", e.OrderID, "version", e.Version, "reason", e.CancelReason)
		return nil
	}}
	c, err := newConsumer(ctx, js, cmp.Or(os.Getenv("CONSUMER_NAME"), "inventory"), once, log)
	if err != nil {
		return err
	}
	return c.Run(ctx)
}

// newConsumer returns the durable consumer name of orders.cancelled.>
// handing each event to once.
func newConsumer(ctx context.Context, js jetstream.JetStream, name string, once *applyOnce, log *slog.Logger) (*timeouts.Consumer[events.OrderEvent], error) {
	return timeouts.NewConsumer(ctx, js, timeouts.ConsumerConfig[events.OrderEvent]{
		Stream:        events.StreamOrderEvents,
		Durable:       name,
		FilterSubject: events.OrderEventSubjects(events.OrderCancelled),
		Decode:        decodeCancelled,
		Handle:        once.handle,
		Logger:        log,
	})
}

// decodeCancelled decodes a cancelled order event strictly.
func decodeCancelled(_ string, data []byte) (events.OrderEvent, error) {
	e, err := events.DecodeOrderEvent(data)
	if err == nil && e.Type != events.OrderCancelled {
		err = &events.Error{Reason: events.ReasonUnknownKind, Field: "type", Detail: "expected a cancelled event"}
	}
	return e, err
}

// applyOnce applies each (order, version) once per process; use a table in
// production (see the package comment).
type applyOnce struct {
	apply func(ctx context.Context, e events.OrderEvent) error

	mu   sync.Mutex
	done map[string]bool
}

func (a *applyOnce) handle(ctx context.Context, e events.OrderEvent) error {
	key := e.OrderID + ":" + strconv.FormatInt(e.Version, 10)
	a.mu.Lock()
	seen := a.done[key]
	a.mu.Unlock()
	if seen {
		return nil
	}
	if err := a.apply(ctx, e); err != nil {
		return err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.done == nil {
		a.done = map[string]bool{}
	}
	a.done[key] = true
	return nil
}
