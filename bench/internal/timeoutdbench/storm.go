package timeoutdbench

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ordertimeout/ordertimeout/bench/internal/harness"
	"github.com/ordertimeout/ordertimeout/pkg/events"
)

// StormResult is what a storm measured, for a caller that steps or
// repeats storms; Storm prints it too.
type StormResult struct {
	// Complete says every cancel event arrived within the grace.
	Complete bool
	// Received is the number of cancel events that arrived.
	Received int
	// Arrival is the lateness of the events' arrival at the independent
	// consumer against their deadlines.
	Arrival harness.Summary
	// FiredAt is the lateness of timeoutd's own fired_at in the events.
	FiredAt harness.Summary
}

// Storm subscribes an independent ordered JetStream consumer to the cancel
// events, publishes one set command per key at deadlines (which lie in the
// future), waits for every cancel event and prints two lateness
// distributions against each deadline: the event's arrival at the consumer
// (after JetStream stored it, so no earlier than its PubAck) and timeoutd's
// own fired_at. Early counts must be 0. Events still missing grace after the
// last deadline are reported (complete=false, received=…) with the
// distribution of those that arrived, and as an error wrapping
// harness.ErrIncomplete; the result is returned with it. A
// "measured=arrival_timeline" line gives the worst arrival lateness of each
// 500 ms of deadlines (see timeline).
//
// It also prints the CPU time of timeoutd, of Config.CPUs and of the
// harness's own process per command, from the first publish until timeoutd
// holds them all, and per expiry, from the first deadline until every event
// arrived and the outbox is empty.
func (b *Bench) Storm(ctx context.Context, keys []string, deadlines []time.Time, grace time.Duration) (StormResult, error) {
	w := &stormWatch{arrivals: harness.NewArrivals(keys, deadlines), fired: make([]time.Duration, 0, len(keys)),
		pub: make([]time.Duration, 0, len(keys))}
	cc, err := b.consumeExpiries(ctx, w)
	if err != nil {
		return StormResult{}, err
	}
	defer cc.Stop()
	sub, err := b.subscribeExpiries(w)
	if err != nil {
		return StormResult{}, err
	}
	defer sub.Unsubscribe()
	sampleCtx, stopSampling := context.WithCancel(ctx)
	defer stopSampling()
	go b.sampleOutbox(sampleCtx, w)
	r, err := b.stormIngest(ctx, keys, deadlines)
	if err != nil {
		return StormResult{}, err
	}
	var prof *stormProfile
	if b.cfg.ProfileDir != "" {
		prof = b.profileStorm(ctx, b.profiled, deadlines[0], deadlines[len(deadlines)-1], len(keys))
		b.profiled++
	}
	if err := b.stormExpiry(ctx, w, &r, deadlines[0], deadlines[len(deadlines)-1].Add(grace), stopSampling); err != nil {
		return StormResult{}, err
	}
	if prof != nil {
		if err := prof.Wait(); err != nil {
			return StormResult{}, err
		}
	}
	b.awaitPubAcks(ctx, &r, len(keys))
	return b.reportStorm(w, &r, keys, deadlines, grace)
}

// stormWatch is what a storm's consumers and outbox sampler observe.
type stormWatch struct {
	arrivals *harness.Arrivals
	// mu guards fired, earlyDec, maxRows and maxAge.
	mu       sync.Mutex
	fired    []time.Duration // fired_at minus deadline per event
	earlyDec int             // events fired before their deadline
	maxRows  int64           // the outbox's largest row count
	maxAge   float64         // the outbox's largest oldest row age, in ms
	// pubMu guards pub.
	pubMu sync.Mutex
	pub   []time.Duration // arrival at the core subscriber minus deadline
}

// stormRun holds a storm's phase lengths and CPU samples.
type stormRun struct {
	cpus     harness.CPUs
	cpu      [4]harness.CPUSample // ingest from, to; expiry from, to
	acks0    histogram            // timeoutd's PubAck histogram before the storm
	acks     histogram            // its growth during the storm
	ingested time.Duration        // from the first publish to the last PubAck
	lead     time.Duration        // from the last PubAck to the first deadline
	held     bool                 // timeoutd held every command before the first deadline
	ingest   time.Duration        // from the first publish until timeoutd held them
	expiry   time.Duration        // from the first deadline until the outbox is empty
	complete bool                 // every event arrived within the grace
}

// consumeExpiries starts an independent ordered JetStream consumer of the
// cancel events that records each one's arrival into w.
func (b *Bench) consumeExpiries(ctx context.Context, w *stormWatch) (jetstream.ConsumeContext, error) {
	cons, err := b.js.OrderedConsumer(ctx, events.StreamExpiries, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{events.OrderCancelSubjectPrefix + ">"},
		DeliverPolicy:  jetstream.DeliverNewPolicy,
	})
	if err != nil {
		return nil, fmt.Errorf("expiry consumer: %w", err)
	}
	cc, err := cons.Consume(func(msg jetstream.Msg) {
		now := time.Now()
		e, err := events.DecodeExpiry(msg.Data())
		if err != nil {
			w.arrivals.Undecodable(msg.Data(), err)
			return
		}
		if !w.arrivals.Add(e.Key, e.Deadline, now) {
			return
		}
		w.mu.Lock()
		defer w.mu.Unlock()
		if e.FiredAt.Before(e.Deadline) {
			w.earlyDec++
		}
		w.fired = append(w.fired, e.FiredAt.Sub(e.Deadline))
	}, jetstream.PullMaxMessages(4096))
	if err != nil {
		return nil, fmt.Errorf("consume expiries: %w", err)
	}
	return cc, nil
}

