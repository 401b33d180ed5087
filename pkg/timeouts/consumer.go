package timeouts

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ordertimeout/ordertimeout/internal/inflight"
	"github.com/ordertimeout/ordertimeout/internal/tracing"
	"github.com/ordertimeout/ordertimeout/pkg/events"
)

// Defaults of ConsumerConfig.
const (
	// AckWaitDefault is short so that the events a crashed consumer held
	// are redelivered to another instance within seconds; a Consumer
	// keeps the events it holds in progress meanwhile.
	AckWaitDefault       = 2 * time.Second
	HandleTimeoutDefault = 30 * time.Second
	RetryDelayDefault    = time.Second
	MaxAckPendingDefault = 1000
)

// ackWaitMin bounds ConsumerConfig.AckWait from below: the progress acks
// go every third of it.
const ackWaitMin = time.Second

// ConsumerConfig configures a Consumer of events of type T.
type ConsumerConfig[T any] struct {
	// Stream is the stream to consume; default events.StreamExpiries.
	Stream string
	// Durable is the durable consumer's name, which survives restarts and
	// resumes where the last run acked; it is also the service token of
	// the dead letters, dlq.<Durable>.<reason>. Required.
	Durable string
	// FilterSubject selects the events, e.g. "reservations.expire.>" (the
	// prefix of your deadlines' fire subjects). Required.
	FilterSubject string
	// Decode decodes and validates a message received on subject; an
	// error (best an *events.Error, whose reason names the dead letter)
	// dead-letters the message. DecodeExpiry decodes expiry events.
	// Required.
	Decode func(subject string, data []byte) (T, error)
	// Handle applies an event; its context carries the trace context of
	// the event's traceparent header (for an expiry, the fire's span), so
	// the handler's spans continue that trace. It must be idempotent: an event is
	// delivered at least once (redelivered after a crash or a lost ack,
	// republished beyond JetStream's duplicate window), so apply it
	// conditionally, e.g. UPDATE … WHERE id = $key AND version = $version
	// AND status = 'held'. An error makes the event redelivered after
	// RetryDelay; it is never dropped. Required.
	Handle func(ctx context.Context, e T) error
	// AckWait is how long an event delivered to an instance that stopped
	// answering (crashed, cut off) waits before it is redelivered to
	// another; at least 1s, default 2s. A Consumer marks every event it
	// holds in progress every AckWait/3 (the "+WPI" ack) until it acks it,
	// however long the event waits for its turn or Handle takes. The
	// durable consumer is updated to it by NewConsumer.
	AckWait time.Duration
	// HandleTimeout bounds one call of Handle: its context ends then, and
	// an error makes the event redelivered. Default 30s.
	HandleTimeout time.Duration
	// RetryDelay is the delay before an event whose Handle failed, or
	// whose dead letter could not be published, is redelivered; default 1s.
	RetryDelay time.Duration
	// MaxAckPending bounds the events received and not yet acked; default
	// 1000.
	MaxAckPending int
	// Now dates the dead letters; default time.Now.
	Now func() time.Time
	// Logger receives a line per dead-lettered or failed event; default
	// slog.Default().
	Logger *slog.Logger
}

func (c *ConsumerConfig[T]) setDefaults() error {
	c.Stream = cmp.Or(c.Stream, events.StreamExpiries)
	c.AckWait = cmp.Or(c.AckWait, AckWaitDefault)
	c.HandleTimeout = cmp.Or(c.HandleTimeout, HandleTimeoutDefault)
	c.RetryDelay = cmp.Or(c.RetryDelay, RetryDelayDefault)
	c.MaxAckPending = cmp.Or(c.MaxAckPending, MaxAckPendingDefault)
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	switch {
	case !events.ValidKey(c.Durable):
		return fmt.Errorf("timeouts: Durable %q must be 1 to %d letters, digits, '-' or '_'", c.Durable, events.MaxKeyLen)
	case c.FilterSubject == "":
		return errors.New("timeouts: FilterSubject is required")
	case c.Decode == nil || c.Handle == nil:
		return errors.New("timeouts: Decode and Handle are required")
	case c.AckWait < ackWaitMin:
		return fmt.Errorf("timeouts: AckWait must be at least %v, got %v", ackWaitMin, c.AckWait)
	case c.HandleTimeout < 0:
		return fmt.Errorf("timeouts: HandleTimeout must be positive, got %v", c.HandleTimeout)
	case c.RetryDelay < 0:
		return fmt.Errorf("timeouts: RetryDelay must not be negative, got %v", c.RetryDelay)
	case c.MaxAckPending < 1:
		return fmt.Errorf("timeouts: MaxAckPending must be positive, got %d", c.MaxAckPending)
	}
	return nil
}

