package timeoutdbench

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ordertimeout/ordertimeout/bench/internal/harness"
	"github.com/ordertimeout/ordertimeout/internal/streams"
	"github.com/ordertimeout/ordertimeout/pkg/events"
	"github.com/ordertimeout/ordertimeout/services/timeoutd/api"
)

// Defaults of Config.
const (
	// MaxPendingDefault bounds the unacknowledged async publishes.
	MaxPendingDefault = 8192
	// ReadyTimeoutDefault bounds the wait for /readyz after a start.
	ReadyTimeoutDefault = 5 * time.Minute
	// IngestTimeoutDefault bounds the wait for the pending count to reach a
	// workload's size.
	IngestTimeoutDefault = 10 * time.Minute
)

// Config configures the timeoutd peer.
type Config struct {
	// Bin is the built timeoutd binary.
	Bin string
	// DatabaseURL is timeoutd's database on the shared Postgres server.
	DatabaseURL string
	// NATSURL is the NATS server.
	NATSURL string
	// NATSProfileURL is the NATS server's net/http/pprof root
	// (harness.NATS.ProfileURL); optional, see SustainedConfig.ProfileDir.
	NATSProfileURL string
	// LogPath receives timeoutd's JSON logs.
	LogPath string
	// MaxPending bounds the unacknowledged async publishes; default 8192.
	MaxPending int
	// ReadyTimeout bounds the wait for /readyz; default 5m.
	ReadyTimeout time.Duration
	// IngestTimeout bounds the wait for a workload's pending count; default
	// 10m.
	IngestTimeout time.Duration
	// CommandBatch, when above 1, packs every window of this many commands
	// into batches of a partition's commands (events.Batch) before
	// publishing them, as the orders relay packs the rows of a claim; 0 or 1
	// publishes one message per command.
	CommandBatch int
	// Env are settings of timeoutd beyond the bench's own, KEY=VALUE each
	// (TIMEOUTD_TICK=5ms, say), added to its environment.
	Env []string
	// ProfileDir, when set, receives the profiles of each Storm's expiry
	// window (from its first deadline over its span and a second more):
	// timeoutd's CPU (the binary started with TIMEOUTD_DEBUG_ADDR),
	// nats-server's (NATSProfileURL, required then), as
	// storm-<i>-<process>.pprof for go tool pprof, and Postgres's
	// statements in timeoutd's database (pg_stat_statements, preloaded by
	// harness.PostgresArgs) as report lines. Not with the sustained step,
	// whose own profiles (SustainedConfig.ProfileDir) would race for
	// nats-server's one CPU profile at a time.
	ProfileDir string
	// CPUs are the platform's processes beside timeoutd (the Postgres and
	// NATS containers) whose CPU time Storm divides by its commands and
	// expiries.
	CPUs harness.CPUs
}

// Bench is a running timeoutd and the clients that drive and observe it.
type Bench struct {
	cfg   Config
	rep   *harness.Report
	proc  *harness.Process
	base  string // http://127.0.0.1:port
	nc    *nats.Conn
	js    jetstream.JetStream
	http  *http.Client
	ready time.Duration
	// debugURL is timeoutd's net/http/pprof root, with ProfileDir.
	debugURL string
	// profiled counts the storms profiled, to name their files.
	profiled int
	// pubErrs counts async publishes that got no PubAck.
	pubErrs atomic.Int64
}

