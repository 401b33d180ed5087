package postgres

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ordertimeout/ordertimeout/services/orders"
)

// Defaults of GateConfig.
const (
	// GateProbeIntervalDefault is the least time between two probes of a
	// database known to be down.
	GateProbeIntervalDefault = 500 * time.Millisecond
	// GateProbeTimeoutDefault bounds one probe.
	GateProbeTimeoutDefault = 2 * time.Second
)

// errDown is the cause of an operation the gate refused without trying.
var errDown = errors.New("postgres: the database is known to be down; not tried")

// GateConfig configures the Store's gate.
type GateConfig struct {
	// ProbeInterval is the least time between two probes while the
	// database is known to be down; defaults to GateProbeIntervalDefault.
	ProbeInterval time.Duration
	// ProbeTimeout bounds one probe (and so the wait of the operation that
	// runs it); defaults to GateProbeTimeoutDefault.
	ProbeTimeout time.Duration
	// Now is the clock of the probe interval; defaults to time.Now.
	Now func() time.Time
	// Registerer, if set, receives the gauge orders_database_available and
	// the counter orders_database_refused_total.
	Registerer prometheus.Registerer
}

// gate fails the Store's operations fast while the database is known to be
// down. It is a circuit breaker in the adapter, because the adapter is where
// an outage is told from a request's own failure (unavailable) and where
// every caller meets the database: the API's reads and writes, the cancel
// consumer and the reconciler alike. Reads go through it too: the pool
// connects to the primary only (target_session_attrs=read-write), so a read
// hangs in a failover just as a write does.
//
// The database is down from an operation that failed as unavailable until
// one succeeds (or fails with an answer of the server, which proves it up).
// Meanwhile admit refuses at once, with orders.ErrUnavailable, every
// operation but one per ProbeInterval: that one first runs the probe (a
// writable primary answers within ProbeTimeout), and goes on when it
// succeeds. So a failover costs each request a few microseconds instead of
// the request timeout, one request per interval waits at most ProbeTimeout,
// and the first success reopens the gate for all. There is no goroutine:
// traffic (and /readyz, Store.Ping) drives the probes.
//
// A gate is safe for concurrent use; its cost while the database is up is
// one mutex round per operation.
type gate struct {
	probe    func(ctx context.Context) error
	now      func() time.Time
	interval time.Duration
	timeout  time.Duration
	refused  prometheus.Counter

	mu       sync.Mutex
	down     bool
	since    time.Time // start of the outage, when down
	probedAt time.Time // start of the last probe
	probing  bool
}

// newGate returns an open gate whose probe is probe.
func newGate(probe func(ctx context.Context) error, cfg GateConfig) (*gate, error) {
	g := &gate{probe: probe, now: cfg.Now,
		interval: cmp.Or(cfg.ProbeInterval, GateProbeIntervalDefault),
		timeout:  cmp.Or(cfg.ProbeTimeout, GateProbeTimeoutDefault),
		refused: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "orders_database_refused_total",
			Help: "Database operations (API requests, cancel events, reconciler sweeps) refused at once, without trying, because the database was known to be down.",
		}),
	}
	if g.now == nil {
		g.now = time.Now
	}
	if g.interval < 0 || g.timeout < 0 {
		return nil, fmt.Errorf("postgres: GateConfig: ProbeInterval and ProbeTimeout must not be negative, got %s and %s", g.interval, g.timeout)
	}
	if r := cfg.Registerer; r != nil {
		available := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "orders_database_available",
			Help: "1 while database operations are let through, 0 while the database is known to be down (since an operation failed as unavailable, until one succeeds).",
		}, func() float64 {
			if ok, _ := g.state(); ok {
				return 1
			}
			return 0
		})
		for _, c := range []prometheus.Collector{available, g.refused} {
			if err := r.Register(c); err != nil {
				return nil, fmt.Errorf("register database gate metrics: %w", err)
			}
		}
	}
	return g, nil
}

// admit returns nil when an operation may go to the database. While the
// database is known to be down it returns an orders.ErrUnavailable error at
// once, unless a probe is due and none is running: then it probes, bounded
// by ProbeTimeout, and returns nil if the probe proved the database up
// (observe), else the probe's error.
func (g *gate) admit(ctx context.Context) error {
	g.mu.Lock()
	if !g.down {
		g.mu.Unlock()
		return nil
	}
	now := g.now()
	if g.probing || now.Sub(g.probedAt) < g.interval {
		since := g.since
		g.mu.Unlock()
		g.refused.Inc()
		return fmt.Errorf("%w: %w (down for %s)", orders.ErrUnavailable, errDown, now.Sub(since).Round(time.Millisecond))
	}
	g.probing, g.probedAt = true, now
	g.mu.Unlock()

	pctx, cancel := context.WithTimeout(ctx, g.timeout)
	err := storeError(g.probe(pctx))
	cancel()
	g.mu.Lock()
	g.probing = false
	g.mu.Unlock()
	g.observe(err)
	if ok, _ := g.state(); ok {
		return nil
	}
	return fmt.Errorf("probe: %w", err)
}

// observe records the outcome of an operation, err as storeError returns
// it: nil, a domain error or an error of the server's own (a constraint)
// proves the database up; an unavailable error marks it down from now; any
// other error (the caller went away, a bug) proves nothing.
func (g *gate) observe(err error) {
	var de *orders.Error
	var pgErr *pgconn.PgError
	up := err == nil || errors.As(err, &de) && de.Code != orders.CodeUnavailable ||
		!errors.Is(err, orders.ErrUnavailable) && errors.As(err, &pgErr)
	down := errors.Is(err, orders.ErrUnavailable)
	if !up && !down {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if down && !g.down {
		g.since = g.now()
		// The operation that found the outage was the probe of its
		// interval.
		g.probedAt = g.since
	}
	g.down = down
}

// state reports whether operations are let through and, when not, since
// when the database is known to be down.
func (g *gate) state() (available bool, since time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return !g.down, g.since
}