// jetStream is the durable consumer's configuration. Every instance of a
// service creates or updates the one consumer with it, so it must be the
// same everywhere; docs/contract/asyncapi.yaml gives it to producers in
// other languages (channel fired, x-jetstream.consumer), and a test keeps
// the two in step.
func (c *ConsumerConfig[T]) jetStream() jetstream.ConsumerConfig {
	return jetstream.ConsumerConfig{
		Durable:       c.Durable,
		FilterSubject: c.FilterSubject,
		DeliverPolicy: jetstream.DeliverAllPolicy,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       c.AckWait,
		MaxDeliver:    -1,
		MaxAckPending: c.MaxAckPending,
	}
}

// Consumer consumes events durably: a JetStream durable consumer with
// explicit acks, an event acked only after Handle returned nil, a failed
// one redelivered, one that does not decode dead-lettered (published to
// DEAD_LETTERS on dlq.<Durable>.<reason>, with its Nats-Msg-Id, then
// terminated) — never retried forever, never dropped silently. Events are
// handled one at a time, in the order received; each event received is
// kept in progress until it is settled, so only a crashed or cut-off
// instance's events are redelivered, after AckWait.
type Consumer[T any] struct {
	cfg  ConsumerConfig[T]
	js   jetstream.JetStream
	cons jetstream.Consumer
	keep *inflight.Keeper
}

// NewConsumer creates or updates the durable consumer on cfg.Stream, which
// must exist, and returns a Consumer to Run.
func NewConsumer[T any](ctx context.Context, js jetstream.JetStream, cfg ConsumerConfig[T]) (*Consumer[T], error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	cons, err := js.CreateOrUpdateConsumer(ctx, cfg.Stream, cfg.jetStream())
	if err != nil {
		return nil, fmt.Errorf("timeouts: create consumer %s on %s: %w", cfg.Durable, cfg.Stream, err)
	}
	return &Consumer[T]{cfg: cfg, js: js, cons: cons, keep: inflight.New(cfg.AckWait)}, nil
}

// Run handles events until ctx ends, then stops pulling, handles every
// event received and returns nil. Transient pull errors (NATS restarting)
// are logged and the pulls go on.
func (c *Consumer[T]) Run(ctx context.Context) error {
	// Received events wait here for their turn, kept in progress: it holds
	// every event the server may deliver unacked (MaxAckPending), so the
	// client's own buffer, where nothing keeps them in progress, drains
	// at once.
	received := make(chan jetstream.Msg, c.cfg.MaxAckPending)
	cc, err := c.cons.Consume(func(m jetstream.Msg) {
		c.keep.Hold(m)
		received <- m
	}, jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
		c.cfg.Logger.Warn("pull events; pulling on", "durable", c.cfg.Durable, "err", err)
	}), jetstream.PullExpiry(inflight.PullExpiry), jetstream.PullHeartbeat(inflight.PullHeartbeat))
	if err != nil {
		return fmt.Errorf("timeouts: consume %s: %w", c.cfg.Durable, err)
	}
	kctx, stopKeeping := context.WithCancel(context.WithoutCancel(ctx))
	defer stopKeeping()
	go c.keep.Run(kctx)
	stopping, closed := ctx.Done(), cc.Closed()
	for {
		select {
		case m := <-received:
			c.handle(ctx, m)
		case <-stopping:
			cc.Drain() // what the client buffered still arrives on received
			stopping = nil
		case <-closed:
			for {
				select {
				case m := <-received:
					c.handle(ctx, m)
				default:
					return nil
				}
			}
		}
	}
}

