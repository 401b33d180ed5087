package timeoutd

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

func TestDeadlinesFitWhatIsPending(t *testing.T) {
	t.Parallel()
	// An hour ahead of the wheel's clock, so nothing fires meanwhile.
	now := time.Now().Add(time.Hour).UTC().Truncate(time.Second).Add(400 * time.Millisecond)
	from := now.Truncate(time.Second)
	tests := []struct {
		name      string
		deadlines []time.Duration // after now
		width     time.Duration
		due       int64
		counts    []int64
		later     int64
		upcoming  []int64 // next minute, 10 minutes, hour
	}{
		{"nothing pending", nil, time.Second, 0, []int64{}, 0, []int64{0, 0, 0}},
		{"all due", []time.Duration{-2 * time.Second, -time.Minute}, time.Second, 2, []int64{}, 0, []int64{2, 2, 2}},
		{"seconds", []time.Duration{-5 * time.Second, 100 * time.Millisecond, 3 * time.Second, 3200 * time.Millisecond, 9 * time.Second},
			time.Second, 1, []int64{1, 0, 0, 2, 0, 0, 0, 0, 0, 1}, 0, []int64{5, 5, 5}},
		{"minutes", []time.Duration{30 * time.Second, 5 * time.Minute, 50 * time.Minute},
			5 * time.Minute, 0, []int64{1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 1}, 0, []int64{1, 2, 3}},
		{"beyond a day", []time.Duration{2 * time.Hour, 30 * time.Hour},
			time.Hour, 0, append(make([]int64, 2), append([]int64{1}, make([]int64, 21)...)...), 1, []int64{0, 0, 0}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s, _, _ := newTestService(t, newClock(now))
			changes := make([]Change, len(tt.deadlines))
			for i, d := range tt.deadlines {
				changes[i] = Change{Key: fmt.Sprintf("o-%d", i), Version: 1, Deadline: now.Add(d)}
			}
			applyOwned(s, changes)
			got := s.Deadlines(now)
			if !got.From.Equal(from) || got.Width != tt.width || got.Due != tt.due || !slices.Equal(got.Counts, tt.counts) || got.Later != tt.later {
				t.Errorf("Deadlines = from %v, width %v, due %d, counts %v, later %d; want from %v, width %v, due %d, counts %v, later %d",
					got.From, got.Width, got.Due, got.Counts, got.Later, from, tt.width, tt.due, tt.counts, tt.later)
			}
			sum := got.Due + got.Later
			for _, c := range got.Counts {
				sum += c
			}
			if sum != got.Pending || got.Pending != int64(len(tt.deadlines)) {
				t.Errorf("counts add up to %d, pending %d; want both %d", sum, got.Pending, len(tt.deadlines))
			}
			var upcoming []int64
			for _, b := range got.Upcoming {
				upcoming = append(upcoming, b.Count)
			}
			if !slices.Equal(upcoming, tt.upcoming) {
				t.Errorf("upcoming = %+v, want counts %v", got.Upcoming, tt.upcoming)
			}
		})
	}
}

func TestBucketsFor(t *testing.T) {
	t.Parallel()
	from := time.Date(2026, 11, 25, 10, 0, 0, 0, time.UTC)
	tests := []struct {
		name   string
		latest time.Time
		width  time.Duration
		n      int
	}{
		{"nothing pending", time.Time{}, time.Second, 0},
		{"latest already due", from.Add(-time.Second), time.Second, 0},
		{"latest in the first second", from, time.Second, 1},
		{"24 seconds", from.Add(23 * time.Second), time.Second, 24},
		{"25 seconds", from.Add(24 * time.Second), 5 * time.Second, 5},
		{"12 minutes", from.Add(11*time.Minute + 59*time.Second), 30 * time.Second, 24},
		{"an hour", from.Add(time.Hour), 5 * time.Minute, 13},
		{"a day", from.Add(24*time.Hour - time.Second), time.Hour, 24},
		{"a week", from.Add(7 * 24 * time.Hour), time.Hour, 24},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if w, n := bucketsFor(from, tt.latest); w != tt.width || n != tt.n {
				t.Errorf("bucketsFor = %v, %d; want %v, %d", w, n, tt.width, tt.n)
			}
		})
	}
}