// subscribeExpiries starts a core NATS subscriber of the cancel events,
// which sees each event when the relay publishes it, before JetStream's
// PubAck: it tells the relay's lag from the consumer's.
func (b *Bench) subscribeExpiries(w *stormWatch) (*nats.Subscription, error) {
	sub, err := b.nc.Subscribe(events.OrderCancelSubjectPrefix+">", func(msg *nats.Msg) {
		now := time.Now()
		e, err := events.DecodeExpiry(msg.Data)
		if err != nil {
			return
		}
		w.pubMu.Lock()
		w.pub = append(w.pub, now.Sub(e.Deadline))
		w.pubMu.Unlock()
	})
	if err != nil {
		return nil, fmt.Errorf("subscribe expiries: %w", err)
	}
	if err := sub.SetPendingLimits(-1, -1); err != nil {
		sub.Unsubscribe()
		return nil, fmt.Errorf("subscribe expiries: %w", err)
	}
	return sub, nil
}

// sampleOutbox records the outbox's largest size and age into w every
// 100 ms until ctx ends.
func (b *Bench) sampleOutbox(ctx context.Context, w *stormWatch) {
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if s, err := b.Stats(ctx); err == nil {
			w.mu.Lock()
			w.maxRows, w.maxAge = max(w.maxRows, s.Outbox.Rows), max(w.maxAge, s.Outbox.OldestAgeMs)
			w.mu.Unlock()
		}
	}
}

// stormIngest publishes one set command per key and waits until timeoutd
// holds them all, at the latest until the first deadline, sampling the CPU
// at the first publish and at the end of the wait.
func (b *Bench) stormIngest(ctx context.Context, keys []string, deadlines []time.Time) (stormRun, error) {
	var r stormRun
	var err error
	if r.acks0, err = b.pubAckHistogram(ctx); err != nil {
		return stormRun{}, err
	}
	s0, err := b.Stats(ctx)
	if err != nil {
		return stormRun{}, err
	}
	r.cpus = b.cpus()
	if r.cpu[0], err = r.cpus.Sample(); err != nil {
		return stormRun{}, fmt.Errorf("storm: %w", err)
	}
	start := time.Now()
	if err := b.publish(ctx, func(i int) events.Command { return setCommand(keys[i], 1, deadlines[i]) }, len(keys)); err != nil {
		return stormRun{}, err
	}
	r.ingested = time.Since(start)
	r.lead = time.Until(deadlines[0])
	// The ingest ends when timeoutd holds every command, at the latest at
	// the first deadline (held=false).
	r.held = harness.Poll(ctx, r.lead, 20*time.Millisecond, func() (bool, error) {
		s, err := b.Stats(ctx)
		return err == nil && s.Pending >= s0.Pending+int64(len(keys)), nil
	}) == nil
	r.ingest = time.Since(start)
	if r.cpu[1], err = r.cpus.Sample(); err != nil {
		return stormRun{}, fmt.Errorf("storm: %w", err)
	}
	return r, nil
}

// stormExpiry waits from the first deadline until every event arrived (or
// giveUp) and the outbox is empty again, sampling the CPU at both ends; it
// stops the outbox sampling once the events arrived.
func (b *Bench) stormExpiry(ctx context.Context, w *stormWatch, r *stormRun, first, giveUp time.Time, stopSampling func()) error {
	if err := harness.SleepUntil(ctx, first); err != nil {
		return err
	}
	start := time.Now()
	var err error
	if r.cpu[2], err = r.cpus.Sample(); err != nil {
		return fmt.Errorf("storm: %w", err)
	}
	if r.complete, err = w.arrivals.Wait(ctx, giveUp); err != nil {
		return err
	}
	stopSampling()
	// The expiry ends when every event arrived and timeoutd's outbox is
	// empty again (its stats count the rows once a second).
	err = harness.Poll(ctx, 10*time.Second, 50*time.Millisecond, func() (bool, error) {
		s, err := b.Stats(ctx)
		return err == nil && s.Outbox.Rows == 0, nil
	})
	if err != nil {
		b.rep.Line("note", "peer", "timeoutd", "workload", "storm", "outbox_not_empty", err.Error())
	}
	r.expiry = time.Since(start)
	if r.cpu[3], err = r.cpus.Sample(); err != nil {
		return fmt.Errorf("storm: %w", err)
	}
	return nil
}

