package timeoutd

import (
	"context"
	"encoding/json"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ordertimeout/ordertimeout/internal/outbox"
	"github.com/ordertimeout/ordertimeout/internal/startstop"
	"github.com/ordertimeout/ordertimeout/pkg/events"
	"github.com/ordertimeout/ordertimeout/services/timeoutd/internal/schedule"
)

// Horizons of the upcoming buckets in Stats.
var horizons = []struct {
	label  string
	within time.Duration
}{{"next minute", time.Minute}, {"next 10 minutes", 10 * time.Minute}, {"next hour", time.Hour}}

// rateWindow is the number of one-second samples rates are computed over.
const rateWindow = 5

// Bucket counts the pending timeouts due within a horizon.
type Bucket struct {
	Label  string
	Within time.Duration
	Count  int64
}

// Stats is what the API shows of the service.
type Stats struct {
	Now     time.Time
	Ready   bool
	Pending int64
	// Totals since the process started.
	Scheduled, Cleared, Fired, Missed, DeadLettered uint64
	// Per-second rates over the last few seconds.
	ScheduledPerSec, ClearedPerSec, FiredPerSec float64
	// Outbox backlog, refreshed every second.
	OutboxRows   int64
	OutboxOldest time.Duration
	// Upcoming buckets, refreshed every second.
	Upcoming []Bucket
}

// counters are the totals behind Stats.
type counters struct{ scheduled, cleared, fired, missed, deadLettered uint64 }

// stats holds the counters, rate samples, recent expiries and the cached
// upcoming buckets and outbox backlog.
type stats struct {
	scheduled, cleared, fired, missed, deadLettered atomic.Uint64
	// refreshed counts the refreshes that changed the upcoming buckets or
	// the outbox rows, so that Generation changes with them too.
	refreshed atomic.Uint64

	mu       sync.Mutex
	samples  [rateWindow + 1]counters // ring of one-second samples
	sampleAt [rateWindow + 1]time.Time
	nSamples int
	upcoming []Bucket
	outbox   outbox.Stats
	recent   []events.Expiry // ring, newest at recent[(next-1)%len]
	next     int
	full     bool
}

func newStats(recent int) *stats { return &stats{recent: make([]events.Expiry, recent)} }

func (st *stats) totals() counters {
	return counters{st.scheduled.Load(), st.cleared.Load(), st.fired.Load(), st.missed.Load(), st.deadLettered.Load()}
}

// sampler samples the counters for the rates and refreshes the upcoming
// buckets (from the schedule) and the outbox backlog (from Postgres) every
// second.
type sampler struct {
	startstop.Base
	cfg   Config
	sched *schedule.Schedule
	relay Relay
	stats *stats
}

// Start samples until ctx ends or Stop.
func (sm *sampler) Start(ctx context.Context) { sm.Base.Start(ctx, sm.run) }

func (sm *sampler) run(ctx context.Context) {
	for {
		now := sm.cfg.Now()
		sm.stats.sample(now)
		sm.refresh(ctx, now)
		if !sleep(ctx, time.Second) {
			return
		}
	}
}

// refresh counts the upcoming buckets from the schedule and reads the
// outbox backlog from Postgres.
func (sm *sampler) refresh(ctx context.Context, now time.Time) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	hs := make([]time.Time, len(horizons))
	for i, h := range horizons {
		hs[i] = now.Add(h.within)
	}
	counts := sm.sched.DueBefore(hs)
	ob, err := sm.relay.Stats(ctx)
	if err != nil && ctx.Err() == nil {
		sm.cfg.Logger.Warn("read outbox backlog", "err", err)
	}
	st := sm.stats
	st.mu.Lock()
	defer st.mu.Unlock()
	changed := len(st.upcoming) != len(horizons)
	upcoming := make([]Bucket, len(horizons))
	for i, h := range horizons {
		upcoming[i] = Bucket{Label: h.label, Within: h.within, Count: counts[i]}
		changed = changed || st.upcoming[i].Count != counts[i]
	}
	st.upcoming = upcoming
	if err == nil {
		changed = changed || st.outbox.Rows != ob.Rows
		st.outbox = ob
	}
	if changed {
		st.refreshed.Add(1)
	}
}

