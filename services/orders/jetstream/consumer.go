package jetstream

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/ordertimeout/ordertimeout/internal/inflight"
	"github.com/ordertimeout/ordertimeout/internal/retry"
	"github.com/ordertimeout/ordertimeout/internal/startstop"
	"github.com/ordertimeout/ordertimeout/internal/tracing"
	"github.com/ordertimeout/ordertimeout/pkg/events"
	"github.com/ordertimeout/ordertimeout/pkg/timeouts"
	"github.com/ordertimeout/ordertimeout/services/orders"
)

// Defaults of Config.
const (
	DurableDefault     = "orders-cancel"
	ConcurrencyDefault = 4
	BatchMaxDefault    = 128
	// AckWaitDefault is short so that the events a crashed instance held
	// are redelivered to another within seconds; an instance keeps the
	// events it holds in progress meanwhile (package internal/inflight).
	AckWaitDefault       = 2 * time.Second
	ApplyTimeoutDefault  = 15 * time.Second
	MaxAckPendingDefault = 4096
	RetryDelayDefault    = time.Second
)

// ackWaitMin bounds Config.AckWait from below: the progress acks go every
// third of it.
const ackWaitMin = time.Second

// unavailableRetry is the pause between two tries of a batch while the
// database is unavailable (Consumer.apply).
const unavailableRetry = 100 * time.Millisecond

// earlyMargin is added to the wait for pay_by of an early event.
const earlyMargin = 50 * time.Millisecond

// ServiceName is the service token of the dead-letter subjects.
const ServiceName = "orders"

// Expirer applies cancel events; *orders.Service implements it.
type Expirer interface {
	// ExpireAll cancels, in one transaction, each order for a payment
	// timeout if it is still pending at the event's version and its pay_by
	// (deadline) passed. Result i is about exps[i]: Applied is false for a
	// stale or duplicate event; its Err is orders.ErrNotFound for an
	// unknown order, orders.ErrDeadlineMismatch for an event about another
	// deadline, *orders.EarlyError for an event before pay_by. An error
	// means none was applied (retry them all).
	ExpireAll(ctx context.Context, exps []orders.Expiry) ([]orders.ExpireResult, error)
}

