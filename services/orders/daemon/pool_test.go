package daemon_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ordertimeout/ordertimeout/internal/pgparams"
	"github.com/ordertimeout/ordertimeout/internal/testinfra"
	"github.com/ordertimeout/ordertimeout/services/orders/daemon"
)

// TestPoolsSetSessionTimeouts opens both pools of the daemon against real
// Postgres and asks the server for the session's timeouts.
func TestPoolsSetSessionTimeouts(t *testing.T) {
	t.Parallel()
	url := testinfra.Postgres(t)
	tests := []struct {
		name      string
		urlParams string
		timeouts  pgparams.Timeouts
		// wantStatement, wantIdle are what SHOW prints.
		wantStatement, wantIdle string
	}{
		{"defaults", "", pgparams.Timeouts{}, "30s", "1min"},
		{"configured", "", pgparams.Timeouts{Statement: 5 * time.Second, IdleInTransaction: 2 * time.Minute}, "5s", "2min"},
		{"the URL wins", "&statement_timeout=7s&idle_in_transaction_session_timeout=3s",
			pgparams.Timeouts{Statement: 5 * time.Second, IdleInTransaction: 2 * time.Minute}, "7s", "3s"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg := daemon.Config{DatabaseURL: url + tt.urlParams, StatementTimeout: tt.timeouts.Statement, IdleInTransactionTimeout: tt.timeouts.IdleInTransaction}
			m, api, relay, err := daemon.Pools(context.Background(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			for _, pool := range []*pgxpool.Pool{api, relay} {
				checkSetting(t, pool, "statement_timeout", tt.wantStatement)
				checkSetting(t, pool, "idle_in_transaction_session_timeout", tt.wantIdle)
			}
		})
	}
}

// TestPoolSizes: the API's pool has the URL's pool_max_conns, else
// PoolMaxConnsDefault; the relay's has RelayPoolMaxConns whatever the URL
// says.
func TestPoolSizes(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name               string
		urlParams          string
		wantAPI, wantRelay int32
	}{
		{"default", "", daemon.PoolMaxConnsDefault, daemon.RelayPoolMaxConns},
		{"the URL sizes the API's pool", "&pool_max_conns=40", 40, daemon.RelayPoolMaxConns},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			m, api, relay, err := daemon.Pools(context.Background(), daemon.Config{DatabaseURL: "postgres://u:p@127.0.0.1:1/db?sslmode=disable" + tt.urlParams})
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			if a, r := api.Config().MaxConns, relay.Config().MaxConns; a != tt.wantAPI || r != tt.wantRelay {
				t.Fatalf("pool sizes %d and %d, want %d and %d", a, r, tt.wantAPI, tt.wantRelay)
			}
		})
	}
}

// checkSetting fails unless SHOW name on a connection of pool prints want.
func checkSetting(t *testing.T, pool *pgxpool.Pool, name, want string) {
	t.Helper()
	var got string
	if err := pool.QueryRow(context.Background(), "SHOW "+name).Scan(&got); err != nil {
		t.Fatalf("SHOW %s: %v", name, err)
	}
	if got != want {
		t.Errorf("%s = %q, want %q", name, got, want)
	}
}
