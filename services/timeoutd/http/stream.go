package http

import (
	"context"
	"encoding/json"
	"net/http"
	"time"

	"github.com/ordertimeout/ordertimeout/services/timeoutd"
	"github.com/ordertimeout/ordertimeout/services/timeoutd/api"
)

// snapshot builds the state the dashboard shows.
func (s *server) snapshot(ctx context.Context, soonest, recent int) (api.Snapshot, error) {
	p, err := s.page(ctx, timeoutd.Query{Limit: soonest})
	if err != nil {
		return api.Snapshot{}, err
	}
	return api.Snapshot{Stats: s.statsToAPI(s.svc.Stats()), Soonest: p.Items, Recent: s.recent(recent)}, nil
}

// stream serves /api/v1/stream: a full "snapshot" event at once (so a
// reconnecting client resyncs), then one whenever the counters changed, at
// most one per SnapshotInterval and at least one per ResyncDefault, and a
// comment line after Heartbeat of silence.
func (s *server) stream(w http.ResponseWriter, r *http.Request) {
	soonest, err := intParam(r, "soonest", 20, api.LimitMax)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	recent, err := intParam(r, "recent", 20, api.LimitMax)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	rc := http.NewResponseController(w)
	_ = rc.SetWriteDeadline(time.Time{}) // a stream outlives the server's WriteTimeout
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)

	ctx := r.Context()
	send := func() bool {
		snap, err := s.snapshot(ctx, soonest, recent)
		if err != nil {
			if ctx.Err() == nil {
				s.log.Warn("build snapshot", "err", err)
			}
			return ctx.Err() == nil // skip this one, try at the next tick
		}
		data, _ := json.Marshal(snap)
		if _, err := w.Write(append(append([]byte("event: snapshot\ndata: "), data...), '\n', '\n')); err != nil {
			return false
		}
		return rc.Flush() == nil
	}
	if !send() {
		return
	}
	tick := time.NewTicker(s.cfg.SnapshotInterval)
	defer tick.Stop()
	gen, lastSent, lastWrite := s.svc.Generation(), time.Now(), time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-tick.C:
			if g := s.svc.Generation(); g != gen || now.Sub(lastSent) >= ResyncDefault {
				gen, lastSent, lastWrite = g, now, now
				if !send() {
					return
				}
			} else if now.Sub(lastWrite) >= s.cfg.Heartbeat {
				lastWrite = now
				if _, err := w.Write([]byte(": heartbeat\n\n")); err != nil || rc.Flush() != nil {
					return
				}
			}
		}
	}
}
