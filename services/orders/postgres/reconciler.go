package postgres

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ordertimeout/ordertimeout/internal/startstop"
	"github.com/ordertimeout/ordertimeout/services/orders"
)

// Defaults of ReconcilerConfig.
const (
	// ReconcileBatchDefault is the most orders one reconcile transaction
	// cancels.
	ReconcileBatchDefault = 500
	// ReconcileMaxPerSweepDefault bounds the orders one sweep cancels; the
	// rest wait for the next sweep.
	ReconcileMaxPerSweepDefault = 10_000
)

// ReconcilerConfig configures a Reconciler.
type ReconcilerConfig struct {
	// Margin is how long past its pay_by an order may stay pending_payment
	// (waiting for timeoutd's cancel event) before the reconciler cancels
	// it; default orders.ReconcileMarginDefault (30s).
	Margin time.Duration
	// Interval between sweeps; default orders.ReconcileIntervalDefault (10s).
	Interval time.Duration
	// Batch is the most orders cancelled per transaction; default 500.
	Batch int
	// MaxPerSweep bounds the orders one sweep cancels; default 10,000. It
	// is rounded up to a whole number of batches.
	MaxPerSweep int
	// Now is the clock; default time.Now. It must be the Service's clock:
	// the same clock decides that a payment is too late and that a cancel
	// event is not early.
	Now func() time.Time
	// Logger; default slog.Default().
	Logger *slog.Logger
	// Registerer, if set, receives the orders_reconciled_total counter.
	Registerer prometheus.Registerer
}

// Reconciler cancels the orders still pending_payment more than Margin
// after their pay_by, whose cancel event never came (a deadline command lost
// outside the platform, or replaced at timeoutd by a forged later version):
// the deadline holds even when timeoutd never fires it. Each is cancelled
// once, as Store.ReconcileOverdue describes, counted on
// orders_reconciled_total and logged as reconciled. It is the rescuer of a
// job system: when nothing is broken it finds nothing.
type Reconciler struct {
	base       startstop.Base
	cfg        ReconcilerConfig
	store      *Store
	reconciled prometheus.Counter
}

// NewReconciler returns a Reconciler over store.
func NewReconciler(store *Store, cfg ReconcilerConfig) (*Reconciler, error) {
	cfg.Margin = cmp.Or(cfg.Margin, orders.ReconcileMarginDefault)
	cfg.Interval = cmp.Or(cfg.Interval, orders.ReconcileIntervalDefault)
	cfg.Batch = cmp.Or(cfg.Batch, ReconcileBatchDefault)
	cfg.MaxPerSweep = cmp.Or(cfg.MaxPerSweep, ReconcileMaxPerSweepDefault)
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	switch {
	case cfg.Margin < 0:
		return nil, fmt.Errorf("postgres: ReconcilerConfig: Margin must not be negative, got %s", cfg.Margin)
	case cfg.Interval <= 0:
		return nil, fmt.Errorf("postgres: ReconcilerConfig: Interval must be positive, got %s", cfg.Interval)
	case cfg.Batch < 1:
		return nil, fmt.Errorf("postgres: ReconcilerConfig: Batch must be positive, got %d", cfg.Batch)
	case cfg.MaxPerSweep < 1:
		return nil, fmt.Errorf("postgres: ReconcilerConfig: MaxPerSweep must be positive, got %d", cfg.MaxPerSweep)
	}
	r := &Reconciler{cfg: cfg, store: store, reconciled: prometheus.NewCounter(prometheus.CounterOpts{
		Name: "orders_reconciled_total",
		Help: "Orders the reconciler cancelled for a payment timeout because their cancel event had not come Margin after pay_by.",
	})}
	if cfg.Registerer != nil {
		if err := cfg.Registerer.Register(r.reconciled); err != nil {
			return nil, fmt.Errorf("register reconciler metrics: %w", err)
		}
	}
	return r, nil
}

// Start sweeps at once and then every Interval until ctx ends or Stop; it
// does not block. A failed sweep is logged and retried at the next
// interval.
func (r *Reconciler) Start(ctx context.Context) { r.base.Start(ctx, r.run) }

// Stop ends the loop started by Start and waits for its sweep to return.
func (r *Reconciler) Stop() { r.base.Stop() }

func (r *Reconciler) run(ctx context.Context) {
	t := time.NewTicker(r.cfg.Interval)
	defer t.Stop()
	for {
		if _, err := r.Sweep(ctx); err != nil && ctx.Err() == nil {
			r.cfg.Logger.Warn("reconcile overdue orders", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Sweep cancels the overdue orders, Batch per transaction, until a batch
// finds fewer or MaxPerSweep is reached, and returns how many it cancelled.
func (r *Reconciler) Sweep(ctx context.Context) (int, error) {
	total := 0
	for total < r.cfg.MaxPerSweep {
		now := r.cfg.Now()
		done, err := r.store.ReconcileOverdue(ctx, now, r.cfg.Margin, r.cfg.Batch)
		if err != nil {
			return total, err
		}
		total += len(done)
		r.reconciled.Add(float64(len(done)))
		for _, o := range done {
			r.cfg.Logger.Warn("order reconciled: cancelled for a payment timeout without its cancel event",
				"order_id", o.ID, "version", o.Version, "pay_by", o.PayBy, "overdue", now.Sub(o.PayBy))
		}
		if len(done) < r.cfg.Batch {
			break
		}
	}
	return total, nil
}
