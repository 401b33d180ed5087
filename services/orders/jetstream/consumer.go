package jetstream

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ordertimeout/ordertimeout/pkg/events"
	"github.com/ordertimeout/ordertimeout/services/orders"
)

// Defaults of Config.
const (
	DurableDefault       = "orders-cancel"
	ConcurrencyDefault   = 16
	AckWaitDefault       = 30 * time.Second
	MaxAckPendingDefault = 4096
	RetryDelayDefault    = time.Second
)

// earlyMargin is added to the wait for pay_by of an early event.
const earlyMargin = 50 * time.Millisecond

// ServiceName is the service token of the dead-letter subjects.
const ServiceName = "orders"

// Expirer applies a cancel event; *orders.Service implements it.
type Expirer interface {
	// Expire cancels order id for a payment timeout if it is still pending
	// at version and its pay_by (deadline) passed; applied is false for a
	// stale or duplicate event. Errors: orders.ErrNotFound for an unknown
	// order, orders.ErrDeadlineMismatch for an event about another
	// deadline, *orders.EarlyError for an event before pay_by.
	Expire(ctx context.Context, id string, version int64, deadline time.Time) (o orders.Order, applied bool, err error)
}

// Config configures a Consumer.
type Config struct {
	// Durable is the consumer name on TIMEOUT_EXPIRIES; default
	// "orders-cancel".
	Durable string
	// Concurrency is how many events are applied at once; default 16.
	Concurrency int
	// AckWait is how long an unacked event waits before redelivery;
	// default 30s. Applying one event is bounded by AckWait/2.
	AckWait time.Duration
	// MaxAckPending bounds the events in flight; default 4096.
	MaxAckPending int
	// RetryDelay is the nak delay after a transient failure; default 1s.
	RetryDelay time.Duration
	// Registerer, if set, receives the orders_cancel_events_total counter.
	Registerer prometheus.Registerer
	// Now is the clock of dead letters; default time.Now.
	Now func() time.Time
	// Logger; default slog.Default().
	Logger *slog.Logger
}

// Results of an event, the label of orders_cancel_events_total.
const (
	ResultApplied      = "applied"
	ResultNoop         = "noop"
	ResultUnknownOrder = "unknown_order"
	ResultEarly        = "early"
	ResultDeadLettered = "dead_lettered"
	ResultRetried      = "retried"
)

// Consumer applies cancel events. Create it with NewConsumer, run it with Run.
type Consumer struct {
	cfg     Config
	js      jetstream.JetStream
	cons    jetstream.Consumer
	spec    jetstream.ConsumerConfig
	expirer Expirer
	results *prometheus.CounterVec
}

// NewConsumer creates or updates the durable consumer (explicit ack, all
// messages on orders.cancel.>) and returns a Consumer applying events with e.
// The stream must exist (streams.Ensure).
func NewConsumer(ctx context.Context, js jetstream.JetStream, e Expirer, cfg Config) (*Consumer, error) {
	cfg.Durable = cmp.Or(cfg.Durable, DurableDefault)
	cfg.Concurrency = cmp.Or(cfg.Concurrency, ConcurrencyDefault)
	cfg.AckWait = cmp.Or(cfg.AckWait, AckWaitDefault)
	cfg.MaxAckPending = cmp.Or(cfg.MaxAckPending, MaxAckPendingDefault)
	cfg.RetryDelay = cmp.Or(cfg.RetryDelay, RetryDelayDefault)
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	switch {
	case cfg.Concurrency < 1:
		return nil, fmt.Errorf("jetstream: Concurrency must be positive, got %d", cfg.Concurrency)
	case cfg.MaxAckPending < cfg.Concurrency:
		return nil, fmt.Errorf("jetstream: MaxAckPending (%d) must be at least Concurrency (%d)", cfg.MaxAckPending, cfg.Concurrency)
	case cfg.AckWait <= 0 || cfg.RetryDelay < 0:
		return nil, errors.New("jetstream: AckWait must be positive and RetryDelay not negative")
	}
	spec := jetstream.ConsumerConfig{
		Durable:       cfg.Durable,
		Description:   "orders: cancel unpaid orders when their payment deadline fires",
		FilterSubject: events.OrderCancelSubjects,
		DeliverPolicy: jetstream.DeliverAllPolicy,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       cfg.AckWait,
		MaxDeliver:    -1,
		MaxAckPending: cfg.MaxAckPending,
	}
	cons, err := js.CreateOrUpdateConsumer(ctx, events.StreamExpiries, spec)
	if err != nil {
		return nil, fmt.Errorf("ensure consumer %s: %w", cfg.Durable, err)
	}
	c := &Consumer{cfg: cfg, js: js, cons: cons, spec: spec, expirer: e,
		results: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "orders_cancel_events_total",
			Help: "Cancel events received, by result: applied, noop (stale or duplicate), unknown_order, early (redelivered at pay_by), dead_lettered, retried.",
		}, []string{"result"})}
	if cfg.Registerer != nil {
		if err := cfg.Registerer.Register(c.results); err != nil {
			return nil, fmt.Errorf("register consumer metrics: %w", err)
		}
	}
	return c, nil
}

