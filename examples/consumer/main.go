// Command consumer is an example to copy: a service that reacts to cancelled
// orders (say, to release reserved stock) by consuming orders.cancelled.>
// from the ORDER_EVENTS stream with a durable JetStream consumer.
//
// What to keep when you copy it:
//   - A durable consumer with explicit acks: a message is acked only after
//     it was handled, so a crash redelivers it.
//   - Idempotent handling keyed by order id and version (the same pair as the
//     Nats-Msg-Id, order.cancelled:<id>:<version>): JetStream drops republished
//     duplicates only within its duplicate window, so a consumer must absorb
//     redeliveries itself. Here the keys live in memory; in a real service
//     record them in your database in the same transaction as the effect
//     (INSERT … ON CONFLICT DO NOTHING, and skip the effect when no row was
//     inserted).
//   - Strict decoding with events.DecodeOrderEvent: a message that does not
//     decode is dead-lettered (events.NewDeadLetter on dlq.<service>.<reason>)
//     and terminated, never retried forever and never silently dropped.
//
// Run it with NATS_URL (default nats://127.0.0.1:4222), CONSUMER_NAME
// (default "inventory") and NATS_INBOX_PREFIX (default _INBOX_observer, the
// only inbox the compose stack's observer user may subscribe to: JetStream
// replies and deliveries come there): go run ./examples/consumer
package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ordertimeout/ordertimeout/pkg/events"
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
	h := &Handler{Name: cmp.Or(os.Getenv("CONSUMER_NAME"), "inventory"), JS: js, Log: log,
		Apply: func(ctx context.Context, e events.OrderEvent) error {
			// Your effect goes here, e.g. release the stock of e.OrderID.
			log.Info("order cancelled", "order_id", e.OrderID, "version", e.Version, "reason", e.CancelReason)
			return nil
		}}
	return h.Run(ctx)
}

// Handler consumes cancelled-order events and applies each (order, version)
// once.
type Handler struct {
	// Name is the durable consumer name and the dead-letter service token.
	Name string
	// JS is the JetStream context; the ORDER_EVENTS stream must exist.
	JS jetstream.JetStream
	// Apply performs the effect; an error makes the event redelivered.
	Apply func(ctx context.Context, e events.OrderEvent) error
	// Log receives one line per rejected or failed event.
	Log *slog.Logger

	mu   sync.Mutex
	done map[string]bool // keys of applied events; use a table in production
}

// Run consumes until ctx ends, then returns nil.
func (h *Handler) Run(ctx context.Context) error {
	cons, err := h.JS.CreateOrUpdateConsumer(ctx, events.StreamOrderEvents, jetstream.ConsumerConfig{
		Durable:       h.Name,
		FilterSubject: events.OrderEventSubjects(events.OrderCancelled),
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       30 * time.Second,
		MaxDeliver:    -1,
	})
	if err != nil {
		return fmt.Errorf("create consumer %s: %w", h.Name, err)
	}
	cc, err := cons.Consume(func(m jetstream.Msg) { h.handle(ctx, m) })
	if err != nil {
		return fmt.Errorf("consume: %w", err)
	}
	<-ctx.Done()
	cc.Drain() // finish the message in flight
	<-cc.Closed()
	return nil
}

func (h *Handler) handle(ctx context.Context, m jetstream.Msg) {
	e, err := events.DecodeOrderEvent(m.Data())
	if err == nil && e.Type != events.OrderCancelled {
		err = &events.Error{Reason: events.ReasonUnknownKind, Field: "type", Detail: "expected a cancelled event"}
	}
	if err != nil {
		h.deadLetter(ctx, m, err)
		return
	}
	key := e.OrderID + ":" + strconv.FormatInt(e.Version, 10)
	h.mu.Lock()
	if h.done == nil {
		h.done = map[string]bool{}
	}
	seen := h.done[key]
	h.mu.Unlock()
	if !seen {
		if err := h.Apply(ctx, e); err != nil {
			h.Log.Error("apply cancelled order; will retry", "order_id", e.OrderID, "err", err)
			_ = m.NakWithDelay(time.Second)
			return
		}
		h.mu.Lock()
		h.done[key] = true
		h.mu.Unlock()
	}
	if err := m.Ack(); err != nil {
		h.Log.Warn("ack", "order_id", e.OrderID, "err", err) // redelivered, then skipped as seen
	}
}

// deadLetter publishes the rejected message with its reason, then
// terminates it; if publishing fails the message is redelivered later.
func (h *Handler) deadLetter(ctx context.Context, m jetstream.Msg, reason error) {
	var seq uint64
	if md, err := m.Metadata(); err == nil {
		seq = md.Sequence.Stream
	}
	dl := events.NewDeadLetter(m.Subject(), m.Data(), seq, reason, time.Now())
	data, err := json.Marshal(dl)
	if err == nil {
		msg := &nats.Msg{Subject: events.DeadLetterSubject(h.Name, dl.Reason), Data: data, Header: nats.Header{}}
		msg.Header.Set(jetstream.MsgIDHeader, dl.MsgID())
		_, err = h.JS.PublishMsg(ctx, msg)
	}
	if err != nil {
		h.Log.Error("dead-letter", "subject", m.Subject(), "err", errors.Join(reason, err))
		_ = m.NakWithDelay(time.Second)
		return
	}
	h.Log.Warn("event rejected", "subject", m.Subject(), "reason", dl.Reason, "detail", dl.Detail)
	_ = m.Term()
}
