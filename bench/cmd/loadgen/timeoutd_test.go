package main

import (
	"strings"
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
		uuid bool
	}{
		{"one", 1, 10 * time.Second, false},
		{"storm", 200_000, 10 * time.Second, false},
		{"uneven", 7, time.Second, false},
		{"uuid storm", 200_000, 10 * time.Second, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			keys, deadlines := spread("s1", tt.n, start, tt.span, tt.uuid)
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
				if tt.uuid && (len(keys[i]) != 36 || keys[i][14] != '7' || !strings.ContainsRune("89ab", rune(keys[i][19]))) {
					t.Fatalf("key %q is not a UUIDv7", keys[i])
				}
				if tt.uuid && i > 0 && keys[i] < keys[i-1] && keys[i][:13] == keys[i-1][:13] {
					t.Fatalf("key %q sorts before its predecessor %q in the same millisecond", keys[i], keys[i-1])
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

func TestEnvFlag(t *testing.T) {
	t.Parallel()
	tests := []struct {
		arg  string
		want bool
	}{
		{"TIMEOUTD_TICK=5ms", true},
		{"TIMEOUTD_FIRE_BATCH=", true},
		{"TICK=5ms", false},
		{"TIMEOUTD_TICK", false},
		{"PATH=/bin", false},
	}
	for _, tt := range tests {
		var e envFlag
		if err := e.Set(tt.arg); (err == nil) != tt.want {
			t.Errorf("Set(%q) = %v, want accepted %v", tt.arg, err, tt.want)
		}
		if tt.want && e.String() != tt.arg {
			t.Errorf("after Set(%q) the flag reads %q", tt.arg, e.String())
		}
	}
}
