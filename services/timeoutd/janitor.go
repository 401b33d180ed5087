package timeoutd

import (
	"context"
	"time"

	"github.com/ordertimeout/ordertimeout/internal/retry"
	"github.com/ordertimeout/ordertimeout/internal/startstop"
	"github.com/ordertimeout/ordertimeout/services/timeoutd/internal/lease"
)

// janitor retires expired tombstones (cleared and fired keys older than
// TombstoneTTL) into version marks in batches of JanitorBatch every
// JanitorInterval, over the whole table, on the one instance that owns
// partition 0 (janitorPartition), fenced by its lease: the others do not
// race it on the same rows, and a former owner writes nothing. Without MarkRetention it never deletes a key's version:
// a stale command must not resurrect the key, however late it comes. With
// it, it deletes the marks older than MarkRetention plus MarkClockSkew:
// ingest refuses the commands issued before MarkRetention, so none that a
// deleted mark would have refused can pass.
type janitor struct {
	startstop.Base
	cfg   Config
	store Store
	own   *lease.Ownership
}

// janitorPartition is the partition whose owner sweeps.
const janitorPartition = 0

// Start sweeps until ctx ends or Stop.
func (j *janitor) Start(ctx context.Context) { j.Base.Start(ctx, j.run) }

func (j *janitor) run(ctx context.Context) {
	for retry.Sleep(ctx, j.cfg.JanitorInterval) {
		fence := j.own.Gate([]int{janitorPartition}).Fence()
		if len(fence.Leases) == 0 {
			continue // another instance sweeps
		}
		now := j.cfg.Now()
		j.sweep(ctx, "tombstones retired", fence, j.store.RetireTombstones, now.Add(-j.cfg.TombstoneTTL))
		if j.cfg.MarkRetention > 0 {
			j.sweep(ctx, "version marks forgotten", fence, j.store.ForgetMarks, now.Add(-j.cfg.MarkRetention-MarkClockSkew))
		}
	}
}

// sweep calls step in batches of JanitorBatch until one comes back short.
func (j *janitor) sweep(ctx context.Context, what string, fence lease.Fence, step func(context.Context, lease.Fence, time.Time, int) (int, error), before time.Time) {
	for total := 0; ; {
		n, err := step(ctx, fence, before, j.cfg.JanitorBatch)
		if err != nil {
			if ctx.Err() == nil {
				j.cfg.Logger.Warn(what, "err", err)
			}
			return
		}
		total += n
		if n < j.cfg.JanitorBatch {
			if total > 0 {
				j.cfg.Logger.Debug(what, "count", total)
			}
			return
		}
	}
}
