package jetstream

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ordertimeout/ordertimeout/internal/tracing"
	"github.com/ordertimeout/ordertimeout/pkg/events"
	"github.com/ordertimeout/ordertimeout/services/timeoutd"
)

// AckTimeoutDefault bounds the wait for a batch's PubAcks.
const AckTimeoutDefault = 5 * time.Second

// Publisher publishes expiry events asynchronously and waits for their
// PubAcks. It implements timeoutd.Publisher.
type Publisher struct {
	js         jetstream.JetStream
	ackTimeout time.Duration
}

var _ timeoutd.Publisher = Publisher{}

// NewPublisher returns a Publisher through js whose batches wait at most
// ackTimeout for their PubAcks (0: AckTimeoutDefault). js's
// PublishAsyncMaxPending must hold the batches in flight (FireBatch times
// FireConcurrency), or publishing stalls.
func NewPublisher(js jetstream.JetStream, ackTimeout time.Duration) Publisher {
	return Publisher{js: js, ackTimeout: cmp.Or(ackTimeout, AckTimeoutDefault)}
}

// Publish implements timeoutd.Publisher. The wait for the PubAcks is
// bounded from the first send, not from the wait, so that when a
// connection drops the batches in flight time out together.
func (p Publisher) Publish(ctx context.Context, events []timeoutd.Event) (time.Time, error) {
	ctx, cancel := context.WithTimeout(ctx, p.ackTimeout)
	defer cancel()
	futures := make([]jetstream.PubAckFuture, len(events))
	for i, e := range events {
		m := &nats.Msg{Subject: e.Subject, Data: e.Data, Header: nats.Header{}}
		m.Header.Set(jetstream.MsgIDHeader, e.MsgID)
		if e.TraceParent != "" {
			m.Header.Set(tracing.HeaderTraceParent, e.TraceParent)
		}
		f, err := p.js.PublishMsgAsync(m)
		if err != nil {
			return time.Time{}, fmt.Errorf("publish %s: %w", e.Subject, err)
		}
		futures[i] = f
	}
	for i, f := range futures {
		select {
		case <-f.Ok():
		case err := <-f.Err():
			return time.Time{}, fmt.Errorf("publish %s (%s): %w", events[i].Subject, events[i].MsgID, err)
		case <-ctx.Done():
			return time.Time{}, fmt.Errorf("wait for the PubAck of %s: %w", events[i].MsgID, ctx.Err())
		}
	}
	return time.Now(), nil
}

// Stored implements timeoutd.Publisher with gets of the subject's
// messages on the expiry stream, each the next on the subject after the
// last ($JS.API.STREAM.MSG.GET with next_by_subj, which timeoutd's NATS
// user may call on that stream; the server finds them by its subject
// index), until one has the Nats-Msg-Id msgID or none is left: one get a
// message of the subject, usually one or two (a key's own fire subject).
func (p Publisher) Stored(ctx context.Context, subject, msgID string) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, p.ackTimeout)
	defer cancel()
	s, err := p.js.Stream(ctx, events.StreamExpiries)
	if err != nil {
		return false, fmt.Errorf("expiry stream: %w", err)
	}
	for seq := uint64(1); ; {
		m, err := s.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(subject))
		switch {
		case errors.Is(err, jetstream.ErrMsgNotFound):
			return false, nil
		case err != nil:
			return false, fmt.Errorf("events on %s: %w", subject, err)
		case m.Header.Get(jetstream.MsgIDHeader) == msgID:
			return true, nil
		}
		seq = m.Sequence + 1
	}
}
