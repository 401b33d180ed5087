package harness

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// Arrivals collects a storm's expiry events at an independent consumer,
// whichever peer fired them: each key is expected once, at or after its
// deadline. It is safe for concurrent use.
type Arrivals struct {
	mu       sync.Mutex
	want     map[string]struct{}
	late     []time.Duration
	timeline *timeline
	early    int
	dupes    int
	bad      int
	firstBad string // the first undecodable event: its error and data
	done     chan struct{}
}

// NewArrivals expects one event for each of keys, whose deadlines span
// deadlines[0] to deadlines[len-1].
func NewArrivals(keys []string, deadlines []time.Time) *Arrivals {
	a := &Arrivals{want: make(map[string]struct{}, len(keys)), late: make([]time.Duration, 0, len(keys)),
		timeline: newTimeline(deadlines[0], deadlines[len(deadlines)-1]), done: make(chan struct{})}
	for _, k := range keys {
		a.want[k] = struct{}{}
	}
	return a
}

// Add records the event of key, due at deadline, arriving at now. It
// reports whether the event was expected: false for a duplicate or a key
// of another storm, which it counts as a duplicate.
func (a *Arrivals) Add(key string, deadline, now time.Time) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, ok := a.want[key]; !ok {
		a.dupes++
		return false
	}
	delete(a.want, key)
	late := now.Sub(deadline)
	if late < 0 {
		a.early++
	}
	a.late = append(a.late, late)
	a.timeline.add(deadline, late)
	if len(a.want) == 0 {
		close(a.done)
	}
	return true
}

// Undecodable counts an event the consumer could not decode, keeping the
// first one's data and error for the report: an event refused by the
// contract's decoder (a fired_at before its deadline among the reasons)
// must be told from a broken message.
func (a *Arrivals) Undecodable(data []byte, err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.bad == 0 {
		a.firstBad = fmt.Sprintf("%v: %.300s", err, data)
	}
	a.bad++
}

// Done is closed once every expected event arrived.
func (a *Arrivals) Done() <-chan struct{} { return a.done }

// Wait returns once every expected event arrived (true), or at giveUp
// (false), or when ctx ends (its error).
func (a *Arrivals) Wait(ctx context.Context, giveUp time.Time) (bool, error) {
	select {
	case <-a.done: // before the timer: it may be due already
		return true, nil
	default:
	}
	t := time.NewTimer(time.Until(giveUp))
	defer t.Stop()
	select {
	case <-a.done:
		return true, nil
	case <-t.C:
		return false, nil
	case <-ctx.Done():
		return false, ctx.Err()
	}
}

// Summary returns how many events arrived and the lateness of their
// arrival against their deadlines.
func (a *Arrivals) Summary() (int, Summary) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.late), Summarize(a.late)
}

// KV returns the counts a storm's result line reports: received, early
// (arrived before their deadline: must be 0), duplicates and undecodable.
func (a *Arrivals) KV() []any {
	a.mu.Lock()
	defer a.mu.Unlock()
	kv := []any{"received", len(a.late), "early", a.early, "duplicates", a.dupes, "undecodable", a.bad}
	if a.bad > 0 {
		kv = append(kv, "undecodable_first", a.firstBad)
	}
	return kv
}

// TimelineKV returns the worst arrival lateness of each TimelineSlot of
// deadlines (see timeline), and how many slots exceed bound.
func (a *Arrivals) TimelineKV(bound time.Duration) []any {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.timeline.kv(bound)
}
