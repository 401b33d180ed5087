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
			return NewStore(pool, nil)
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
			return NewStore(pool, nil)
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
