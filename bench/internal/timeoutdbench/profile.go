package timeoutdbench

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ordertimeout/ordertimeout/bench/internal/harness"
)

// profileStatements is how many of Postgres's statements, the costliest
// first, a storm's profile reports.
const profileStatements = 8

// stormProfile is the profiling of one storm's expiry window (see
// Config.ProfileDir): it starts at the first deadline and covers the
// deadlines' span and a second more.
type stormProfile struct {
	done chan error
}

// profileStorm starts the profiles of storm number i, due from first to
// last, of n expiries: timeoutd's and nats-server's CPU, written to
// <ProfileDir>/storm-<i>-{timeoutd,nats-server}.pprof, and Postgres's
// statements in timeoutd's database over the same window, written as
// "measured=pg_statement" lines. Wait returns once all are written.
func (b *Bench) profileStorm(ctx context.Context, i int, first, last time.Time, n int) *stormProfile {
	p := &stormProfile{done: make(chan error, 1)}
	go func() { p.done <- b.runStormProfile(ctx, i, first, last, n) }()
	return p
}

// Wait returns the profiles' error, once they are written.
func (p *stormProfile) Wait() error { return <-p.done }

func (b *Bench) runStormProfile(ctx context.Context, i int, first, last time.Time, n int) error {
	conn, err := pgx.Connect(ctx, b.cfg.DatabaseURL)
	if err != nil {
		return fmt.Errorf("profile: connect timeoutd database: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, `CREATE EXTENSION IF NOT EXISTS pg_stat_statements`); err != nil {
		return fmt.Errorf("profile: pg_stat_statements (harness.PostgresArgs preloads it): %w", err)
	}
	if err := harness.SleepUntil(ctx, first); err != nil {
		return err
	}
	if _, err := conn.Exec(ctx, `SELECT pg_stat_statements_reset()`); err != nil {
		return fmt.Errorf("profile: reset statements: %w", err)
	}
	span := last.Sub(first) + time.Second
	errs := make(chan error, 2)
	for _, t := range []struct{ name, url string }{{"timeoutd", b.debugURL}, {"nats-server", b.cfg.NATSProfileURL}} {
		path := filepath.Join(b.cfg.ProfileDir, fmt.Sprintf("storm-%d-%s.pprof", i, t.name))
		go func() {
			if err := harness.FetchCPUProfile(ctx, t.url, span, path); err != nil {
				errs <- fmt.Errorf("profile %s: %w", t.name, err)
				return
			}
			errs <- nil
		}()
	}
	for range 2 {
		if e := <-errs; e != nil && err == nil {
			err = e
		}
	}
	if err != nil {
		return err
	}
	return b.reportStatements(ctx, conn, i, n)
}

// reportStatements prints timeoutd's database's costliest statements since
// the reset: calls, execution time in all and per expiry of the storm's n,
// and rows.
func (b *Bench) reportStatements(ctx context.Context, conn *pgx.Conn, i, n int) error {
	rows, err := conn.Query(ctx, `SELECT query, calls, total_exec_time, rows, wal_bytes FROM pg_stat_statements
		WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
		ORDER BY total_exec_time DESC LIMIT $1`, profileStatements)
	if err != nil {
		return fmt.Errorf("profile: statements: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var query string
		var calls, nrows int64
		var totalMs float64
		var walBytes float64
		if err := rows.Scan(&query, &calls, &totalMs, &nrows, &walBytes); err != nil {
			return fmt.Errorf("profile: statements: %w", err)
		}
		b.rep.Line("result", "peer", "timeoutd", "workload", "storm", "measured", "pg_statement", "storm", i,
			"calls", calls, "exec_ms", totalMs, "exec_us_per_expiry", totalMs*1000/float64(n), "rows", nrows,
			"wal_bytes_per_expiry", walBytes/float64(n), "query", oneLine(query, 120))
	}
	return rows.Err()
}

// oneLine folds s's white space and cuts it to at most n bytes.
func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > n {
		s = s[:n]
	}
	return s
}
