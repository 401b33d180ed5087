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
	arrivals := harness.NewArrivals(keys, deadlines)
	var (
		mu       sync.Mutex
		fired    = make([]time.Duration, 0, len(keys))
		earlyDec int
	)
	cons, err := b.js.OrderedConsumer(ctx, events.StreamExpiries, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{events.OrderCancelSubjectPrefix + ">"},
		DeliverPolicy:  jetstream.DeliverNewPolicy,
	})
	if err != nil {
		return StormResult{}, fmt.Errorf("expiry consumer: %w", err)
	}
	cc, err := cons.Consume(func(msg jetstream.Msg) {
		now := time.Now()
		e, err := events.DecodeExpiry(msg.Data())
		if err != nil {
			arrivals.Undecodable()
			return
		}
		if !arrivals.Add(e.Key, e.Deadline, now) {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if e.FiredAt.Before(e.Deadline) {
			earlyDec++
		}
		fired = append(fired, e.FiredAt.Sub(e.Deadline))
	}, jetstream.PullMaxMessages(4096))
	if err != nil {
		return StormResult{}, fmt.Errorf("consume expiries: %w", err)
	}
	defer cc.Stop()
	// A core NATS subscriber sees each event when the relay publishes it,
	// before JetStream's PubAck: it tells the relay's lag from the consumer's.
	var (
		pubMu sync.Mutex
		pub   = make([]time.Duration, 0, len(keys))
	)
	sub, err := b.nc.Subscribe(events.OrderCancelSubjectPrefix+">", func(msg *nats.Msg) {
		now := time.Now()
		e, err := events.DecodeExpiry(msg.Data)
		if err != nil {
			return
		}
		pubMu.Lock()
		pub = append(pub, now.Sub(e.Deadline))
		pubMu.Unlock()
	})
	if err != nil {
		return StormResult{}, fmt.Errorf("subscribe expiries: %w", err)
	}
	defer sub.Unsubscribe()
	if err := sub.SetPendingLimits(-1, -1); err != nil {
		return StormResult{}, fmt.Errorf("subscribe expiries: %w", err)
	}
	// Sample the outbox while the storm runs.
	var maxRows int64
	var maxAge float64
	sampleCtx, stopSampling := context.WithCancel(ctx)
	defer stopSampling()
	go func() {
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-sampleCtx.Done():
				return
			case <-t.C:
			}
			if s, err := b.Stats(sampleCtx); err == nil {
				mu.Lock()
				maxRows, maxAge = max(maxRows, s.Outbox.Rows), max(maxAge, s.Outbox.OldestAgeMs)
				mu.Unlock()
			}
		}
	}()

	acks0, err := b.pubAckHistogram(ctx)
	if err != nil {
		return StormResult{}, err
	}
	s0, err := b.Stats(ctx)
	if err != nil {
		return StormResult{}, err
	}
	cpus := b.cpus()
	var cpu [4]harness.CPUSample // ingest from, to; expiry from, to
	if cpu[0], err = cpus.Sample(); err != nil {
		return StormResult{}, fmt.Errorf("storm: %w", err)
	}
	start := time.Now()
	if err := b.publish(ctx, func(i int) events.Command { return setCommand(keys[i], 1, deadlines[i]) }, len(keys)); err != nil {
		return StormResult{}, err
	}
	ingested := time.Since(start)
	lead := time.Until(deadlines[0])
	// The ingest ends when timeoutd holds every command, at the latest at
	// the first deadline (held=false).
	held := harness.Poll(ctx, lead, 20*time.Millisecond, func() (bool, error) {
		s, err := b.Stats(ctx)
		return err == nil && s.Pending >= s0.Pending+int64(len(keys)), nil
	}) == nil
	ingest := time.Since(start)
	if cpu[1], err = cpus.Sample(); err != nil {
		return StormResult{}, fmt.Errorf("storm: %w", err)
	}
	if err := harness.SleepUntil(ctx, deadlines[0]); err != nil {
		return StormResult{}, err
	}
	expiryStart := time.Now()
	if cpu[2], err = cpus.Sample(); err != nil {
		return StormResult{}, fmt.Errorf("storm: %w", err)
	}
	last := deadlines[len(deadlines)-1]
	complete, err := arrivals.Wait(ctx, last.Add(grace))
	if err != nil {
		return StormResult{}, err
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
	expiry := time.Since(expiryStart)
	if cpu[3], err = cpus.Sample(); err != nil {
		return StormResult{}, fmt.Errorf("storm: %w", err)
	}
	// timeoutd observes an event's PubAck lateness once its outbox row is
	// deleted, a little after the consumer saw it.
	var acks histogram
	err = harness.Poll(ctx, 10*time.Second, 50*time.Millisecond, func() (bool, error) {
		h, err := b.pubAckHistogram(ctx)
		acks = h.since(acks0)
		return err == nil && acks.count >= float64(len(keys)), err
	})
	if err != nil {
		b.rep.Line("note", "peer", "timeoutd", "workload", "storm", "puback_histogram", err.Error())
	}
	mu.Lock()
	defer mu.Unlock()
	span := last.Sub(deadlines[0])
	received, arrival := arrivals.Summary()
	kv := []any{"peer", "timeoutd", "workload", "storm", "measured", "arrival_at_consumer", "n", len(keys),
		"due_per_sec", harness.PerSec(len(keys), span), "publish_acked_seconds", ingested.Seconds(),
		"lead_after_publish_ms", lead, "complete", complete, "early_fired_at", earlyDec}
	kv = append(kv, arrivals.KV()...)
	res := StormResult{Complete: complete, Received: received, Arrival: arrival, FiredAt: harness.Summarize(fired)}
	kv = append(kv, res.Arrival.KV("lateness_")...)
	kv = append(kv, "outbox_max_rows", maxRows, "outbox_max_oldest_age_ms", maxAge)
	b.rep.Line("result", kv...)
	b.rep.Line("result", append([]any{"peer", "timeoutd", "workload", "storm", "measured", "arrival_timeline"}, arrivals.TimelineKV(res.Arrival.P99)...)...)
	// CPU per command while ingesting, per expiry while firing; total is
	// the platform's (timeoutd, Postgres, NATS), the harness apart.
	kv = []any{"peer", "timeoutd", "workload", "storm", "measured", "cpu", "n", len(keys),
		"ingest_seconds", ingest.Seconds(), "ingest_held", held}
	kv = append(kv, cpus.PerUnit("ingest_us_per_command_", cpu[0], cpu[1], len(keys))...)
	kv = append(kv, "expiry_seconds", expiry.Seconds())
	kv = append(kv, cpus.PerUnit("expiry_us_per_expiry_", cpu[2], cpu[3], len(keys))...)
	b.rep.Line("result", kv...)
	pubMu.Lock()
	kv = []any{"peer", "timeoutd", "workload", "storm", "measured", "relay_publish_core_sub", "n", len(pub)}
	kv = append(kv, harness.Summarize(pub).KV("lateness_")...)
	pubMu.Unlock()
	b.rep.Line("result", kv...)
	// The target's own measure: PubAck minus deadline, from timeoutd's
	// histogram, whose buckets hold the target's bounds (5, 20, 100 ms). The
	// PubAck time of a batch is that of its last PubAck.
	kv = []any{"peer", "timeoutd", "workload", "storm", "measured", "puback_timeoutd_histogram", "n", acks.count}
	for _, le := range [][2]string{{"0.005", "5ms"}, {"0.02", "20ms"}, {"0.1", "100ms"}} {
		sh, err := acks.share(le[0])
		if err != nil {
			return res, err
		}
		kv = append(kv, "share_le_"+le[1], sh)
	}
	if acks.count > 0 {
		kv = append(kv, "lateness_mean_ms", 1000*acks.sum/acks.count)
	}
	b.rep.Line("result", kv...)
	kv = []any{"peer", "timeoutd", "workload", "storm", "measured", "fired_at_in_event", "n", len(keys)}
	kv = append(kv, res.FiredAt.KV("lateness_")...)
	b.rep.Line("result", kv...)
	if !complete {
		return res, fmt.Errorf("%w: %d of %d cancel events arrived within %s after the last deadline", harness.ErrIncomplete, received, len(keys), grace)
	}
	return res, nil
}
