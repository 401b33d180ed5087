package postgres

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ordertimeout/ordertimeout/internal/startstop"
)

// Defaults of JanitorConfig.
const (
	IdempotencyTTLDefault  = 24 * time.Hour
	JanitorIntervalDefault = 10 * time.Minute
	JanitorBatchDefault    = 5000
)

// JanitorConfig configures a Janitor.
type JanitorConfig struct {
	// TTL is how long an Idempotency-Key is remembered; a retry after it
	// creates a new order. Default 24h.
	TTL time.Duration
	// Interval between sweeps; default 10m.
	Interval time.Duration
	// Batch is the most keys deleted per statement; default 5000.
	Batch int
	// Now is the clock; default time.Now. The keys' created_at comes from
	// the service's clock too.
	Now func() time.Time
	// Logger; default slog.Default().
	Logger *slog.Logger
}

// Janitor deletes expired idempotency keys, so the table stays bounded.
type Janitor struct {
	base startstop.Base
	cfg  JanitorConfig
	pool *pgxpool.Pool
}

// NewJanitor returns a Janitor over pool.
func NewJanitor(pool *pgxpool.Pool, cfg JanitorConfig) (*Janitor, error) {
	cfg.TTL = cmp.Or(cfg.TTL, IdempotencyTTLDefault)
	cfg.Interval = cmp.Or(cfg.Interval, JanitorIntervalDefault)
	cfg.Batch = cmp.Or(cfg.Batch, JanitorBatchDefault)
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.TTL <= 0 || cfg.Interval <= 0 || cfg.Batch < 1 {
		return nil, fmt.Errorf("postgres: JanitorConfig: TTL, Interval and Batch must be positive")
	}
	return &Janitor{cfg: cfg, pool: pool}, nil
}

// Start sweeps at once and then every Interval until ctx ends or Stop; it
// does not block. A failed sweep is logged and retried at the next
// interval.
func (j *Janitor) Start(ctx context.Context) { j.base.Start(ctx, j.run) }

// Stop ends the loop started by Start and waits for its sweep to return.
func (j *Janitor) Stop() { j.base.Stop() }

func (j *Janitor) run(ctx context.Context) {
	t := time.NewTicker(j.cfg.Interval)
	defer t.Stop()
	for {
		if n, err := j.Sweep(ctx); err != nil && ctx.Err() == nil {
			j.cfg.Logger.Warn("sweep idempotency keys", "err", err)
		} else if n > 0 {
			j.cfg.Logger.Info("expired idempotency keys deleted", "count", n)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Sweep deletes every key older than TTL, in batches, and returns how many.
func (j *Janitor) Sweep(ctx context.Context) (int64, error) {
	before := j.cfg.Now().Add(-j.cfg.TTL)
	var total int64
	for {
		tag, err := j.pool.Exec(ctx, `DELETE FROM idempotency_keys WHERE key IN (
			SELECT key FROM idempotency_keys WHERE created_at < $1 LIMIT $2)`, before, j.cfg.Batch)
		if err != nil {
			return total, fmt.Errorf("delete expired idempotency keys: %w", err)
		}
		total += tag.RowsAffected()
		if tag.RowsAffected() < int64(j.cfg.Batch) {
			return total, nil
		}
	}
}