// New ensures the streams, starts timeoutd and waits for /readyz.
func New(ctx context.Context, cfg Config, rep *harness.Report) (*Bench, error) {
	if cfg.Bin == "" || cfg.DatabaseURL == "" || cfg.NATSURL == "" {
		return nil, errors.New("timeoutdbench: Bin, DatabaseURL and NATSURL are required")
	}
	if cfg.ProfileDir != "" && cfg.NATSProfileURL == "" {
		return nil, errors.New("timeoutdbench: ProfileDir needs NATSProfileURL")
	}
	cfg.MaxPending = cmp.Or(cfg.MaxPending, MaxPendingDefault)
	cfg.ReadyTimeout = cmp.Or(cfg.ReadyTimeout, ReadyTimeoutDefault)
	cfg.IngestTimeout = cmp.Or(cfg.IngestTimeout, IngestTimeoutDefault)
	nc, err := nats.Connect(cfg.NATSURL, nats.Name("loadgen"))
	if err != nil {
		return nil, fmt.Errorf("connect nats: %w", err)
	}
	b := &Bench{cfg: cfg, rep: rep, nc: nc, http: &http.Client{Timeout: 5 * time.Second}}
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(cfg.MaxPending),
		jetstream.WithPublishAsyncErrHandler(func(jetstream.JetStream, *nats.Msg, error) { b.pubErrs.Add(1) }))
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("jetstream: %w", err)
	}
	if err := streams.Ensure(ctx, js, streams.Config{}); err != nil {
		nc.Close()
		return nil, err
	}
	b.js = js
	if err := b.start(ctx); err != nil {
		nc.Close()
		return nil, err
	}
	rep.Line("result", "peer", "timeoutd", "workload", "start", "pending", 0, "ready_ms", b.ready)
	return b, nil
}

// start runs the binary and waits for /readyz, recording how long it took.
func (b *Bench) start(ctx context.Context) error {
	var debug []string
	if b.cfg.ProfileDir != "" {
		addr, err := harness.FreeAddr()
		if err != nil {
			return err
		}
		debug, b.debugURL = []string{"TIMEOUTD_DEBUG_ADDR=" + addr}, "http://"+addr+"/debug/pprof/"
	}
	svc, err := harness.StartService(ctx, b.cfg.Bin, func(addr string) []string {
		return append([]string{
			"TIMEOUTD_DATABASE_URL=" + b.cfg.DatabaseURL,
			"TIMEOUTD_NATS_URL=" + b.cfg.NATSURL,
			"TIMEOUTD_HTTP_ADDR=" + addr,
			"TIMEOUTD_LOG_LEVEL=warn",
		}, append(debug, b.cfg.Env...)...)
	}, b.cfg.LogPath, b.cfg.ReadyTimeout)
	if err != nil {
		return fmt.Errorf("start timeoutd: %w", err)
	}
	b.proc, b.base, b.ready = svc.Process, svc.Base, svc.Ready
	return nil
}

// Close stops timeoutd and closes the NATS connection.
func (b *Bench) Close() {
	if b.proc != nil {
		_ = b.proc.Stop(30 * time.Second)
	}
	b.nc.Close()
}

// Stats returns timeoutd's /api/v1/stats.
func (b *Bench) Stats(ctx context.Context) (api.Stats, error) {
	var s api.Stats
	err := harness.Get(ctx, b.http, b.base+"/api/v1/stats", func(r io.Reader) error {
		if err := json.NewDecoder(r).Decode(&s); err != nil {
			return fmt.Errorf("decode stats: %w", err)
		}
		return nil
	})
	return s, err
}

// waitPending polls the stats every 10 ms until pending equals want.
func (b *Bench) waitPending(ctx context.Context, want int64) error {
	var last api.Stats
	err := harness.Poll(ctx, b.cfg.IngestTimeout, 10*time.Millisecond, func() (bool, error) {
		select {
		case <-b.proc.Exited():
			return false, fmt.Errorf("timeoutd exited (%v); see %s", b.proc.Err(), b.cfg.LogPath)
		default:
		}
		s, err := b.Stats(ctx)
		if err != nil {
			return false, nil
		}
		last = s
		return s.Pending == want, nil
	})
	if err != nil {
		return fmt.Errorf("wait for pending %d (last %d, dead-lettered %d): %w", want, last.Pending, last.Totals.DeadLettered, err)
	}
	return nil
}

