package timeoutd

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/ordertimeout/ordertimeout/pkg/events"
)

// latencies records FireLateness observations.
type latencies struct {
	NopMetrics
	mu  sync.Mutex
	got []time.Duration
}

func (l *latencies) FireLateness(d time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.got = append(l.got, d)
}

func TestPublishedObservesLatenessAndKeepsRecent(t *testing.T) {
	t.Parallel()
	deadline := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		name   string
		recent int
		batch  int
		want   []string // Recent, newest first
	}{
		{"a batch within the ring", 10, 2, []string{"o-1", "o-0"}},
		{"a batch larger than the ring keeps its last", 2, 5, []string{"o-4", "o-3"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			m := &latencies{}
			st := &fakeStore{rows: map[string]Timeout{}}
			s, err := New(Config{Recent: tc.recent}, Deps{Store: st, Source: nopSource{}, DeadLetters: &fakeDLQ{}, Publisher: st,
				Leases: soleLeases{}, Metrics: m})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(s.sched.Stop)
			batch := make([]events.Expiry, tc.batch)
			for i := range batch {
				batch[i] = events.Expiry{Schema: events.SchemaVersion, Outcome: events.OutcomeFired, Key: fmt.Sprintf("o-%d", i),
					Version: 1, Deadline: deadline, FiredAt: deadline}
			}
			s.stats.published(batch, deadline.Add(7*time.Millisecond), m)
			if len(m.got) != tc.batch || m.got[0] != 7*time.Millisecond {
				t.Errorf("lateness observed = %v, want 7ms %d times", m.got, tc.batch)
			}
			var got []string
			for _, e := range s.Recent(10) {
				got = append(got, e.Key)
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("recent = %v, want %v", got, tc.want)
			}
		})
	}
}
