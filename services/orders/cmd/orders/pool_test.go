package main

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ordertimeout/ordertimeout/internal/pgparams"
	"github.com/ordertimeout/ordertimeout/internal/testinfra"
)

// TestPoolsSetSessionTimeouts opens both pools of the binary against real
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
	open := map[string]func(context.Context, string, pgparams.Timeouts) (*pgxpool.Pool, error){
		"api pool": openPool, "relay pool": openRelayPool,
	}
	for _, tt := range tests {
		for poolName, openFn := range open {
			t.Run(tt.name+"/"+poolName, func(t *testing.T) {
				t.Parallel()
				ctx := context.Background()
				pool, err := openFn(ctx, url+tt.urlParams, tt.timeouts)
				if err != nil {
					t.Fatal(err)
				}
				defer pool.Close()
				checkSetting(t, pool, "statement_timeout", tt.wantStatement)
				checkSetting(t, pool, "idle_in_transaction_session_timeout", tt.wantIdle)
			})
		}
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
