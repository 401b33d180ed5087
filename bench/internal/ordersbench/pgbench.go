package ordersbench

import (
	"bufio"
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/ordertimeout/ordertimeout/bench/internal/harness"
)

// PgbenchTable mirrors the columns of the orders service's orders table, with
// its primary key only: the plain single-row INSERT the service is compared
// with.
const PgbenchTable = `CREATE TABLE bench_orders (
    id            text        PRIMARY KEY,
    customer_id   text        NOT NULL,
    currency      text        NOT NULL,
    items         jsonb       NOT NULL,
    amount_minor  bigint      NOT NULL,
    status        text        NOT NULL,
    cancel_reason text,
    version       bigint      NOT NULL,
    pay_by        timestamptz NOT NULL,
    created_at    timestamptz NOT NULL,
    updated_at    timestamptz NOT NULL
);`

// PgbenchScript is the pgbench custom script: one INSERT of one row per
// transaction, with a random text id like the service's.
const PgbenchScript = `INSERT INTO bench_orders VALUES (md5(random()::text || clock_timestamp()::text), 'c-bench', 'EUR', '[{"sku":"A-1","quantity":2,"unit_price_minor":1250}]', 2500, 'pending_payment', NULL, 1, now() + interval '15 minutes', now(), now());
`

var tpsRE = regexp.MustCompile(`tps = ([0-9.]+) \(without initial connection time\)`)

// Pgbench creates database pgbench with PgbenchTable on pg, runs pgbench
// inside the container with PgbenchScript at clients connections for d
// (prepared statements, 2 threads, per-transaction log for the latency
// percentiles), prints the tps and latency and returns the tps.
func Pgbench(ctx context.Context, pg *harness.Postgres, clients int, d time.Duration, rep *harness.Report) (float64, error) {
	if _, err := pg.Exec(ctx, "", "psql", "-U", "postgres", "-c", "CREATE DATABASE pgbench"); err != nil {
		return 0, err
	}
	if _, err := pg.Exec(ctx, PgbenchTable, "psql", "-U", "postgres", "-d", "pgbench", "-v", "ON_ERROR_STOP=1"); err != nil {
		return 0, err
	}
	if _, err := pg.Exec(ctx, PgbenchScript, "sh", "-c", "cat > /tmp/insert.sql && rm -f /tmp/pgb.*"); err != nil {
		return 0, err
	}
	args := []string{"pgbench", "-U", "postgres", "-n", "-M", "prepared", "-c", strconv.Itoa(clients), "-j", "2",
		"-T", strconv.Itoa(int(d.Seconds())), "-f", "/tmp/insert.sql", "-l", "--log-prefix=/tmp/pgb", "pgbench"}
	out, err := pg.Exec(ctx, "", args...)
	if err != nil {
		return 0, err
	}
	tps, err := parseTPS(out)
	if err != nil {
		return 0, err
	}
	logs, err := pg.Exec(ctx, "", "sh", "-c", "cat /tmp/pgb.*")
	if err != nil {
		return 0, err
	}
	lat := parseLatencies(logs)
	kv := []any{"peer", "pgbench", "workload", "insert", "clients", clients, "seconds", d.Seconds(), "tps", tps, "n", len(lat)}
	kv = append(kv, harness.Summarize(lat).KV("latency_")...)
	rep.Line("result", kv...)
	rep.Note("pgbench command: docker exec <postgres> %s", strings.Join(args, " "))
	rep.Note("pgbench script: %s", strings.TrimSpace(PgbenchScript))
	rep.Note("pgbench table: %s", strings.Join(strings.Fields(PgbenchTable), " "))
	return tps, nil
}

// parseTPS returns the "tps = N (without initial connection time)" of
// pgbench's output.
func parseTPS(out string) (float64, error) {
	m := tpsRE.FindStringSubmatch(out)
	if m == nil {
		return 0, fmt.Errorf("pgbench: no tps in output: %s", out)
	}
	return strconv.ParseFloat(m[1], 64)
}

// parseLatencies returns the transaction latencies of pgbench's
// per-transaction log (-l): the third field of each line, in microseconds.
func parseLatencies(logs string) []time.Duration {
	var lat []time.Duration
	sc := bufio.NewScanner(strings.NewReader(logs))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 3 {
			continue
		}
		if us, err := strconv.ParseInt(f[2], 10, 64); err == nil {
			lat = append(lat, time.Duration(us)*time.Microsecond)
		}
	}
	return lat
}
