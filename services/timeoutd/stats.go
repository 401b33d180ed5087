package timeoutd

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ordertimeout/ordertimeout/internal/retry"
	"github.com/ordertimeout/ordertimeout/internal/startstop"
	"github.com/ordertimeout/ordertimeout/pkg/events"
	"github.com/ordertimeout/ordertimeout/services/timeoutd/internal/lease"
)

// rateWindow is the number of one-second samples rates are computed over.
const rateWindow = 5

// Stats is what the API shows of the service.
type Stats struct {
	Now     time.Time
	Ready   bool
	Pending int64
	// Totals since the process started.
	Scheduled, Cleared, Fired, Missed, DeadLettered uint64
	// Per-second rates over the last few seconds.
	ScheduledPerSec, ClearedPerSec, FiredPerSec float64
	// The fire path's backlog: expiry events fired and not yet marked
	// published (read, publishing, awaiting their PubAck or their mark),
	// and the age of the oldest since its fire. The timeout rows are the
	// outbox; these are the rows it holds for this process.
	OutboxRows   int64
	OutboxOldest time.Duration
	// The membership, since the process started: lease lapses (the leases
	// not renewed within the renew deadline: fires waited), and partitions
	// gained, lost (a renewal did not return them: taken by another
	// instance) and released (handed over, or given up on shutdown).
	LeaseLapses                                          uint64
	PartitionsGained, PartitionsLost, PartitionsReleased uint64
	// ClockResets counts the times the database's clock changed under the
	// heartbeats (another server after a failover, or a step back) and the
	// hold on the fires started over from the new one's samples.
	ClockResets uint64
	// ClockOffset is how far this instance's wall clock is ahead of the
	// database's (negative: behind), at the last heartbeat's midpoint;
	// fires are held by the least bound on it of the last few heartbeats.
	ClockOffset time.Duration
	// StandbyLag is how far the clock of the database's slowest standby
	// is behind the primary's, at most (lease.Beat.StandbyLag): the fires
	// wait that much longer, so that none is early by a standby's clock.
	StandbyLag time.Duration
}

// counters are the totals behind Stats.
type counters struct{ scheduled, cleared, fired, missed, deadLettered uint64 }

// stats holds the counters, rate samples and recent expiries.
type stats struct {
	scheduled, cleared, fired, missed, deadLettered atomic.Uint64
	members                                         lease.Counters // the membership's counters and clock offset; see Stats

	mu       sync.Mutex
	samples  [rateWindow + 1]counters // ring of one-second samples
	sampleAt [rateWindow + 1]time.Time
	nSamples int
	recent   []events.Expiry // ring, newest at recent[(next-1)%len]
	next     int
	full     bool
}

func newStats(recent int) *stats { return &stats{recent: make([]events.Expiry, recent)} }

func (st *stats) totals() counters {
	return counters{st.scheduled.Load(), st.cleared.Load(), st.fired.Load(), st.missed.Load(), st.deadLettered.Load()}
}

// sampler samples the counters for the rates every second.
type sampler struct {
	startstop.Base
	cfg   Config
	stats *stats
}

// Start samples until ctx ends or Stop.
func (sm *sampler) Start(ctx context.Context) { sm.Base.Start(ctx, sm.run) }

func (sm *sampler) run(ctx context.Context) {
	for {
		now := sm.cfg.Now()
		sm.stats.sample(now)
		if !retry.Sleep(ctx, time.Second) {
			return
		}
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
		Scheduled: t.scheduled, Cleared: t.cleared, Fired: t.fired, Missed: t.missed, DeadLettered: t.deadLettered,
		LeaseLapses: st.members.Lapses.Load(), PartitionsGained: st.members.Gained.Load(), PartitionsLost: st.members.Lost.Load(),
		PartitionsReleased: st.members.Released.Load(), ClockResets: st.members.ClockResets.Load(), ClockOffset: time.Duration(st.members.ClockAhead.Load()),
		StandbyLag: time.Duration(st.members.StandbyLag.Load())}
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
	out.OutboxRows, out.OutboxOldest = s.fire.backlog(s.cfg.Now())
	return out
}

// Generation changes whenever a counter changes and when the cluster view
// changed, so a stream of
// snapshots can skip sending when nothing happened. It does not change as
// time alone moves deadlines between the buckets of Deadlines.
func (s *Service) Generation() uint64 {
	t := s.stats.totals()
	return t.scheduled + t.cleared + t.fired + t.missed + t.deadLettered + s.view.gen.Load()
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

// published observes the lateness of each expiry event at its PubAck
// (ackedAt minus deadline) and records the batch's last events as recent
// expiries.
func (st *stats) published(batch []events.Expiry, ackedAt time.Time, m Metrics) {
	for _, e := range batch {
		m.FireLateness(ackedAt.Sub(e.Deadline))
	}
	batch = batch[max(0, len(batch)-len(st.recent)):]
	st.mu.Lock()
	defer st.mu.Unlock()
	for _, e := range batch {
		st.recent[st.next] = e
		st.next++
		if st.next == len(st.recent) {
			st.next, st.full = 0, true
		}
	}
}
