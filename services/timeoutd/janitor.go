package timeoutd

import "context"

// runJanitor deletes expired tombstones (cleared and fired keys older than
// TombstoneTTL) in batches of JanitorBatch every JanitorInterval, until ctx
// ends.
func (s *Service) runJanitor(ctx context.Context) {
	for sleep(ctx, s.cfg.JanitorInterval) {
		before := s.cfg.Now().Add(-s.cfg.TombstoneTTL)
		for total := 0; ; {
			n, err := s.store.DeleteTombstones(ctx, before, s.cfg.JanitorBatch)
			if err != nil {
				if ctx.Err() == nil {
					s.cfg.Logger.Warn("delete tombstones", "err", err)
				}
				break
			}
			total += n
			if n < s.cfg.JanitorBatch {
				if total > 0 {
					s.cfg.Logger.Debug("tombstones deleted", "count", total)
				}
				break
			}
		}
	}
}