// handle decodes m, hands it to Handle and settles it.
func (c *Consumer[T]) handle(ctx context.Context, m jetstream.Msg) {
	log := c.cfg.Logger.With("durable", c.cfg.Durable, "subject", m.Subject())
	e, err := c.cfg.Decode(m.Subject(), m.Data())
	if err != nil {
		c.deadLetter(ctx, m, err, log)
		return
	}
	hctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.cfg.HandleTimeout)
	hctx = tracing.WithRemote(hctx, m.Headers().Get(tracing.HeaderTraceParent))
	err = c.cfg.Handle(hctx, e)
	cancel()
	c.keep.Release(m)
	if err != nil {
		log.Error("handle event; will retry", "err", err)
		if err := m.NakWithDelay(c.cfg.RetryDelay); err != nil {
			log.Warn("nak event", "err", err)
		}
		return
	}
	if err := m.Ack(); err != nil {
		log.Warn("ack event; it will be redelivered", "err", err)
	}
}

// deadLetter publishes the rejected message's dead letter and terminates
// it; if the publish fails the message is naked, so it is neither lost nor
// handled.
func (c *Consumer[T]) deadLetter(ctx context.Context, m jetstream.Msg, reason error, log *slog.Logger) {
	dl, err := PublishDeadLetter(ctx, c.js, c.cfg.Durable, m, reason, c.cfg.Now())
	c.keep.Release(m)
	log = log.With("reason", dl.Reason, "field", dl.Field, "detail", dl.Detail)
	if err != nil {
		log.Error("dead-letter a rejected event; will retry", "err", err)
		if err := m.NakWithDelay(c.cfg.RetryDelay); err != nil {
			log.Warn("nak event", "err", err)
		}
		return
	}
	log.Warn("event rejected and dead-lettered")
	if err := m.Term(); err != nil {
		log.Warn("terminate event", "err", err)
	}
}

// PublishDeadLetter publishes the dead letter of m, rejected with reason
// at time at, to DEAD_LETTERS on dlq.<service>.<reason> with its
// Nats-Msg-Id (so a redelivered message is dead-lettered once), and waits
// for the PubAck. It returns the dead letter, whose Reason is
// events.ReasonOf(reason). The caller terminates m once it returned nil.
func PublishDeadLetter(ctx context.Context, js jetstream.JetStream, service string, m jetstream.Msg, reason error, at time.Time) (events.DeadLetter, error) {
	var seq uint64
	if md, err := m.Metadata(); err == nil {
		seq = md.Sequence.Stream
	}
	dl := events.NewDeadLetter(m.Subject(), m.Data(), m.Headers().Get(jetstream.MsgIDHeader), seq, reason, at)
	data, err := json.Marshal(dl)
	if err != nil {
		return dl, fmt.Errorf("timeouts: encode dead letter: %w", err)
	}
	msg := &nats.Msg{Subject: events.DeadLetterSubject(service, dl.Reason), Data: data, Header: nats.Header{}}
	msg.Header.Set(jetstream.MsgIDHeader, dl.MsgID())
	if _, err := js.PublishMsg(ctx, msg); err != nil {
		return dl, fmt.Errorf("timeouts: publish dead letter %s: %w", dl.MsgID(), err)
	}
	return dl, nil
}

// DecodeExpiry is ConsumerConfig.Decode for expiry events: it decodes
// strictly (events.DecodeExpiry) and refuses an event whose outcome is not
// "fired" (missed events go to timeouts.missed.<key>, not to a fire
// subject).
func DecodeExpiry(subject string, data []byte) (events.Expiry, error) {
	e, err := events.DecodeExpiry(data)
	if err != nil {
		return events.Expiry{}, err
	}
	if e.Outcome != events.OutcomeFired {
		return events.Expiry{}, &events.Error{Reason: events.ReasonUnknownKind, Field: "outcome",
			Detail: fmt.Sprintf("must be %q on a fire subject, got %q", events.OutcomeFired, e.Outcome)}
	}
	return e, nil
}
