package harness

import (
	"slices"
	"testing"
	"time"
)

func TestTimeline(t *testing.T) {
	t.Parallel()
	first := time.Date(2026, 11, 26, 0, 0, 0, 0, time.UTC)
	tl := newTimeline(first, first.Add(1200*time.Millisecond)) // slots 0, 1, 2
	for _, e := range []struct {
		after, late time.Duration
	}{
		{0, 2 * time.Millisecond},
		{400 * time.Millisecond, 3 * time.Millisecond},
		{500 * time.Millisecond, 40 * time.Millisecond},
		{1200 * time.Millisecond, time.Millisecond},
		{-time.Millisecond, time.Second}, // before the first deadline: ignored
		{1500 * time.Millisecond, time.Second},
	} {
		tl.add(first.Add(e.after), e.late)
	}
	kv := tl.kv(10 * time.Millisecond)
	want := []any{"slot_ms", int64(500), "worst_ms", "3.0,40.0,1.0", "slots_over_p99", 1}
	if !slices.Equal(kv, want) {
		t.Errorf("kv = %v, want %v", kv, want)
	}
}