// Run applies events until ctx ends, then stops pulling, lets the events in
// flight finish and returns nil. Pull errors (a missed heartbeat while NATS
// restarts, a deleted consumer) are logged and the consumer is re-created
// and pulled again after RetryDelay; Run does not give up while ctx lives.
func (c *Consumer) Run(ctx context.Context) error {
	work := make(chan jetstream.Msg)
	var wg sync.WaitGroup
	for range c.cfg.Concurrency {
		wg.Go(func() {
			for m := range work {
				hctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.cfg.AckWait/2)
				c.handle(hctx, m)
				cancel()
			}
		})
	}
	defer func() {
		close(work)
		wg.Wait()
	}()
	for {
		err := c.pull(ctx, work)
		if ctx.Err() != nil {
			return nil
		}
		if err == nil {
			err = errors.New("message iterator closed")
		}
		c.cfg.Logger.Warn("pull cancel events; retrying", "err", err)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(c.cfg.RetryDelay):
		}
		if cons, err := c.js.CreateOrUpdateConsumer(ctx, events.StreamExpiries, c.spec); err == nil {
			c.cons = cons
		}
	}
}

// pull feeds work from one message iterator until it closes (nil; Run
// closes it when ctx ends) or fails with an error other than a missed
// heartbeat.
func (c *Consumer) pull(ctx context.Context, work chan<- jetstream.Msg) error {
	it, err := c.cons.Messages(jetstream.PullMaxMessages(2 * c.cfg.Concurrency))
	if err != nil {
		return err
	}
	defer it.Stop()
	stop := context.AfterFunc(ctx, it.Stop)
	defer stop()
	for {
		m, err := it.Next()
		switch {
		case err == nil:
			work <- m
		case errors.Is(err, jetstream.ErrMsgIteratorClosed):
			return nil
		case errors.Is(err, jetstream.ErrNoHeartbeat):
			c.cfg.Logger.Warn("no heartbeat from the cancel consumer; pulling on")
		default:
			return err
		}
	}
}