// awaitPubAcks waits until timeoutd's PubAck histogram grew by n since the
// storm's start and keeps its growth in r.acks; it notes a timeout.
// timeoutd observes an event's PubAck lateness once its outbox row is
// deleted, a little after the consumer saw it.
func (b *Bench) awaitPubAcks(ctx context.Context, r *stormRun, n int) {
	err := harness.Poll(ctx, 10*time.Second, 50*time.Millisecond, func() (bool, error) {
		h, err := b.pubAckHistogram(ctx)
		r.acks = h.since(r.acks0)
		return err == nil && r.acks.count >= float64(n), err
	})
	if err != nil {
		b.rep.Line("note", "peer", "timeoutd", "workload", "storm", "puback_histogram", err.Error())
	}
}

// reportStorm prints a storm's result lines and returns its result, with
// an error wrapping harness.ErrIncomplete if events are missing.
func (b *Bench) reportStorm(w *stormWatch, r *stormRun, keys []string, deadlines []time.Time, grace time.Duration) (StormResult, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	received, arrival := w.arrivals.Summary()
	res := StormResult{Complete: r.complete, Received: received, Arrival: arrival, FiredAt: harness.Summarize(w.fired)}
	b.reportArrival(w, r, res, keys, deadlines)
	b.reportStormCPU(r, len(keys))
	w.pubMu.Lock()
	kv := []any{"peer", "timeoutd", "workload", "storm", "measured", "relay_publish_core_sub", "n", len(w.pub)}
	kv = append(kv, harness.Summarize(w.pub).KV("lateness_")...)
	w.pubMu.Unlock()
	b.rep.Line("result", kv...)
	if err := b.reportPubAcks(r.acks); err != nil {
		return res, err
	}
	kv = []any{"peer", "timeoutd", "workload", "storm", "measured", "fired_at_in_event", "n", len(keys)}
	kv = append(kv, res.FiredAt.KV("lateness_")...)
	b.rep.Line("result", kv...)
	if !r.complete {
		return res, fmt.Errorf("%w: %d of %d cancel events arrived within %s after the last deadline", harness.ErrIncomplete, received, len(keys), grace)
	}
	return res, nil
}

// reportArrival prints the "arrival_at_consumer" and "arrival_timeline"
// lines; w.mu must be held.
func (b *Bench) reportArrival(w *stormWatch, r *stormRun, res StormResult, keys []string, deadlines []time.Time) {
	span := deadlines[len(deadlines)-1].Sub(deadlines[0])
	kv := []any{"peer", "timeoutd", "workload", "storm", "measured", "arrival_at_consumer", "n", len(keys),
		"due_per_sec", harness.PerSec(len(keys), span), "publish_acked_seconds", r.ingested.Seconds(),
		"lead_after_publish_ms", r.lead, "complete", r.complete, "early_fired_at", w.earlyDec}
	kv = append(kv, w.arrivals.KV()...)
	kv = append(kv, res.Arrival.KV("lateness_")...)
	kv = append(kv, "outbox_max_rows", w.maxRows, "outbox_max_oldest_age_ms", w.maxAge)
	b.rep.Line("result", kv...)
	b.rep.Line("result", append([]any{"peer", "timeoutd", "workload", "storm", "measured", "arrival_timeline"}, w.arrivals.TimelineKV(res.Arrival.P99)...)...)
}

// reportStormCPU prints the "cpu" line: CPU per command while ingesting,
// per expiry while firing; total is the platform's (timeoutd, Postgres,
// NATS), the harness apart.
func (b *Bench) reportStormCPU(r *stormRun, n int) {
	kv := []any{"peer", "timeoutd", "workload", "storm", "measured", "cpu", "n", n,
		"ingest_seconds", r.ingest.Seconds(), "ingest_held", r.held}
	kv = append(kv, r.cpus.PerUnit("ingest_us_per_command_", r.cpu[0], r.cpu[1], n)...)
	kv = append(kv, "expiry_seconds", r.expiry.Seconds())
	kv = append(kv, r.cpus.PerUnit("expiry_us_per_expiry_", r.cpu[2], r.cpu[3], n)...)
	b.rep.Line("result", kv...)
}

// reportPubAcks prints the target's own measure: PubAck minus deadline,
// from timeoutd's histogram, whose buckets hold the target's bounds (5, 20,
// 100 ms). The PubAck time of a batch is that of its last PubAck.
func (b *Bench) reportPubAcks(acks histogram) error {
	kv := []any{"peer", "timeoutd", "workload", "storm", "measured", "puback_timeoutd_histogram", "n", acks.count}
	for _, le := range [][2]string{{"0.005", "5ms"}, {"0.02", "20ms"}, {"0.1", "100ms"}} {
		sh, err := acks.share(le[0])
		if err != nil {
			return err
		}
		kv = append(kv, "share_le_"+le[1], sh)
	}
	if acks.count > 0 {
		kv = append(kv, "lateness_mean_ms", 1000*acks.sum/acks.count)
	}
	b.rep.Line("result", kv...)
	return nil
}