// publish sends cmds with PublishAsync and their Nats-Msg-Id, packed into
// batches when Config.CommandBatch is above 1, and waits for every PubAck.
func (b *Bench) publish(ctx context.Context, cmds func(i int) events.Command, n int) error {
	failed := b.pubErrs.Load()
	window := make([]events.CommandMessage, 0, max(b.cfg.CommandBatch, 1))
	for i := range n {
		c := cmds(i)
		data, err := json.Marshal(c)
		if err != nil {
			return fmt.Errorf("encode command: %w", err)
		}
		window = append(window, events.CommandMessage{Subject: c.Subject(), MsgID: c.MsgID(events.NewNonce()), Data: data, Count: 1})
		if len(window) < cap(window) && i < n-1 {
			continue
		}
		out := window
		if len(window) > 1 {
			out = events.Batch(window)
		}
		for _, m := range out {
			msg := &nats.Msg{Subject: m.Subject, Data: m.Data, Header: nats.Header{}}
			msg.Header.Set(jetstream.MsgIDHeader, m.MsgID)
			if m.Count > 1 {
				msg.Header.Set(events.HeaderBatch, strconv.Itoa(m.Count))
			}
			if _, err := b.js.PublishMsgAsync(msg, jetstream.WithStallWait(time.Minute)); err != nil {
				return fmt.Errorf("publish %s: %w", m.Subject, err)
			}
		}
		window = window[:0]
	}
	select {
	case <-b.js.PublishAsyncComplete():
	case <-ctx.Done():
		return ctx.Err()
	}
	if n := b.pubErrs.Load() - failed; n > 0 {
		return fmt.Errorf("publish: %d messages were not acknowledged", n)
	}
	return nil
}

func setCommand(key string, version int64, deadline time.Time) events.Command {
	return events.Command{
		Schema: events.SchemaVersion, Kind: events.KindSet, Key: key, Version: version,
		Deadline: deadline, FireSubject: events.OrderCancelSubject(key),
	}
}

// SetCommands returns the set command of keys[i] at version with deadline
// deadlines[i].
func SetCommands(keys []string, deadlines []time.Time, version int64) func(i int) events.Command {
	return func(i int) events.Command { return setCommand(keys[i], version, deadlines[i]) }
}

// ClearCommands returns the clear command of keys[i] at version.
func ClearCommands(keys []string, version int64) func(i int) events.Command {
	return func(i int) events.Command {
		return events.Command{Schema: events.SchemaVersion, Kind: events.KindClear, Key: keys[i], Version: version}
	}
}

// Live publishes the n commands cmd(0..n-1) at the maximum rate while
// timeoutd consumes them, and waits until its pending count has moved by
// delta (+n for sets of new keys, -n for clears); it prints the rate over
// the whole span, from the first publish to the pending count, as workload,
// and the CPU per command of each process over that span (the publisher is
// the harness).
func (b *Bench) Live(ctx context.Context, workload string, n int, delta int64, cmd func(i int) events.Command) error {
	s, err := b.Stats(ctx)
	if err != nil {
		return err
	}
	cpus := b.cpus()
	cpu0, err := cpus.Sample()
	if err != nil {
		return fmt.Errorf("live %s: %w", workload, err)
	}
	start := time.Now()
	if err := b.publish(ctx, cmd, n); err != nil {
		return err
	}
	published := time.Since(start)
	if err := b.waitPending(ctx, s.Pending+delta); err != nil {
		return err
	}
	d := time.Since(start)
	cpu1, err := cpus.Sample()
	if err != nil {
		return fmt.Errorf("live %s: %w", workload, err)
	}
	kv := []any{"peer", "timeoutd", "workload", workload, "mode", "live", "n", n, "seconds", d.Seconds(),
		"per_sec", harness.PerSec(n, d), "publish_acked_seconds", published.Seconds()}
	b.rep.Line("result", append(kv, cpus.PerUnit("us_per_command_", cpu0, cpu1, n)...)...)
	return nil
}

// Backlog stops timeoutd, publishes the n commands cmd(0..n-1) (all
// acknowledged by JetStream), starts timeoutd again and prints the rate from
// /readyz to the pending count having moved by delta: the consumer's
// throughput with no publisher competing for the CPU, and the CPU per
// command of each process from /readyz on.
func (b *Bench) Backlog(ctx context.Context, workload string, n int, delta int64, cmd func(i int) events.Command) error {
	s, err := b.Stats(ctx)
	if err != nil {
		return err
	}
	if err := b.proc.Stop(2 * time.Minute); err != nil {
		return fmt.Errorf("stop timeoutd: %w", err)
	}
	if err := b.publish(ctx, cmd, n); err != nil {
		return err
	}
	if err := b.start(ctx); err != nil {
		return err
	}
	cpus := b.cpus()
	cpu0, err := cpus.Sample()
	if err != nil {
		return fmt.Errorf("backlog %s: %w", workload, err)
	}
	start := time.Now()
	if err := b.waitPending(ctx, s.Pending+delta); err != nil {
		return err
	}
	d := time.Since(start)
	cpu1, err := cpus.Sample()
	if err != nil {
		return fmt.Errorf("backlog %s: %w", workload, err)
	}
	kv := []any{"peer", "timeoutd", "workload", workload, "mode", "backlog", "n", n, "seconds", d.Seconds(),
		"per_sec", harness.PerSec(n, d), "ready_ms", b.ready}
	b.rep.Line("result", append(kv, cpus.PerUnit("us_per_command_", cpu0, cpu1, n)...)...)
	return nil
}

