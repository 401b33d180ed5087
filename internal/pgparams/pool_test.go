package pgparams_test

import (
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ordertimeout/ordertimeout/internal/pgparams"
)

func TestPoolConfig(t *testing.T) {
	t.Parallel()
	const url = "postgres://u:p@db:5432/app?sslmode=disable"
	tests := []struct {
		name string
		pool pgparams.Pool
		// wantConns is the pool's size; wantApp its sessions'
		// application_name, wantStatement their statement_timeout.
		wantConns              int32
		wantApp, wantStatement string
		// wantErr, when set, is a part of the error.
		wantErr string
	}{
		{name: "the service's size", pool: pgparams.Pool{URL: url, MaxConns: 16}, wantConns: 16, wantStatement: "30000ms"},
		{name: "the URL's size wins", pool: pgparams.Pool{URL: url + "&pool_max_conns=40", MaxConns: 16}, wantConns: 40, wantStatement: "30000ms"},
		{name: "keyword/value form", pool: pgparams.Pool{URL: "host=db user=u pool_max_conns=3", MaxConns: 16}, wantConns: 3, wantStatement: "30000ms"},
		{name: "a dedicated pool keeps its size", pool: pgparams.Pool{URL: url + "&pool_max_conns=40", MaxConns: 2, Dedicated: true},
			wantConns: 2, wantStatement: "30000ms"},
		{name: "the application name", pool: pgparams.Pool{URL: url, MaxConns: 4, ApplicationName: "timeoutd/a"},
			wantConns: 4, wantApp: "timeoutd/a", wantStatement: "30000ms"},
		{name: "the URL's application name wins", pool: pgparams.Pool{URL: url + "&application_name=mine", MaxConns: 4, ApplicationName: "timeoutd/a"},
			wantConns: 4, wantApp: "mine", wantStatement: "30000ms"},
		{name: "the URL's timeout wins", pool: pgparams.Pool{URL: url + "&statement_timeout=7s", MaxConns: 4}, wantConns: 4, wantStatement: "7s"},
		{name: "adapt has the last word", pool: pgparams.Pool{URL: url + "&pool_max_conns=40", MaxConns: 16,
			Adapt: func(c *pgxpool.Config) { c.MaxConns = 2 }}, wantConns: 2, wantStatement: "30000ms"},
		{name: "a bad URL names its variable", pool: pgparams.Pool{URL: url + "&pool_max_conns=x", Variable: "ORDERS_DATABASE_URL"},
			wantErr: "parse ORDERS_DATABASE_URL"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			pc, err := tt.pool.Config()
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			params := pc.ConnConfig.RuntimeParams
			if pc.MaxConns != tt.wantConns || params["application_name"] != tt.wantApp || params["statement_timeout"] != tt.wantStatement {
				t.Fatalf("MaxConns %d, application_name %q, statement_timeout %q; want %d, %q, %q",
					pc.MaxConns, params["application_name"], params["statement_timeout"], tt.wantConns, tt.wantApp, tt.wantStatement)
			}
		})
	}
}