// Config configures a Consumer.
type Config struct {
	// Durable is the consumer name on TIMEOUT_EXPIRIES; default
	// "orders-cancel".
	Durable string
	// Concurrency is how many batches of events are applied at once;
	// default 4.
	Concurrency int
	// BatchMax bounds a batch: a worker takes the events already received,
	// up to BatchMax, and applies them in one transaction, so batches are
	// of one event when events trickle in and grow with a backlog; default
	// 128.
	BatchMax int
	// AckWait is how long an event delivered to an instance that stopped
	// answering (crashed, cut off) waits before it is redelivered to
	// another; at least 1s, default 2s. An instance marks every event it
	// holds in progress every AckWait/3 until it settles it, however long
	// the event waits for a worker or its transaction lasts. The durable
	// consumer is updated to it at start.
	AckWait time.Duration
	// ApplyTimeout bounds one batch's transaction, after which its events
	// are retried; default 15s. While the database is unavailable the
	// batch is tried again within it, held, rather than naked. It is not
	// tied to AckWait: the events are kept in progress while it lasts.
	ApplyTimeout time.Duration
	// MaxAckPending bounds the events in flight; default 4096.
	MaxAckPending int
	// RetryDelay is the nak delay after a transient failure, and bounds the
	// pause before pulling again after a failed pull (backing off from 100
	// ms, retry.Backoff); default 1s.
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

// Consumer applies cancel events. Create it with NewConsumer, run it with
// Start and Stop.
type Consumer struct {
	base    startstop.Base
	cfg     Config
	js      jetstream.JetStream
	cons    jetstream.Consumer
	spec    jetstream.ConsumerConfig
	expirer Expirer
	results *prometheus.CounterVec
	// keep marks the events received and not yet settled in progress.
	keep *inflight.Keeper
}

// NewConsumer creates or updates the durable consumer (explicit ack, all
// messages on orders.cancel.>) and returns a Consumer applying events with e.
// The stream must exist (streams.Ensure).
func NewConsumer(ctx context.Context, js jetstream.JetStream, e Expirer, cfg Config) (*Consumer, error) {
	cfg.Durable = cmp.Or(cfg.Durable, DurableDefault)
	cfg.Concurrency = cmp.Or(cfg.Concurrency, ConcurrencyDefault)
	cfg.BatchMax = cmp.Or(cfg.BatchMax, BatchMaxDefault)
	cfg.AckWait = cmp.Or(cfg.AckWait, AckWaitDefault)
	cfg.ApplyTimeout = cmp.Or(cfg.ApplyTimeout, ApplyTimeoutDefault)
	cfg.MaxAckPending = cmp.Or(cfg.MaxAckPending, MaxAckPendingDefault)
	cfg.RetryDelay = cmp.Or(cfg.RetryDelay, RetryDelayDefault)
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	switch {
	case cfg.Concurrency < 1 || cfg.BatchMax < 1:
		return nil, fmt.Errorf("jetstream: Concurrency and BatchMax must be positive, got %d and %d", cfg.Concurrency, cfg.BatchMax)
	case cfg.MaxAckPending < cfg.Concurrency*cfg.BatchMax:
		return nil, fmt.Errorf("jetstream: MaxAckPending (%d) must be at least Concurrency × BatchMax (%d)", cfg.MaxAckPending, cfg.Concurrency*cfg.BatchMax)
	case cfg.AckWait < ackWaitMin:
		return nil, fmt.Errorf("jetstream: AckWait must be at least %v, got %v", ackWaitMin, cfg.AckWait)
	case cfg.ApplyTimeout < 0:
		return nil, fmt.Errorf("jetstream: ApplyTimeout must be positive, got %v", cfg.ApplyTimeout)
	case cfg.RetryDelay < 0:
		return nil, fmt.Errorf("jetstream: RetryDelay must not be negative, got %v", cfg.RetryDelay)
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
	c := &Consumer{cfg: cfg, js: js, cons: cons, spec: spec, expirer: e, keep: inflight.New(cfg.AckWait),
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

// Start applies events until ctx ends or Stop; it does not block. Pull
// errors (a missed heartbeat while NATS restarts, a deleted consumer) are
// logged and the consumer is re-created and pulled again after RetryDelay;
// it does not give up while ctx lives.
func (c *Consumer) Start(ctx context.Context) { c.base.Start(ctx, c.run) }

// Stop stops pulling, lets the events in flight finish (every event
// received, kept in progress meanwhile) and returns once they have.
func (c *Consumer) Stop() { c.base.Stop() }

func (c *Consumer) run(ctx context.Context) {
	// Received events wait here while the workers are busy, so the next
	// batch is what arrived during the last transaction. It holds every
	// event the server may deliver unacked (MaxAckPending), so the pull
	// never waits for a worker with events in the client's buffer, where
	// nothing would keep them in progress.
	work := make(chan jetstream.Msg, c.cfg.MaxAckPending)
	kctx, stopKeeping := context.WithCancel(context.WithoutCancel(ctx))
	go c.keep.Run(kctx)
	var wg sync.WaitGroup
	for range c.cfg.Concurrency {
		wg.Go(func() {
			batch := make([]jetstream.Msg, 0, c.cfg.BatchMax)
			for m := range work {
				batch = append(batch[:0], m)
			fill:
				for len(batch) < c.cfg.BatchMax {
					select {
					case m, ok := <-work:
						if !ok {
							break fill
						}
						batch = append(batch, m)
					default:
						break fill
					}
				}
				hctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.cfg.ApplyTimeout)
				c.handle(hctx, ctx.Done(), batch)
				cancel()
			}
		})
	}
	defer func() {
		close(work)
		wg.Wait()
		stopKeeping()
	}()
	wait := retry.Backoff(c.cfg.RetryDelay)
	for {
		began := time.Now()
		err := c.pull(ctx, work)
		if ctx.Err() != nil {
			return
		}
		if err == nil {
			err = errors.New("message iterator closed")
		}
		if time.Since(began) > c.cfg.RetryDelay {
			wait.Reset() // it pulled for a while: a new failure, not the same one
		}
		c.cfg.Logger.Warn("pull cancel events; retrying", "err", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait.NextBackOff()):
		}
		if cons, err := c.js.CreateOrUpdateConsumer(ctx, events.StreamExpiries, c.spec); err == nil {
			c.cons = cons
		}
	}
}

// pull feeds work from one message iterator until it closes (nil; run
// closes it when ctx ends) or fails with an error other than a missed
// heartbeat.
func (c *Consumer) pull(ctx context.Context, work chan<- jetstream.Msg) error {
	it, err := c.cons.Messages(jetstream.PullMaxMessages(c.cfg.Concurrency*c.cfg.BatchMax),
		jetstream.PullExpiry(inflight.PullExpiry), jetstream.PullHeartbeat(inflight.PullHeartbeat))
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
			c.keep.Hold(m)
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

// handle applies a batch of events in one transaction and acks, naks or
// terminates each. Undecodable events are dead-lettered alone; if the
// transaction fails, every event of it is retried (apply). stopping closes
// when the consumer stops.
func (c *Consumer) handle(ctx context.Context, stopping <-chan struct{}, batch []jetstream.Msg) {
	valid := make([]jetstream.Msg, 0, len(batch))
	exps := make([]orders.Expiry, 0, len(batch))
	lateness := make([]int64, 0, len(batch))
	var spans []trace.Span
	for _, m := range batch {
		e, err := decode(m.Subject(), m.Data())
		if err != nil {
			c.deadLetter(ctx, m, err, c.cfg.Logger.With("subject", m.Subject()))
			continue
		}
		valid = append(valid, m)
		exp := orders.Expiry{ID: e.Key, Version: e.Version, Deadline: e.Deadline}
		if tracing.Enabled() {
			span := startCancelSpan(ctx, m, e)
			exp.TraceParent = tracing.Format(span.SpanContext())
			spans = append(spans, span)
		}
		exps = append(exps, exp)
		lateness = append(lateness, e.LatenessNs)
	}
	if len(exps) == 0 {
		return
	}
	results, err := c.apply(ctx, stopping, exps)
	for i, s := range spans {
		switch {
		case err != nil:
			s.RecordError(err)
			s.SetStatus(codes.Error, "apply failed; retried")
		case results[i].Err != nil:
			s.RecordError(results[i].Err)
		default:
			s.SetAttributes(attribute.Bool("orders.cancelled", results[i].Applied))
		}
		s.End()
	}
	if err != nil {
		c.cfg.Logger.Error("apply cancel events; will retry", "events", len(exps), "err", err)
		c.results.WithLabelValues(ResultRetried).Add(float64(len(exps)))
		for _, m := range valid {
			c.keep.Release(m)
			if err := m.NakWithDelay(c.cfg.RetryDelay); err != nil {
				c.cfg.Logger.Warn("nak cancel event", "subject", m.Subject(), "err", err)
			}
		}
		return
	}
	for i, r := range results {
		c.settleResult(ctx, valid[i], exps[i], lateness[i], r)
	}
}

// apply runs ExpireAll, and again every unavailableRetry while it fails
// with orders.ErrUnavailable, until ctx ends (ApplyTimeout) or the consumer
// stops. The events stay held meanwhile, kept in progress, so that a batch
// caught by a failover is applied as soon as the new primary answers, not
// a nak's delay after, and none is redelivered. Retries cost little while
// the database is down: the store's gate refuses them at once but for its
// probes.
func (c *Consumer) apply(ctx context.Context, stopping <-chan struct{}, exps []orders.Expiry) ([]orders.ExpireResult, error) {
	for {
		results, err := c.expirer.ExpireAll(ctx, exps)
		if !errors.Is(err, orders.ErrUnavailable) {
			return results, err
		}
		select {
		case <-ctx.Done():
			return nil, err
		case <-stopping:
			return nil, err
		case <-time.After(unavailableRetry):
		}
	}
}

// startCancelSpan starts the span of applying the cancel event e received
// as m, a child of the fire's span whose context m's traceparent header
// carries; the cancelled event it writes carries this span's context.
func startCancelSpan(ctx context.Context, m jetstream.Msg, e events.Expiry) trace.Span {
	_, span := tracing.Tracer().Start(tracing.WithRemote(ctx, m.Headers().Get(tracing.HeaderTraceParent)), "orders cancel",
		trace.WithSpanKind(trace.SpanKindConsumer))
	if span.IsRecording() {
		span.SetAttributes(tracing.Timeout(e.Key, e.Version, events.PartitionOf(e.Key), e.Deadline)...)
		span.SetAttributes(tracing.AttrOrderID.String(e.Key), tracing.AttrLateness.Float64(float64(e.LatenessNs)/1e6),
			tracing.AttrSubject.String(m.Subject()))
	}
	return span
}

// settleResult acks, naks or terminates m by the result r of applying e.
func (c *Consumer) settleResult(ctx context.Context, m jetstream.Msg, e orders.Expiry, lateness int64, r orders.ExpireResult) {
	log := c.cfg.Logger.With("subject", m.Subject(), "order_id", e.ID, "version", e.Version)
	var early *orders.EarlyError
	switch {
	case errors.Is(r.Err, orders.ErrDeadlineMismatch):
		// Forged or corrupt: the current version with another deadline.
		c.deadLetter(ctx, m, &events.Error{Reason: events.ReasonInvalidDeadline, Field: "deadline", Detail: r.Err.Error()}, log)
	case errors.As(r.Err, &early):
		// Before pay_by by this clock: never cancel early; retry then.
		delay := max(early.PayBy.Sub(c.cfg.Now()), 0) + earlyMargin
		log.Warn("cancel event before the order's pay_by; redelivering at pay_by", "pay_by", early.PayBy, "delay", delay)
		c.results.WithLabelValues(ResultEarly).Inc()
		c.keep.Release(m)
		if err := m.NakWithDelay(delay); err != nil {
			log.Warn("nak early cancel event", "err", err)
		}
	case errors.Is(r.Err, orders.ErrNotFound):
		// Not ours (another producer under orders.cancel.) or a lost order:
		// nothing to cancel, and redelivering cannot change that.
		log.Warn("cancel event for an unknown order")
		c.settle(m, ResultUnknownOrder, log)
	case r.Err != nil:
		// Not an error ExpireAll returns per event; retry rather than drop.
		log.Error("apply cancel event; will retry", "err", r.Err)
		c.results.WithLabelValues(ResultRetried).Inc()
		c.keep.Release(m)
		if err := m.NakWithDelay(c.cfg.RetryDelay); err != nil {
			log.Warn("nak cancel event", "err", err)
		}
	case r.Applied:
		log.Info("order cancelled: payment timeout", "lateness_ns", lateness)
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
	c.keep.Release(m)
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
	dl, err := timeouts.PublishDeadLetter(ctx, c.js, ServiceName, m, reason, c.cfg.Now())
	c.keep.Release(m)
	log = log.With("reason", dl.Reason, "field", dl.Field, "detail", dl.Detail)
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
