package daemon_test

import (
	"context"
	"strings"
	"testing"

	"github.com/ordertimeout/ordertimeout/internal/testinfra"
	"github.com/ordertimeout/ordertimeout/services/timeoutd/daemon"
)

// TestPoolSetsSessionTimeouts reads the configuration from the environment
// as the binary does, opens the daemon's pool against real Postgres and asks
// the server for the session's timeouts.
func TestPoolSetsSessionTimeouts(t *testing.T) {
	t.Parallel()
	url := testinfra.Postgres(t)
	tests := []struct {
		name string
		env  map[string]string
		// urlParams are appended to the database URL.
		urlParams string
		// wantStatement, wantIdle are what SHOW prints.
		wantStatement, wantIdle string
	}{
		{name: "defaults", wantStatement: "30s", wantIdle: "1s"},
		{name: "environment", env: map[string]string{"TIMEOUTD_STATEMENT_TIMEOUT": "5s", "TIMEOUTD_IDLE_IN_TRANSACTION_TIMEOUT": "2s"},
			wantStatement: "5s", wantIdle: "2s"},
		{name: "the URL wins", env: map[string]string{"TIMEOUTD_STATEMENT_TIMEOUT": "5s", "TIMEOUTD_IDLE_IN_TRANSACTION_TIMEOUT": "2s"},
			urlParams: "&statement_timeout=7s&idle_in_transaction_session_timeout=3s", wantStatement: "7s", wantIdle: "3s"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			env := map[string]string{"TIMEOUTD_DATABASE_URL": url + tt.urlParams, "TIMEOUTD_NATS_URL": "nats://unused:4222"}
			for k, v := range tt.env {
				env[k] = v
			}
			cfg, err := daemon.FromEnv(env)
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			pool, err := daemon.OpenPool(ctx, cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer pool.Close()
			for name, want := range map[string]string{"statement_timeout": tt.wantStatement, "idle_in_transaction_session_timeout": tt.wantIdle} {
				var got string
				if err := pool.QueryRow(ctx, "SHOW "+name).Scan(&got); err != nil {
					t.Fatalf("SHOW %s: %v", name, err)
				}
				if got != want {
					t.Errorf("%s = %q, want %q", name, got, want)
				}
			}
		})
	}
}

func TestFromEnvSessionTimeouts(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, variable, value string
	}{
		{"statement timeout not a duration", "TIMEOUTD_STATEMENT_TIMEOUT", "30"},
		{"idle timeout not a duration", "TIMEOUTD_IDLE_IN_TRANSACTION_TIMEOUT", "a minute"},
		{"negative statement timeout", "TIMEOUTD_STATEMENT_TIMEOUT", "-1s"},
		{"sub-millisecond idle timeout", "TIMEOUTD_IDLE_IN_TRANSACTION_TIMEOUT", "10us"},
		{"idle timeout not below the lease TTL", "TIMEOUTD_IDLE_IN_TRANSACTION_TIMEOUT", "3s"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			env := map[string]string{"TIMEOUTD_DATABASE_URL": "postgres://x", "TIMEOUTD_NATS_URL": "nats://x", tt.variable: tt.value}
			cfg, err := daemon.FromEnv(env)
			if err == nil {
				_, err = daemon.OpenPool(context.Background(), cfg)
			}
			if err == nil || !strings.Contains(err.Error(), tt.variable) {
				t.Fatalf("err = %v, want one naming %s", err, tt.variable)
			}
		})
	}
}
