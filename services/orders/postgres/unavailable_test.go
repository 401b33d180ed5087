package postgres

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ordertimeout/ordertimeout/internal/testinfra"
	"github.com/ordertimeout/ordertimeout/services/orders"
)

func TestStoreErrorMarksOutages(t *testing.T) {
	t.Parallel()
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	tests := []struct {
		name        string
		err         error
		unavailable bool
	}{
		{"connection refused", fmt.Errorf("get order: %w", refused), true},
		{"connect error", &pgconn.ConnectError{}, true},
		{"closed connection", fmt.Errorf("lock order: %w", pgconn.ErrConnClosed), true},
		{"connection cut mid-answer", fmt.Errorf("list orders: %w", io.ErrUnexpectedEOF), true},
		{"deadline while acquiring a connection", fmt.Errorf("update order: %w", context.DeadlineExceeded), true},
		{"server shutting down", &pgconn.PgError{Code: "57P01"}, true},
		{"server starting up", &pgconn.PgError{Code: "57P03"}, true},
		{"connection failure", &pgconn.PgError{Code: "08006"}, true},
		{"statement timeout", &pgconn.PgError{Code: "57014"}, true},
		{"too many connections", &pgconn.PgError{Code: "53300"}, true},
		{"read-only server (a former primary, now a standby)", fmt.Errorf("insert 1 orders: %w", &pgconn.PgError{Code: "25006"}), true},
		{"the probe reached a standby", errStandby, true},
		{"failed transaction (the request's own)", &pgconn.PgError{Code: "25P02"}, false},
		{"database dropped (does not heal by waiting)", &pgconn.PgError{Code: "57P04"}, false},
		{"unique violation", &pgconn.PgError{Code: "23505"}, false},
		{"invalid byte sequence", &pgconn.PgError{Code: "22021"}, false},
		{"a bug", errors.New("update order o-1: the locked row changed"), false},
		{"domain error", orders.ErrNotFound, false},
		{"client went away", fmt.Errorf("get order: %w", context.Canceled), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := storeError(tt.err)
			if is := errors.Is(got, orders.ErrUnavailable); is != tt.unavailable {
				t.Fatalf("errors.Is(storeError(%v), ErrUnavailable) = %v, want %v", tt.err, is, tt.unavailable)
			}
			if !errors.Is(got, tt.err) {
				t.Errorf("storeError(%v) = %v lost the cause", tt.err, got)
			}
		})
	}
	if storeError(nil) != nil {
		t.Error("storeError(nil) != nil")
	}
}

// TestStoreReportsAnUnreachableDatabase goes through pgx for real: a pool
// pointed at a closed port, and a pool whose only connection is taken.
func TestStoreReportsAnUnreachableDatabase(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closedAddr := ln.Addr().String()
	ln.Close()
	tests := []struct {
		name string
		// open returns the store to read from.
		open func(t *testing.T) *Store
	}{
		{"closed port", func(t *testing.T) *Store {
			pool, err := pgxpool.New(context.Background(), "postgres://u:p@"+closedAddr+"/db?connect_timeout=2")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(pool.Close)
			return newStore(t, pool)
		}},
		{"no free connection before the deadline", func(t *testing.T) *Store {
			pool, err := pgxpool.New(context.Background(), testinfra.Postgres(t)+"&pool_max_conns=1")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(pool.Close)
			conn, err := pool.Acquire(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(conn.Release)
			return newStore(t, pool)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			store := tt.open(t)
			ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
			defer cancel()
			_, err := store.Get(ctx, "o-1")
			if !errors.Is(err, orders.ErrUnavailable) {
				t.Fatalf("Get = %v, want orders.ErrUnavailable", err)
			}
		})
	}
}

// newStore returns a Store over pool with the default gate.
func newStore(t *testing.T, pool *pgxpool.Pool) *Store {
	t.Helper()
	s, err := NewStore(pool, StoreConfig{})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestReadOnlyConnectionsLeaveThePool: a pooled connection whose server
// takes no writes (here a session made read-only, as a connection to a
// former primary back as a standby is) fails a write with 25006, which is
// unavailable; the pool is reset, so the next write (after the gate's probe)
// gets a new connection and succeeds instead of failing on the same one.
// pgx keeps a connection that answered an error, and the probe's
// pg_is_in_recovery() is false on a read-only session of a primary: without
// the reset the second write fails too.
func TestReadOnlyConnectionsLeaveThePool(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := testinfra.Postgres(t)
	migrated, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	err = Migrate(ctx, migrated)
	migrated.Close()
	if err != nil {
		t.Fatal(err)
	}
	pool, err := pgxpool.New(ctx, url+"&pool_max_conns=1")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if _, err := pool.Exec(ctx, `SET default_transaction_read_only = on`); err != nil {
		t.Fatal(err)
	}
	clock := time.Now()
	store, err := NewStore(pool, StoreConfig{Gate: GateConfig{Now: func() time.Time { return clock }}})
	if err != nil {
		t.Fatal(err)
	}
	svc, err := orders.NewService(store, orders.ServiceConfig{})
	if err != nil {
		t.Fatal(err)
	}
	req := orders.CreateRequest{CustomerID: "c-1", Currency: "EUR", Deadline: orders.Deadline{PayWithin: "15m"},
		Items: []orders.Item{{SKU: "A-1", Quantity: 1, UnitPriceMinor: 100}}}
	_, _, err = svc.Create(ctx, req, "")
	var pgErr *pgconn.PgError
	if !errors.Is(err, orders.ErrUnavailable) || !errors.As(err, &pgErr) || pgErr.Code != "25006" {
		t.Fatalf("create on a read-only connection = %v, want ErrUnavailable from 25006", err)
	}
	// The gate holds the next create until its probe is due.
	clock = clock.Add(GateProbeIntervalDefault)
	if _, _, err := svc.Create(ctx, req, ""); err != nil {
		t.Fatalf("create after the reset = %v, want a new, writable connection", err)
	}
}
