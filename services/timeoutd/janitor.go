package timeoutd

import (
	"context"

	"github.com/ordertimeout/ordertimeout/internal/startstop"
)

// janitor retires expired tombstones (cleared and fired keys older than
// TombstoneTTL) into version marks in batches of JanitorBatch every
// JanitorInterval. It never deletes a key's version: a stale command must
// not resurrect the key, however late it comes.
type janitor struct {
	startstop.Base
	cfg   Config
	store Store
}

// Start sweeps until ctx ends or Stop.
func (j *janitor) Start(ctx context.Context) { j.Base.Start(ctx, j.run) }

func (j *janitor) run(ctx context.Context) {
	for sleep(ctx, j.cfg.JanitorInterval) {
		before := j.cfg.Now().Add(-j.cfg.TombstoneTTL)
		for total := 0; ; {
			n, err := j.store.RetireTombstones(ctx, before, j.cfg.JanitorBatch)
			if err != nil {
				if ctx.Err() == nil {
					j.cfg.Logger.Warn("retire tombstones", "err", err)
				}
				break
			}
			total += n
			if n < j.cfg.JanitorBatch {
				if total > 0 {
					j.cfg.Logger.Debug("tombstones retired", "count", total)
				}
				break
			}
		}
	}
}
