package natschedbench

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ordertimeout/ordertimeout/bench/internal/harness"
)

// Cancel schedules one message per key at deadlines (which lie at least
// the time the purges take in the future), cancels every other one by
// purging its schedule's subject, as a NATS user cancels a schedule, with
// concurrency requests in flight, and prints the purges' rate and
// nats-server's CPU per cancel. It then waits until grace after the last
// deadline and prints how many of the kept schedules fired (all must) and
// how many of the cancelled ones did (none may).
func (b *Bench) Cancel(ctx context.Context, keys []string, deadlines []time.Time, concurrency int, grace time.Duration) error {
	var kept, cancelled []string
	var keptDeadlines []time.Time
	for i, k := range keys {
		if i%2 == 0 {
			kept, keptDeadlines = append(kept, k), append(keptDeadlines, deadlines[i])
		} else {
			cancelled = append(cancelled, k)
		}
	}
	gone := make(map[string]bool, len(cancelled))
	for _, k := range cancelled {
		gone[k] = true
	}
	arrivals := harness.NewArrivals(kept, keptDeadlines)
	var firedCancelled atomic.Int64
	cc, err := b.consume(ctx, arrivals, func(d deadline, now, _ time.Time) {
		if gone[d.Key] {
			firedCancelled.Add(1)
			return
		}
		arrivals.Add(d.Key, d.Deadline, now)
	})
	if err != nil {
		return err
	}
	defer cc.Stop()
	if err := b.schedule(ctx, keys, deadlines); err != nil {
		return err
	}
	cpus := b.cpus()
	cpu0, err := cpus.Sample()
	if err != nil {
		return fmt.Errorf("cancel: %w", err)
	}
	start := time.Now()
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(concurrency)
	for _, k := range cancelled {
		g.Go(func() error {
			if err := b.stream.Purge(gctx, jetstream.WithPurgeSubject(SchedulePrefix+k)); err != nil {
				return fmt.Errorf("purge the schedule of %s: %w", k, err)
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return err
	}
	took := time.Since(start)
	cpu1, err := cpus.Sample()
	if err != nil {
		return fmt.Errorf("cancel: %w", err)
	}
	late := time.Until(deadlines[0]) < 0
	complete, err := arrivals.Wait(ctx, deadlines[len(deadlines)-1].Add(grace))
	if err != nil {
		return err
	}
	kv := []any{"peer", "natsched", "workload", "cancel", "scheduled", len(keys), "cancelled", len(cancelled), "concurrency", concurrency,
		"cancel_seconds", took.Seconds(), "cancels_per_sec", harness.PerSec(len(cancelled), took), "purges_ended_after_first_deadline", late}
	kv = append(kv, cpus.PerUnit("us_per_cancel_", cpu0, cpu1, len(cancelled))...)
	kv = append(kv, "kept_complete", complete, "fired_after_cancel", firedCancelled.Load())
	kv = append(kv, arrivals.KV()...)
	b.rep.Line("result", kv...)
	if !complete {
		return fmt.Errorf("%w: kept schedules missing %s after the last deadline", harness.ErrIncomplete, grace)
	}
	if n := firedCancelled.Load(); n > 0 {
		return fmt.Errorf("natsched: %d cancelled schedules fired", n)
	}
	return nil
}

// Bytes schedules one message per key at deadlines (far in the future),
// then prints the stream's bytes on disk and nats-server's RSS growth
// divided by the schedules pending, and purges the stream.
func (b *Bench) Bytes(ctx context.Context, keys []string, deadlines []time.Time) error {
	rss0, err := harness.ReadMemory(b.cfg.PID)
	if err != nil {
		return err
	}
	if err := b.schedule(ctx, keys, deadlines); err != nil {
		return err
	}
	info, err := b.stream.Info(ctx)
	if err != nil {
		return fmt.Errorf("stream info: %w", err)
	}
	rss1, err := harness.ReadMemory(b.cfg.PID)
	if err != nil {
		return err
	}
	n := float64(len(keys))
	b.rep.Line("result", "peer", "natsched", "workload", "bytes", "pending", len(keys), "stream_bytes", info.State.Bytes,
		"bytes_per_pending", float64(info.State.Bytes)/n, "rss_mb", float64(rss1.RSSBytes)/(1<<20),
		"rss_bytes_per_pending", (float64(rss1.RSSBytes)-float64(rss0.RSSBytes))/n, "hwm_mb", float64(rss1.HWMBytes)/(1<<20))
	return b.Reset(ctx)
}