// cpus returns the CPU sources of a measurement: the running timeoutd, the
// platform's containers (Config.CPUs) and this process as the harness.
func (b *Bench) cpus() harness.CPUs {
	cpus := append(harness.CPUs{{Name: "timeoutd", Platform: true, Time: harness.ProcessCPU(b.proc.PID())}}, b.cfg.CPUs...)
	return append(cpus, harness.CPUSource{Name: "harness", Time: harness.ProcessCPU(os.Getpid())})
}

// Bytes prints the Postgres size (tables, indexes, TOAST) of every table of
// timeoutd's database divided by pending, and each table's share.
func (b *Bench) Bytes(ctx context.Context, pending int) error {
	conn, err := pgx.Connect(ctx, b.cfg.DatabaseURL)
	if err != nil {
		return fmt.Errorf("connect timeoutd database: %w", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "VACUUM ANALYZE"); err != nil {
		return fmt.Errorf("vacuum: %w", err)
	}
	rows, err := conn.Query(ctx, `SELECT c.relname, pg_total_relation_size(c.oid)
		FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE c.relkind IN ('r', 'p') AND n.nspname NOT IN ('pg_catalog', 'information_schema') AND n.nspname NOT LIKE 'pg_toast%'
		ORDER BY 1`)
	if err != nil {
		return fmt.Errorf("table sizes: %w", err)
	}
	var total int64
	var parts []string
	for rows.Next() {
		var name string
		var size int64
		if err := rows.Scan(&name, &size); err != nil {
			return fmt.Errorf("scan table size: %w", err)
		}
		total += size
		parts = append(parts, fmt.Sprintf("%s:%d", name, size))
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("table sizes: %w", err)
	}
	b.rep.Line("result", "peer", "timeoutd", "workload", "bytes", "pending", pending, "total_bytes", total,
		"bytes_per_pending", float64(total)/float64(pending), "tables", strings.Join(parts, ","))
	return nil
}

// Memory prints timeoutd's RSS and peak RSS with label describing the state.
func (b *Bench) Memory(ctx context.Context, label string) error {
	m, err := harness.ReadMemory(b.proc.PID())
	if err != nil {
		return err
	}
	s, err := b.Stats(ctx)
	if err != nil {
		return err
	}
	b.rep.Line("result", "peer", "timeoutd", "workload", "rss", "when", label, "pending", s.Pending,
		"rss_mb", float64(m.RSSBytes)/(1<<20), "hwm_mb", float64(m.HWMBytes)/(1<<20),
		"rss_bytes_per_pending", float64(m.RSSBytes)/float64(max(s.Pending, 1)))
	return nil
}

// Recovery stops timeoutd with SIGTERM, starts it again and prints the time
// from the start of the new process to /readyz 200 with pending rows in
// Postgres, then its RSS.
func (b *Bench) Recovery(ctx context.Context, pending int) error {
	stop := time.Now()
	if err := b.proc.Stop(2 * time.Minute); err != nil {
		return fmt.Errorf("stop timeoutd: %w", err)
	}
	stopped := time.Since(stop)
	if err := b.start(ctx); err != nil {
		return err
	}
	s, err := b.Stats(ctx)
	if err != nil {
		return err
	}
	b.rep.Line("result", "peer", "timeoutd", "workload", "recovery", "pending", pending, "pending_after", s.Pending,
		"ready_ms", b.ready, "sigterm_exit_ms", stopped)
	return b.Memory(ctx, "after_recovery")
}
