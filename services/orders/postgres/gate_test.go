package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ordertimeout/ordertimeout/services/orders"
)

// fakeProbe is a gate's probe whose answer the test sets; it counts its
// calls.
type fakeProbe struct {
	mu    sync.Mutex
	err   error
	calls int
}

func (p *fakeProbe) probe(context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.calls++
	return p.err
}

var (
	errOutage     = fmt.Errorf("%w: %w", orders.ErrUnavailable, pgconn.ErrConnClosed)
	errConstraint = &pgconn.PgError{Code: "23505"}
)

// step is one event of a gate test: set the probe's answer (probeErr),
// move the clock (advance), admit an operation and check the result
// (admit), or else record an operation's outcome (observe, nil included).
type step struct {
	probeErr error
	advance  time.Duration
	observe  error
	admit    bool
	// want is the admit's result: "ok", "refused" (at once, errDown) or
	// "probe failed" (the probe ran and failed).
	want string
	// probes is how many times the probe ran so far, checked after admit.
	probes int
}

func TestGate(t *testing.T) {
	t.Parallel()
	const interval = GateProbeIntervalDefault
	down := step{observe: errOutage}
	tests := []struct {
		name  string
		steps []step
	}{
		{"up: every operation goes, none probes", []step{
			{admit: true, want: "ok"}, {observe: errConstraint}, {admit: true, want: "ok"},
		}},
		{"an errOutage refuses the next operations at once", []step{
			down, {admit: true, want: "refused"}, {advance: interval - time.Millisecond}, {admit: true, want: "refused"},
		}},
		{"one probe per interval while down", []step{
			down, {probeErr: errOutage},
			{advance: interval}, {admit: true, want: "probe failed", probes: 1},
			{admit: true, want: "refused", probes: 1},
			{advance: interval - time.Nanosecond}, {admit: true, want: "refused", probes: 1},
			{advance: time.Nanosecond}, {admit: true, want: "probe failed", probes: 2},
		}},
		{"a successful probe reopens for all", []step{
			down, {advance: interval}, {admit: true, want: "ok", probes: 1},
			{admit: true, want: "ok", probes: 1},
		}},
		{"an operation that succeeds reopens", []step{
			down, {observe: nil}, {admit: true, want: "ok"},
		}},
		{"the server's answer reopens: a errConstraint", []step{
			down, {observe: errConstraint}, {admit: true, want: "ok"},
		}},
		{"the server's answer reopens: a domain error", []step{
			down, {observe: fmt.Errorf("lock order: %w", orders.ErrNotFound)}, {admit: true, want: "ok"},
		}},
		{"a request gone away proves nothing", []step{
			down, {observe: context.Canceled}, {admit: true, want: "refused"},
		}},
		{"a request gone away does not close it either", []step{
			{observe: context.Canceled}, {admit: true, want: "ok"},
		}},
		{"a probe that reaches a standby keeps it closed", []step{
			down, {probeErr: errStandby}, {advance: interval}, {admit: true, want: "probe failed", probes: 1},
			{admit: true, want: "refused", probes: 1},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			clock := time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)
			p := &fakeProbe{}
			g, err := newGate(p.probe, GateConfig{Now: func() time.Time { return clock }})
			if err != nil {
				t.Fatal(err)
			}
			for i, s := range tt.steps {
				p.mu.Lock()
				if s.probeErr != nil {
					p.err = s.probeErr
				}
				p.mu.Unlock()
				clock = clock.Add(s.advance)
				if !s.admit {
					if s.advance == 0 && s.probeErr == nil {
						g.observe(s.observe)
					}
					continue
				}
				err := g.admit(context.Background())
				got := "ok"
				switch {
				case errors.Is(err, errDown):
					got = "refused"
				case err != nil:
					got = "probe failed"
				}
				if got != s.want {
					t.Fatalf("step %d: admit = %v (%s), want %s", i, err, got, s.want)
				}
				if err != nil && !errors.Is(err, orders.ErrUnavailable) {
					t.Errorf("step %d: admit = %v, not ErrUnavailable", i, err)
				}
				if p.calls != s.probes {
					t.Fatalf("step %d: %d probes, want %d", i, p.calls, s.probes)
				}
			}
		})
	}
}

// TestGateProbesOneAtATime: while a probe runs (bounded by ProbeTimeout),
// every other operation is refused at once.
func TestGateProbesOneAtATime(t *testing.T) {
	t.Parallel()
	clock := time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)
	started, release := make(chan time.Duration), make(chan struct{})
	g, err := newGate(func(ctx context.Context) error {
		d, _ := ctx.Deadline()
		started <- time.Until(d)
		<-release
		return nil
	}, GateConfig{Now: func() time.Time { return clock }, ProbeTimeout: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	g.observe(errOutage)
	clock = clock.Add(time.Hour)
	probed := make(chan error)
	go func() { probed <- g.admit(context.Background()) }()
	select {
	case left := <-started:
		if left <= 2*time.Second || left > 3*time.Second {
			t.Errorf("the probe's deadline is %s away, want ProbeTimeout (3s)", left)
		}
	case err := <-probed:
		t.Fatalf("admit = %v without probing", err)
	}
	if err := g.admit(context.Background()); !errors.Is(err, errDown) {
		t.Errorf("admit during the probe = %v, want refused at once", err)
	}
	close(release)
	if err := <-probed; err != nil {
		t.Fatalf("admit of the probe = %v, want nil", err)
	}
	if ok, _ := g.state(); !ok {
		t.Error("the gate stays closed after a successful probe")
	}
}

// TestGateMetrics: orders_database_available follows the state and
// orders_database_refused_total counts the refusals.
func TestGateMetrics(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	g, err := newGate(func(context.Context) error { return nil }, GateConfig{Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	check := func(available, refused float64) {
		t.Helper()
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]float64{}
		for _, mf := range mfs {
			m := mf.GetMetric()[0]
			got[mf.GetName()] = m.GetGauge().GetValue() + m.GetCounter().GetValue()
		}
		if got["orders_database_available"] != available || got["orders_database_refused_total"] != refused {
			t.Errorf("metrics %v, want orders_database_available %v and orders_database_refused_total %v", got, available, refused)
		}
	}
	check(1, 0)
	g.observe(errOutage)
	for range 3 {
		_ = g.admit(context.Background())
	}
	check(0, 3)
	g.observe(nil)
	check(1, 3)
}

func TestGateConfigIsValidated(t *testing.T) {
	t.Parallel()
	if _, err := newGate(nil, GateConfig{ProbeInterval: -time.Second}); err == nil || !strings.Contains(err.Error(), "ProbeInterval") {
		t.Errorf("newGate with a negative ProbeInterval = %v, want an error naming it", err)
	}
}