func (st *stats) sample(now time.Time) {
	st.mu.Lock()
	defer st.mu.Unlock()
	i := st.nSamples % len(st.samples)
	st.samples[i], st.sampleAt[i] = st.totals(), now
	st.nSamples++
}

// Stats returns the current figures.
func (s *Service) Stats() Stats {
	st := s.stats
	t := st.totals()
	out := Stats{Now: s.cfg.Now().UTC(), Ready: s.IsReady(), Pending: int64(s.Pending()),
		Scheduled: t.scheduled, Cleared: t.cleared, Fired: t.fired, Missed: t.missed, DeadLettered: t.deadLettered}
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.nSamples >= 2 {
		newest := (st.nSamples - 1) % len(st.samples)
		oldest := max(0, st.nSamples-len(st.samples)) % len(st.samples)
		a, b := st.samples[oldest], st.samples[newest]
		if secs := st.sampleAt[newest].Sub(st.sampleAt[oldest]).Seconds(); secs > 0 {
			out.ScheduledPerSec = float64(b.scheduled-a.scheduled) / secs
			out.ClearedPerSec = float64(b.cleared-a.cleared) / secs
			out.FiredPerSec = float64(b.fired+b.missed-a.fired-a.missed) / secs
		}
	}
	out.OutboxRows, out.OutboxOldest = st.outbox.Rows, st.outbox.OldestAge
	out.Upcoming = append([]Bucket(nil), st.upcoming...)
	return out
}

// Generation changes whenever a counter changes, when a refresh changed
// the upcoming buckets or the outbox rows (deadlines move into a horizon as
// time passes, with no counter changing) and when the cluster view changed,
// so a stream of snapshots can skip sending when nothing happened.
func (s *Service) Generation() uint64 {
	t := s.stats.totals()
	return t.scheduled + t.cleared + t.fired + t.missed + t.deadLettered + s.stats.refreshed.Load() + s.view.gen.Load()
}

// Recent returns up to n recent expiries, newest first, without payloads.
func (s *Service) Recent(n int) []events.Expiry {
	st := s.stats
	st.mu.Lock()
	defer st.mu.Unlock()
	size := st.next
	if st.full {
		size = len(st.recent)
	}
	n = min(n, size)
	out := make([]events.Expiry, n)
	for i := range n {
		out[i] = st.recent[(st.next-1-i+len(st.recent))%len(st.recent)]
	}
	return out
}

// Published is the relay's OnPublished callback: it observes the lateness of
// each expiry event at its PubAck (ackedAt minus deadline) and records the
// batch's last events as recent expiries. It reads a handed-over event from
// its Tag and decodes only those the relay claimed from the table. Messages
// that are not expiry events are ignored.
func (s *Service) Published(batch []outbox.Message, ackedAt time.Time) {
	s.cfg.Logger.Debug("outbox batch published", "size", len(batch))
	st := s.stats
	keep := max(0, len(batch)-len(st.recent))
	recent := make([]events.Expiry, 0, len(batch)-keep)
	for i, m := range batch {
		e, ok := m.Tag.(*events.Expiry)
		if !ok {
			e = new(events.Expiry)
			if err := json.Unmarshal(m.Data, e); err != nil {
				continue
			}
			e.Payload = nil
		}
		s.m.FireLateness(ackedAt.Sub(e.Deadline))
		if i >= keep {
			recent = append(recent, *e)
		}
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	for _, e := range recent {
		st.recent[st.next] = e
		st.next++
		if st.next == len(st.recent) {
			st.next, st.full = 0, true
		}
	}
}
