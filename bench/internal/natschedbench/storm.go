package natschedbench

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/ordertimeout/ordertimeout/bench/internal/harness"
)

// Storm publishes one schedule per key at deadlines (which lie in the
// future), waits for every fired message at an independent ordered
// consumer and prints, as timeoutdbench.Storm does for timeoutd, the
// lateness of each message's arrival against its deadline (early must be
// 0), its worst per 500 ms of deadlines, the lateness of the time the
// server stored it, and the CPU time of nats-server per schedule, from
// the first publish to the last PubAck, and per expiry, from the first
// deadline until the last message arrived. Messages still missing grace
// after the last deadline make it return an error wrapping
// harness.ErrIncomplete, with what it measured.
func (b *Bench) Storm(ctx context.Context, keys []string, deadlines []time.Time, grace time.Duration) (harness.Summary, error) {
	arrivals := harness.NewArrivals(keys, deadlines)
	var (
		mu     sync.Mutex
		stored = make([]time.Duration, 0, len(keys))
	)
	cc, err := b.consume(ctx, arrivals, func(d deadline, now, at time.Time) {
		if !arrivals.Add(d.Key, d.Deadline, now) {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		stored = append(stored, at.Sub(d.Deadline))
	})
	if err != nil {
		return harness.Summary{}, err
	}
	defer cc.Stop()
	cpus := b.cpus()
	var cpu [4]harness.CPUSample // schedules from, to; expiry from, to
	if cpu[0], err = cpus.Sample(); err != nil {
		return harness.Summary{}, fmt.Errorf("storm: %w", err)
	}
	start := time.Now()
	if err := b.schedule(ctx, keys, deadlines); err != nil {
		return harness.Summary{}, err
	}
	published := time.Since(start)
	lead := time.Until(deadlines[0])
	if cpu[1], err = cpus.Sample(); err != nil {
		return harness.Summary{}, fmt.Errorf("storm: %w", err)
	}
	if err := harness.SleepUntil(ctx, deadlines[0]); err != nil {
		return harness.Summary{}, err
	}
	expiryStart := time.Now()
	if cpu[2], err = cpus.Sample(); err != nil {
		return harness.Summary{}, fmt.Errorf("storm: %w", err)
	}
	last := deadlines[len(deadlines)-1]
	complete, err := arrivals.Wait(ctx, last.Add(grace))
	if err != nil {
		return harness.Summary{}, err
	}
	expiry := time.Since(expiryStart)
	if cpu[3], err = cpus.Sample(); err != nil {
		return harness.Summary{}, fmt.Errorf("storm: %w", err)
	}
	received, arrival := arrivals.Summary()
	kv := []any{"peer", "natsched", "workload", "storm", "measured", "arrival_at_consumer", "n", len(keys),
		"due_per_sec", harness.PerSec(len(keys), last.Sub(deadlines[0])), "publish_acked_seconds", published.Seconds(),
		"lead_after_publish_ms", lead, "complete", complete}
	kv = append(kv, arrivals.KV()...)
	kv = append(kv, arrival.KV("lateness_")...)
	b.rep.Line("result", kv...)
	b.rep.Line("result", append([]any{"peer", "natsched", "workload", "storm", "measured", "arrival_timeline"}, arrivals.TimelineKV(arrival.P99)...)...)
	mu.Lock()
	kv = append([]any{"peer", "natsched", "workload", "storm", "measured", "stored_at", "n", len(stored)}, harness.Summarize(stored).KV("lateness_")...)
	mu.Unlock()
	b.rep.Line("result", kv...)
	kv = []any{"peer", "natsched", "workload", "storm", "measured", "cpu", "n", len(keys), "ingest_seconds", published.Seconds()}
	kv = append(kv, cpus.PerUnit("ingest_us_per_command_", cpu[0], cpu[1], len(keys))...)
	kv = append(kv, "expiry_seconds", expiry.Seconds())
	kv = append(kv, cpus.PerUnit("expiry_us_per_expiry_", cpu[2], cpu[3], len(keys))...)
	b.rep.Line("result", kv...)
	if !complete {
		return arrival, fmt.Errorf("%w: %d of %d fired messages arrived within %s after the last deadline", harness.ErrIncomplete, received, len(keys), grace)
	}
	return arrival, nil
}
