package schedule

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

func TestCountBefore(t *testing.T) {
	t.Parallel()
	from := time.Date(2026, 11, 25, 10, 0, 0, 0, time.UTC)
	sec := func(d time.Duration) time.Time { return from.Add(d) }
	tests := []struct {
		name       string
		bounds     []time.Time
		wantBefore []int64
	}{
		{"no bounds", nil, []int64{}},
		{"the overdue", []time.Time{from}, []int64{1}},
		{"within a second counts from its start", []time.Time{sec(900 * time.Millisecond), sec(2*time.Second + time.Millisecond)}, []int64{1, 2}},
		{"seconds", []time.Time{from, sec(time.Second), sec(2 * time.Second), sec(3 * time.Second), sec(6 * time.Second)}, []int64{1, 2, 2, 4, 5}},
		{"minutes and hours", []time.Time{sec(time.Minute), sec(59 * time.Minute), sec(2 * time.Hour), sec(26 * time.Hour)}, []int64{5, 5, 6, 7}},
		{"equal bounds", []time.Time{sec(time.Second), sec(time.Second)}, []int64{2, 2}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s, _ := newTest(t, 10, time.Now)
			held, err := s.Load([]Entry{{Key: "overdue", Version: 1, Deadline: from.Add(-time.Minute)}}, from)
			if err != nil || len(held) != 1 {
				t.Fatalf("load: held %d, %v", len(held), err)
			}
			s.Apply([]Change{
				set("a", 1, sec(100*time.Millisecond)),
				set("b", 1, sec(2*time.Second)),
				set("c", 1, sec(2*time.Second+999*time.Millisecond)),
				set("d", 1, sec(5*time.Second)),
				set("e", 1, sec(time.Hour)),
				set("e", 2, sec(90*time.Minute)), // moved
				set("f", 1, sec(3*time.Second)),
				{Entry: Entry{Key: "f", Version: 2}, Clear: true},
				set("g", 1, sec(25*time.Hour+30*time.Second)),
			})
			var latest time.Time
			before, total := s.CountBefore(func(l time.Time) []time.Time { latest = l; return tt.bounds })
			if !slices.Equal(before, tt.wantBefore) || total != 7 || !latest.Equal(sec(25*time.Hour+30*time.Second)) {
				t.Errorf("CountBefore = %v, %d, latest %v; want %v, 7, latest %v", before, total, latest, tt.wantBefore, sec(25*time.Hour+30*time.Second))
			}
		})
	}
}

func TestCountBeforeEmpty(t *testing.T) {
	t.Parallel()
	s, _ := newTest(t, 10, time.Now)
	before, total := s.CountBefore(func(latest time.Time) []time.Time {
		if !latest.IsZero() {
			t.Errorf("latest = %v with nothing held, want the zero time", latest)
		}
		return []time.Time{time.Now()}
	})
	if !slices.Equal(before, []int64{0}) || total != 0 {
		t.Errorf("CountBefore = %v, %d; want [0], 0", before, total)
	}
}

// TestCountBeforeAgainstAScan compares the counts by second, minute and
// hour with a plain count of random deadlines over two days, at random
// bounds.
func TestCountBeforeAgainstAScan(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 2))
	from := time.Date(2026, 11, 25, 10, 17, 23, 0, time.UTC)
	const n = 2000
	s, _ := newTest(t, n, time.Now)
	changes := make([]Change, n)
	deadlines := make([]time.Time, n)
	for i := range changes {
		deadlines[i] = from.Add(time.Duration(rng.Int64N(int64(48 * time.Hour))))
		changes[i] = set(fmt.Sprintf("k%d", i), 1, deadlines[i])
	}
	s.Apply(changes)
	for round := range 200 {
		bounds := make([]time.Time, 1+rng.IntN(30))
		for i := range bounds {
			bounds[i] = from.Add(time.Duration(rng.Int64N(int64(50*time.Hour))) - time.Hour)
		}
		slices.SortFunc(bounds, func(a, b time.Time) int { return a.Compare(b) })
		got, total := s.CountBefore(func(time.Time) []time.Time { return bounds })
		for i, b := range bounds {
			var want int64
			for _, d := range deadlines {
				if d.Unix() < b.Unix() {
					want++
				}
			}
			if got[i] != want || total != n {
				t.Fatalf("round %d, bound %v: %d before, total %d; want %d, %d", round, b, got[i], total, want, n)
			}
		}
	}
}

// BenchmarkCountBefore measures one census of 1,000,000 timeouts with the
// bounds a snapshot asks for (25 bucket bounds and 3 horizons), the
// deadlines spread over an hour (3,600 distinct seconds) and over a week
// (604,800):
//
//	go test -run '^$' -bench CountBefore ./services/timeoutd/internal/schedule
func BenchmarkCountBefore(b *testing.B) {
	const n = 1_000_000
	for _, tc := range []struct {
		spread, width time.Duration
	}{{time.Hour, 5 * time.Minute}, {7 * 24 * time.Hour, time.Hour}} {
		b.Run(fmt.Sprintf("pending=1M/spread=%s", tc.spread), func(b *testing.B) {
			s, err := New(Config{Tick: time.Millisecond, MaxPending: n, OnDue: func([]Due) {}})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Stop()
			from := time.Now().Add(time.Hour).Truncate(time.Second).Add(17 * time.Second)
			changes := make([]Change, n)
			for i := range changes {
				changes[i] = set(fmt.Sprintf("ord-%010d", i), 1, from.Add(tc.spread/n*time.Duration(i)))
			}
			if got, _ := s.Apply(changes); got != n {
				b.Fatalf("applied %d of %d", got, n)
			}
			var bounds []time.Time
			for i := range 25 {
				bounds = append(bounds, from.Add(time.Duration(i)*tc.width))
			}
			bounds = append(bounds, from.Add(time.Minute), from.Add(10*time.Minute), from.Add(time.Hour))
			slices.SortFunc(bounds, func(a, b time.Time) int { return a.Compare(b) })
			b.ResetTimer()
			for b.Loop() {
				s.CountBefore(func(time.Time) []time.Time { return bounds })
			}
		})
	}
}