// handle applies one event and acks, naks or terminates it.
func (c *Consumer) handle(ctx context.Context, m jetstream.Msg) {
	log := c.cfg.Logger.With("subject", m.Subject())
	e, err := decode(m.Subject(), m.Data())
	if err != nil {
		c.deadLetter(ctx, m, err, log)
		return
	}
	log = log.With("order_id", e.Key, "version", e.Version)
	_, applied, err := c.expirer.Expire(ctx, e.Key, e.Version, e.Deadline)
	var early *orders.EarlyError
	switch {
	case errors.Is(err, orders.ErrDeadlineMismatch):
		// Forged or corrupt: the current version with another deadline.
		c.deadLetter(ctx, m, &events.Error{Reason: events.ReasonInvalidDeadline, Field: "deadline", Detail: err.Error()}, log)
	case errors.As(err, &early):
		// Before pay_by by this clock: never cancel early; retry then.
		delay := max(early.PayBy.Sub(c.cfg.Now()), 0) + earlyMargin
		log.Warn("cancel event before the order's pay_by; redelivering at pay_by", "pay_by", early.PayBy, "delay", delay)
		c.results.WithLabelValues(ResultEarly).Inc()
		if err := m.NakWithDelay(delay); err != nil {
			log.Warn("nak early cancel event", "err", err)
		}
	case errors.Is(err, orders.ErrNotFound):
		// Not ours (another producer under orders.cancel.) or a lost order:
		// nothing to cancel, and redelivering cannot change that.
		log.Warn("cancel event for an unknown order")
		c.settle(m, ResultUnknownOrder, log)
	case err != nil:
		log.Error("apply cancel event; will retry", "err", err)
		c.results.WithLabelValues(ResultRetried).Inc()
		if err := m.NakWithDelay(c.cfg.RetryDelay); err != nil {
			log.Warn("nak cancel event", "err", err)
		}
	case applied:
		log.Info("order cancelled: payment timeout", "lateness_ns", e.LatenessNs)
		c.settle(m, ResultApplied, log)
	default:
		log.Debug("cancel event is stale or a duplicate; ignored")
		c.settle(m, ResultNoop, log)
	}
}

// decode decodes an event and checks it belongs on subject.
func decode(subject string, data []byte) (events.Expiry, error) {
	e, err := events.DecodeExpiry(data)
	if err != nil {
		return events.Expiry{}, err
	}
	if e.Outcome != events.OutcomeFired {
		return events.Expiry{}, &events.Error{Reason: events.ReasonUnknownKind, Field: "outcome",
			Detail: fmt.Sprintf("a cancel event must have outcome %q, got %q", events.OutcomeFired, e.Outcome)}
	}
	if subject != events.OrderCancelSubject(e.Key) {
		return events.Expiry{}, &events.Error{Reason: events.ReasonSubjectMismatch, Field: "key",
			Detail: fmt.Sprintf("key %q does not match subject %s", e.Key, subject)}
	}
	return e, nil
}

func (c *Consumer) settle(m jetstream.Msg, result string, log *slog.Logger) {
	c.results.WithLabelValues(result).Inc()
	if err := m.Ack(); err != nil {
		// The event is redelivered and found to be a no-op.
		log.Warn("ack cancel event", "err", err)
	}
}

// deadLetter publishes the rejected message to DEAD_LETTERS, waits for the
// PubAck and terminates it; if the publish fails the message is naked so it
// is neither lost nor applied.
func (c *Consumer) deadLetter(ctx context.Context, m jetstream.Msg, reason error, log *slog.Logger) {
	var seq uint64
	if md, err := m.Metadata(); err == nil {
		seq = md.Sequence.Stream
	}
	dl := events.NewDeadLetter(m.Subject(), m.Data(), seq, reason, c.cfg.Now())
	log = log.With("reason", dl.Reason, "field", dl.Field, "detail", dl.Detail)
	data, err := json.Marshal(dl)
	if err == nil {
		msg := &nats.Msg{Subject: events.DeadLetterSubject(ServiceName, dl.Reason), Data: data, Header: nats.Header{}}
		msg.Header.Set(jetstream.MsgIDHeader, dl.MsgID())
		_, err = c.js.PublishMsg(ctx, msg)
	}
	if err != nil {
		log.Error("dead-letter a rejected cancel event; will retry", "err", err)
		c.results.WithLabelValues(ResultRetried).Inc()
		_ = m.NakWithDelay(c.cfg.RetryDelay)
		return
	}
	log.Warn("cancel event rejected and dead-lettered")
	c.results.WithLabelValues(ResultDeadLettered).Inc()
	if err := m.Term(); err != nil {
		log.Warn("terminate cancel event", "err", err)
	}
}
