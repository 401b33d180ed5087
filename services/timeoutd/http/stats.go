package http

import (
	"net/http"

	"github.com/ordertimeout/ordertimeout/services/timeoutd/api"
)

// stats serves /api/v1/stats.
func (s *server) stats(w http.ResponseWriter, _ *http.Request) {
	s.json(w, s.statsNow())
}

// statsNow returns the service's figures with its pending timeouts counted
// by deadline at the same instant: Pending is the count's total, so the
// histogram always adds up to it. The count costs tens of microseconds
// with a million pending (timeoutd.Service.Deadlines).
func (s *server) statsNow() api.Stats {
	st := s.svc.Stats()
	d := s.svc.Deadlines(st.Now)
	out := api.Stats{OperatorActions: s.cfg.Operator.Enabled(), Now: st.Now, Ready: st.Ready, Pending: d.Pending,
		Totals: api.Counters{Scheduled: st.Scheduled, Cleared: st.Cleared, Fired: st.Fired, Missed: st.Missed, DeadLettered: st.DeadLettered},
		Rates:  api.Rates{ScheduledPerSec: st.ScheduledPerSec, ClearedPerSec: st.ClearedPerSec, FiredPerSec: st.FiredPerSec},
		Outbox: api.Outbox{Rows: st.OutboxRows, OldestAgeMs: float64(st.OutboxOldest) / 1e6},
		Deadlines: api.Deadlines{From: d.From, WidthMs: d.Width.Milliseconds(), Due: d.Due,
			Counts: d.Counts, Later: d.Later},
	}
	out.Upcoming = make([]api.Bucket, len(d.Upcoming))
	for i, b := range d.Upcoming {
		out.Upcoming[i] = api.Bucket{Label: b.Label, WithinMs: b.Within.Milliseconds(), Count: b.Count}
	}
	return out
}
