package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ordertimeout/ordertimeout/pkg/events"
)

// arrival is a message the outside consumer received, with the wall time it
// arrived.
type arrival[T any] struct {
	Msg T
	At  time.Time
}

// consumer is the suite's outside consumer, written against pkg/events only,
// as an inventory or notification service would be. From the start of their
// streams, it reads the cancel events (expiries on orders.cancel.>), the
// orders.cancelled.> events and the dead letters, with their arrival times.
type consumer struct {
	mu        sync.Mutex
	expiries  map[string][]arrival[events.Expiry]
	cancelled map[string][]arrival[events.OrderEvent]
	dead      []events.DeadLetter
	errs      []error
}

// watch starts a consumer on the NATS server at url, stopped when t ends;
// a message it cannot decode fails t then.
func watch(t *testing.T, url string) *consumer {
	t.Helper()
	c := &consumer{expiries: map[string][]arrival[events.Expiry]{}, cancelled: map[string][]arrival[events.OrderEvent]{}}
	nc, err := nats.Connect(url, nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond), nats.Name("e2e-consumer"))
	if err != nil {
		t.Fatalf("connect nats: %v", err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatalf("jetstream: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	subs := []struct {
		stream, filter string
		handle         func(jetstream.Msg, time.Time) error
	}{
		{events.StreamExpiries, events.OrderCancelSubjectPrefix + ">", c.onExpiry},
		{events.StreamOrderEvents, events.OrderEventSubject(events.OrderCancelled, ">"), c.onOrderEvent},
		{events.StreamDeadLetters, events.DeadLetterSubjectPrefix + ">", c.onDeadLetter},
	}
	for _, sub := range subs {
		oc, err := js.OrderedConsumer(ctx, sub.stream, jetstream.OrderedConsumerConfig{
			FilterSubjects: []string{sub.filter},
			DeliverPolicy:  jetstream.DeliverAllPolicy,
		})
		if err != nil {
			t.Fatalf("consumer on %s: %v", sub.stream, err)
		}
		cc, err := oc.Consume(func(m jetstream.Msg) {
			if err := sub.handle(m, time.Now()); err != nil {
				c.mu.Lock()
				c.errs = append(c.errs, fmt.Errorf("%s: %w", m.Subject(), err))
				c.mu.Unlock()
			}
		})
		if err != nil {
			t.Fatalf("consume %s: %v", sub.stream, err)
		}
		t.Cleanup(cc.Stop)
	}
	t.Cleanup(func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		for _, err := range c.errs {
			t.Errorf("outside consumer could not decode a message: %v", err)
		}
	})
	return c
}

func (c *consumer) onExpiry(m jetstream.Msg, at time.Time) error {
	e, err := events.DecodeExpiry(m.Data())
	if err != nil {
		return err
	}
	if m.Subject() != events.OrderCancelSubject(e.Key) {
		return fmt.Errorf("expiry of key %s on subject %s", e.Key, m.Subject())
	}
	if id := m.Headers().Get(jetstream.MsgIDHeader); id != e.MsgID() {
		return fmt.Errorf("Nats-Msg-Id %q, want %q", id, e.MsgID())
	}
	c.mu.Lock()
	c.expiries[e.Key] = append(c.expiries[e.Key], arrival[events.Expiry]{e, at})
	c.mu.Unlock()
	return nil
}

func (c *consumer) onOrderEvent(m jetstream.Msg, at time.Time) error {
	e, err := events.DecodeOrderEvent(m.Data())
	if err != nil {
		return err
	}
	if id := m.Headers().Get(jetstream.MsgIDHeader); id != e.MsgID() {
		return fmt.Errorf("Nats-Msg-Id %q, want %q", id, e.MsgID())
	}
	c.mu.Lock()
	c.cancelled[e.OrderID] = append(c.cancelled[e.OrderID], arrival[events.OrderEvent]{e, at})
	c.mu.Unlock()
	return nil
}

func (c *consumer) onDeadLetter(m jetstream.Msg, _ time.Time) error {
	var d events.DeadLetter
	if err := json.Unmarshal(m.Data(), &d); err != nil {
		return fmt.Errorf("dead letter: %w", err)
	}
	if m.Headers().Get(jetstream.MsgIDHeader) == "" {
		return fmt.Errorf("dead letter without Nats-Msg-Id")
	}
	c.mu.Lock()
	c.dead = append(c.dead, d)
	c.mu.Unlock()
	return nil
}

// expiriesOf returns the cancel events of an order received so far.
func (c *consumer) expiriesOf(id string) []arrival[events.Expiry] {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]arrival[events.Expiry](nil), c.expiries[id]...)
}

// cancelledOf returns the orders.cancelled events of an order received so far.
func (c *consumer) cancelledOf(id string) []arrival[events.OrderEvent] {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]arrival[events.OrderEvent](nil), c.cancelled[id]...)
}

// deadLetterOf returns the dead letter of the message published on subject.
func (c *consumer) deadLetterOf(subject string) (events.DeadLetter, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, d := range c.dead {
		if d.Subject == subject {
			return d, true
		}
	}
	return events.DeadLetter{}, false
}
