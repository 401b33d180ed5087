package harness

import (
	"strconv"
	"strings"
	"time"
)

// TimelineSlot is the width of a storm timeline's slot.
const TimelineSlot = 500 * time.Millisecond

// timeline keeps, for each slot of a storm's deadlines, the worst lateness
// of the events due in it: a stall shows as a few slots far later than
// the others, a slower machine as every slot later.
type timeline struct {
	first time.Time
	worst []time.Duration
}

// newTimeline returns the timeline of deadlines from first to last.
func newTimeline(first, last time.Time) *timeline {
	return &timeline{first: first, worst: make([]time.Duration, int(last.Sub(first)/TimelineSlot)+1)}
}

// add records an event due at deadline that was late by late; a deadline
// outside the timeline is ignored.
func (t *timeline) add(deadline time.Time, late time.Duration) {
	if d := deadline.Sub(t.first); d >= 0 && int(d/TimelineSlot) < len(t.worst) {
		t.worst[d/TimelineSlot] = max(t.worst[d/TimelineSlot], late)
	}
}

// kv returns the slot width, each slot's worst lateness in milliseconds
// (comma-separated), and how many slots hold an event later than bound.
func (t *timeline) kv(bound time.Duration) []any {
	ms := make([]float64, len(t.worst))
	over := 0
	for i, w := range t.worst {
		ms[i] = float64(w) / float64(time.Millisecond)
		if w > bound {
			over++
		}
	}
	return []any{"slot_ms", TimelineSlot.Milliseconds(), "worst_ms", JoinFloats(ms, 1), "slots_over_p99", over}
}

// JoinFloats formats vs with prec decimals, comma-separated.
func JoinFloats(vs []float64, prec int) string {
	s := make([]string, len(vs))
	for i, v := range vs {
		s[i] = strconv.FormatFloat(v, 'f', prec, 64)
	}
	return strings.Join(s, ",")
}
