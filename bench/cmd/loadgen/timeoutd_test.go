package main

import (
	"testing"
	"time"

	"github.com/ordertimeout/ordertimeout/pkg/events"
)

func TestSpread(t *testing.T) {
	t.Parallel()
	start := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	tests := []struct {
		name string
		n    int
		span time.Duration
	}{
		{"one", 1, 10 * time.Second},
		{"storm", 200_000, 10 * time.Second},
		{"uneven", 7, time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			keys, deadlines := spread("s1", tt.n, start, tt.span)
			if len(keys) != tt.n || len(deadlines) != tt.n {
				t.Fatalf("got %d keys, %d deadlines, want %d", len(keys), len(deadlines), tt.n)
			}
			if !deadlines[0].Equal(start) {
				t.Errorf("first deadline %v, want %v", deadlines[0], start)
			}
			seen := make(map[string]bool, tt.n)
			for i := range tt.n {
				if !events.ValidKey(keys[i]) || seen[keys[i]] {
					t.Fatalf("key %q invalid or repeated", keys[i])
				}
				seen[keys[i]] = true
				if i > 0 && deadlines[i].Before(deadlines[i-1]) {
					t.Fatalf("deadline %d before its predecessor", i)
				}
				if !deadlines[i].Before(start.Add(tt.span)) {
					t.Fatalf("deadline %d = %v outside the span", i, deadlines[i])
				}
			}
		})
	}
}
