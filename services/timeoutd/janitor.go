package timeoutd

import "context"

// runJanitor retires expired tombstones (cleared and fired keys older than
// TombstoneTTL) into version marks in batches of JanitorBatch every
// JanitorInterval, until ctx ends. It never deletes a key's version: a
// stale command must not resurrect the key, however late it comes.
func (s *Service) runJanitor(ctx context.Context) {
	for sleep(ctx, s.cfg.JanitorInterval) {
		before := s.cfg.Now().Add(-s.cfg.TombstoneTTL)
		for total := 0; ; {
			n, err := s.store.RetireTombstones(ctx, before, s.cfg.JanitorBatch)
			if err != nil {
				if ctx.Err() == nil {
					s.cfg.Logger.Warn("retire tombstones", "err", err)
				}
				break
			}
			total += n
			if n < s.cfg.JanitorBatch {
				if total > 0 {
					s.cfg.Logger.Debug("tombstones retired", "count", total)
				}
				break
			}
		}
	}
}
