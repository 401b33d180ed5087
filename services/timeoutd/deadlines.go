package timeoutd

import (
	"slices"
	"time"
)

// Shape of the histogram of pending deadlines (Deadlines).
const (
	// DeadlineHorizon is how far ahead Deadlines counts bucket by bucket;
	// the deadlines beyond it share one count, Later.
	DeadlineHorizon = 24 * time.Hour
	// DeadlineBucketsMax bounds the number of buckets of Deadlines.
	DeadlineBucketsMax = 24
)

// deadlineWidths are the bucket widths Deadlines chooses from, narrowest
// first; DeadlineBucketsMax of the widest reach DeadlineHorizon.
var deadlineWidths = []time.Duration{
	time.Second, 5 * time.Second, 10 * time.Second, 30 * time.Second,
	time.Minute, 5 * time.Minute, 10 * time.Minute, 30 * time.Minute, time.Hour,
}

// horizons of Deadlines.Upcoming.
var horizons = []struct {
	label  string
	within time.Duration
}{{"next minute", time.Minute}, {"next 10 minutes", 10 * time.Minute}, {"next hour", time.Hour}}

// Bucket counts the pending timeouts due within a horizon, the overdue
// included.
type Bucket struct {
	Label  string
	Within time.Duration
	Count  int64
}

// Deadlines is the pending timeouts counted by deadline at one instant, so
// that Due, Counts and Later add up to Pending. Deadlines are counted by
// their second: a deadline within From's second is in the first bucket.
type Deadlines struct {
	// From is the start of the first bucket: the instant of the count,
	// truncated to the second.
	From time.Time
	// Width is the buckets' width: the narrowest of 1s, 5s, 10s, 30s, 1m,
	// 5m, 10m, 30m and 1h of which DeadlineBucketsMax buckets reach the
	// latest deadline or DeadlineHorizon, whichever is sooner.
	Width time.Duration
	// Due counts the timeouts whose deadline is before From's second: due,
	// being fired (or held by recovery).
	Due int64
	// Counts[i] counts the deadlines in [From+i×Width, From+(i+1)×Width);
	// the last bucket reaches the latest deadline or DeadlineHorizon.
	Counts []int64
	// Later counts the deadlines at or after From+len(Counts)×Width: those
	// beyond DeadlineHorizon.
	Later int64
	// Pending is every timeout held (what Service.Pending returned at the
	// same instant).
	Pending int64
	// Upcoming are the cumulative counts of the next minute, 10 minutes and
	// hour, for API clients that predate the histogram.
	Upcoming []Bucket
}

// Deadlines counts the pending timeouts by deadline at now, in one pass
// over the in-memory schedule's counts by deadline hour and a bounded
// number of lookups (schedule.CountBefore), never a pass over the
// timeouts nor a read of Postgres. The HTTP API calls it once
// per snapshot it builds and per /api/v1/stats.
func (s *Service) Deadlines(now time.Time) Deadlines {
	d := Deadlines{From: now.UTC().Truncate(time.Second)}
	var (
		bounds []time.Time
		n      int
	)
	bucketStart := func(i int) time.Time { return d.From.Add(time.Duration(i) * d.Width) }
	before, total := s.sched.CountBefore(func(latest time.Time) []time.Time {
		d.Width, n = bucketsFor(d.From, latest)
		bounds = make([]time.Time, 0, n+1+len(horizons))
		for i := range n + 1 {
			bounds = append(bounds, bucketStart(i))
		}
		for _, h := range horizons {
			bounds = append(bounds, d.From.Add(h.within))
		}
		slices.SortFunc(bounds, time.Time.Compare)
		bounds = slices.CompactFunc(bounds, time.Time.Equal)
		return bounds
	})
	// countBefore is the count of deadlines before t, one of bounds.
	countBefore := func(t time.Time) int64 {
		i, _ := slices.BinarySearchFunc(bounds, t, time.Time.Compare)
		return before[i]
	}
	d.Pending, d.Due = total, countBefore(d.From)
	d.Counts = make([]int64, n)
	for i := range n {
		d.Counts[i] = countBefore(bucketStart(i+1)) - countBefore(bucketStart(i))
	}
	d.Later = total - countBefore(bucketStart(n))
	d.Upcoming = make([]Bucket, len(horizons))
	for i, h := range horizons {
		d.Upcoming[i] = Bucket{Label: h.label, Within: h.within, Count: countBefore(d.From.Add(h.within))}
	}
	return d
}

// bucketsFor returns the width of the buckets from from that reach the
// latest deadline second (or DeadlineHorizon) and how many there are; none
// when the latest deadline is before from or nothing is pending.
func bucketsFor(from, latest time.Time) (width time.Duration, n int) {
	if latest.Before(from) {
		return deadlineWidths[0], 0
	}
	span := min(latest.Sub(from)+time.Second, DeadlineHorizon)
	for _, w := range deadlineWidths {
		if n := int((span + w - 1) / w); n <= DeadlineBucketsMax {
			return w, n
		}
	}
	return deadlineWidths[len(deadlineWidths)-1], DeadlineBucketsMax
}
