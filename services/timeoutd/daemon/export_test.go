package daemon

import (
	"context"

	"github.com/jackc/pgx/v5/pgxpool"
)

// OpenPool opens the pool New would open for cfg, for the session
// parameters test.
func OpenPool(ctx context.Context, cfg Config) (*pgxpool.Pool, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	return openPool(ctx, cfg, cfg.DBMaxConns, false, nil)
}

// ReadPool is the read API's own pool, for the test that exhausts it.
func (m *Main) ReadPool() *pgxpool.Pool { return m.reads }
