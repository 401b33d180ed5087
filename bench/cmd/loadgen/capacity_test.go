package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/ordertimeout/ordertimeout/bench/internal/harness"
)

func TestStepCapacity(t *testing.T) {
	t.Parallel()
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	boom := errors.New("boom")
	rates := []int{5000, 10000, 15000, 20000}
	// linear: p99 = rate/100 ms, so 10000/s is exactly at a 100 ms bound.
	linear := func(rate int) (time.Duration, error) { return ms(rate / 100), nil }
	tests := []struct {
		name    string
		storm   func(rate int) (time.Duration, error)
		want    []capacityStorm
		wantMax int
		wantErr error
	}{
		{"every rate within", func(int) (time.Duration, error) { return ms(20), nil },
			[]capacityStorm{{5000, ms(20), true}, {10000, ms(20), true}, {15000, ms(20), true}, {20000, ms(20), true}}, 20000, nil},
		{"p99 at the bound is within, above it stops", linear,
			[]capacityStorm{{5000, ms(50), true}, {10000, ms(100), true}, {15000, ms(150), true}}, 10000, nil},
		{"first storm over the bound", func(int) (time.Duration, error) { return ms(101), nil },
			[]capacityStorm{{5000, ms(101), true}}, 0, nil},
		{"incomplete storm stops even under the bound", func(rate int) (time.Duration, error) {
			if rate == 15000 {
				return ms(10), fmt.Errorf("%w: 3 of 4 arrived", harness.ErrIncomplete)
			}
			return ms(10), nil
		}, []capacityStorm{{5000, ms(10), true}, {10000, ms(10), true}, {15000, ms(10), false}}, 10000, nil},
		{"a failure ends the run with its error", func(rate int) (time.Duration, error) {
			if rate == 10000 {
				return 0, boom
			}
			return ms(10), nil
		}, []capacityStorm{{5000, ms(10), true}}, 5000, boom},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var called []int
			run, maxRate, err := stepCapacity(context.Background(), rates, 100*time.Millisecond, func(_ context.Context, rate int) (time.Duration, error) {
				called = append(called, rate)
				return tt.storm(rate)
			})
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("err = %v, want %v", err, tt.wantErr)
			}
			if !slices.Equal(run, tt.want) || maxRate != tt.wantMax {
				t.Errorf("stepCapacity = %+v, max %d; want %+v, max %d", run, maxRate, tt.want, tt.wantMax)
			}
			if len(called) != len(tt.want)+btoi(tt.wantErr != nil) {
				t.Errorf("storms run at %v, want one per result (plus the failed one)", called)
			}
		})
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

func TestRatesFlag(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in      string
		want    []int
		wantErr bool
	}{
		{"5000,10000,15000", []int{5000, 10000, 15000}, false},
		{"2000", []int{2000}, false},
		{"10000,5000", nil, true},
		{"5000,5000", nil, true},
		{"0", nil, true},
		{"5k", nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			t.Parallel()
			var r ratesFlag
			err := r.Set(tt.in)
			if (err != nil) != tt.wantErr {
				t.Fatalf("Set(%q) error = %v, want error %v", tt.in, err, tt.wantErr)
			}
			if !tt.wantErr && !slices.Equal(r, tt.want) {
				t.Errorf("Set(%q) = %v, want %v", tt.in, r, tt.want)
			}
		})
	}
}
