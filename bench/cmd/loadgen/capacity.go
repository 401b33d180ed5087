package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/ordertimeout/ordertimeout/bench/internal/harness"
)

// ratesFlag is -capacity-rates: storm rates in deadlines a second, strictly
// increasing.
type ratesFlag []int

func (r *ratesFlag) String() string {
	s := make([]string, len(*r))
	for i, v := range *r {
		s[i] = strconv.Itoa(v)
	}
	return strings.Join(s, ",")
}

func (r *ratesFlag) Set(v string) error {
	var rates []int
	for _, f := range strings.Split(v, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 {
			return fmt.Errorf("rate %q: want a positive integer", f)
		}
		if len(rates) > 0 && n <= rates[len(rates)-1] {
			return fmt.Errorf("rates must increase: %d after %d", n, rates[len(rates)-1])
		}
		rates = append(rates, n)
	}
	*r = rates
	return nil
}

// capacityStorm is the outcome of one storm of a capacity run.
type capacityStorm struct {
	// Rate is the storm's deadlines a second.
	Rate int
	// P99 is the lateness p99 of what arrived.
	P99 time.Duration
	// Complete says everything arrived within the storm's grace.
	Complete bool
}

// within says the storm kept up within bound.
func (s capacityStorm) within(bound time.Duration) bool { return s.Complete && s.P99 <= bound }

// stepCapacity runs storm at each rate of rates in order and stops after
// the first storm that did not complete or whose p99 exceeded bound. It
// returns the storms run and the highest rate within the bound, 0 if the
// first was not. A storm that falls behind is measured, not failed: storm
// returns an error wrapping harness.ErrIncomplete for it, and any other
// error ends the run with that error.
func stepCapacity(ctx context.Context, rates []int, bound time.Duration, storm func(ctx context.Context, rate int) (time.Duration, error)) ([]capacityStorm, int, error) {
	var (
		run     []capacityStorm
		maxRate int
	)
	for _, rate := range rates {
		p99, err := storm(ctx, rate)
		if err != nil && !errors.Is(err, harness.ErrIncomplete) {
			return run, maxRate, fmt.Errorf("storm at %d/s: %w", rate, err)
		}
		s := capacityStorm{Rate: rate, P99: p99, Complete: err == nil}
		run = append(run, s)
		if !s.within(bound) {
			break
		}
		maxRate = rate
	}
	return run, maxRate, nil
}

// capacity steps the storms of one peer (peer and labels, e.g. River's
// mode, head its lines), prints one line per storm and one summary line.
// storm runs n deadlines spread over w.stormSpan.
func (w *timeoutdWorkload) capacity(ctx context.Context, rep *harness.Report, labels []any, storm func(ctx context.Context, n int) (time.Duration, error)) error {
	bound := w.capacityP99
	run, maxRate, err := stepCapacity(ctx, w.capacityRates, bound, func(ctx context.Context, rate int) (time.Duration, error) {
		n := int(float64(rate) * w.stormSpan.Seconds())
		p99, err := storm(ctx, n)
		if err == nil || errors.Is(err, harness.ErrIncomplete) {
			s := capacityStorm{Rate: rate, P99: p99, Complete: err == nil}
			kv := append(append([]any{}, labels...), "workload", "capacity", "measured", "storm", "rate", rate, "n", n,
				"complete", s.Complete, "lateness_p99_ms", p99, "p99_bound_ms", bound, "within", s.within(bound))
			rep.Line("result", kv...)
		}
		return p99, err
	})
	stopped := "none"
	if len(run) > 0 && !run[len(run)-1].within(bound) {
		stopped = strconv.Itoa(run[len(run)-1].Rate)
	}
	kv := append(append([]any{}, labels...), "workload", "capacity", "measured", "capacity", "max_rate", maxRate,
		"p99_bound_ms", bound, "storms", len(run), "stopped_at", stopped, "span_s", w.stormSpan.Seconds())
	rep.Line("result", kv...)
	return err
}
