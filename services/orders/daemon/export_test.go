package daemon

import (
	"context"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Pools opens the API's and the relay's pools as New does, for the pool
// tests; Close closes them.
func Pools(ctx context.Context, cfg Config) (m *Main, api, relay *pgxpool.Pool, err error) {
	m = &Main{cfg: cfg}
	if err := m.openPools(ctx); err != nil {
		m.Close()
		return nil, nil, nil, err
	}
	return m, m.pool, m.relayPool, nil
}
