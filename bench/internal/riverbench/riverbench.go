package riverbench

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
	"github.com/riverqueue/river/rivertype"

	"github.com/ordertimeout/ordertimeout/bench/internal/harness"
)

// Defaults of Config.
const (
	// BatchSizeDefault is the number of jobs per InsertMany call.
	BatchSizeDefault = 10_000
	// WorkersDefault is the storm queue's MaxWorkers: River's maximum
	// (QueueNumWorkersMax). With 1,000 the no-op storm falls behind here,
	// each worker slot being held until the batch completer's flush.
	WorkersDefault = river.QueueNumWorkersMax
	// CancelSampleDefault bounds how many jobs JobCancel is timed on: at the
	// anchor's 1.7k/s a million would take ten minutes.
	CancelSampleDefault = 20_000
	// CancelConcurrencyDefault is the number of goroutines calling JobCancel.
	CancelConcurrencyDefault = 16
	// PoolSizeDefault is the pgxpool size River uses.
	PoolSizeDefault = 40
)

// Config configures the River peer.
type Config struct {
	// DatabaseURL is River's database on the shared Postgres server.
	DatabaseURL string
	// BatchSize is the number of jobs per InsertMany call; default 10,000.
	BatchSize int
	// Workers is MaxWorkers of the storm queue; default 10,000.
	Workers int
	// CancelSample is how many jobs JobCancel is timed on; default 20,000.
	CancelSample int
	// CancelConcurrency is the number of goroutines calling JobCancel;
	// default 16.
	CancelConcurrency int
	// PoolSize is the pgxpool's MaxConns; default 40.
	PoolSize int
	// CPUs are the platform's processes beside this one (the Postgres
	// container) whose CPU time Insert and Storm divide by their jobs.
	CPUs harness.CPUs
}

// Storm is one configuration of the storm client.
type Storm struct {
	// Mode says how jobs become due.
	Mode Mode
	// FetchCooldown and FetchPollInterval of the client; River's minimums
	// (1 ms each) are its most aggressive legal settings.
	FetchCooldown, FetchPollInterval time.Duration
}

// ParseStorm parses "mode:cooldown/poll", e.g. "available:1ms/1ms".
func ParseStorm(s string) (Storm, error) {
	mode, fetch, ok := strings.Cut(s, ":")
	cd, poll, ok2 := strings.Cut(fetch, "/")
	if !ok || !ok2 || (Mode(mode) != ModeAvailable && Mode(mode) != ModeScheduled) {
		return Storm{}, fmt.Errorf("river storm %q: want available|scheduled:<cooldown>/<poll interval>", s)
	}
	st := Storm{Mode: Mode(mode)}
	var err error
	if st.FetchCooldown, err = time.ParseDuration(cd); err != nil {
		return Storm{}, fmt.Errorf("river storm %q: cooldown: %w", s, err)
	}
	if st.FetchPollInterval, err = time.ParseDuration(poll); err != nil {
		return Storm{}, fmt.Errorf("river storm %q: poll interval: %w", s, err)
	}
	return st, nil
}

// TimeoutArgs is the job of the benchmark: one timeout of key.
type TimeoutArgs struct {
	// Key is the timeout key, the same keys timeoutd gets.
	Key string `json:"key"`
}

// Kind implements river.JobArgs.
func (TimeoutArgs) Kind() string { return "timeout" }

// Bench is the River peer on one database.
type Bench struct {
	cfg  Config
	pool *pgxpool.Pool
	rep  *harness.Report
}

// New connects to cfg.DatabaseURL and applies River's migrations.
func New(ctx context.Context, cfg Config, rep *harness.Report) (*Bench, error) {
	if cfg.DatabaseURL == "" {
		return nil, errors.New("riverbench: DatabaseURL is required")
	}
	cfg.BatchSize = cmp.Or(cfg.BatchSize, BatchSizeDefault)
	cfg.Workers = cmp.Or(cfg.Workers, WorkersDefault)
	cfg.CancelSample = cmp.Or(cfg.CancelSample, CancelSampleDefault)
	cfg.CancelConcurrency = cmp.Or(cfg.CancelConcurrency, CancelConcurrencyDefault)
	cfg.PoolSize = cmp.Or(cfg.PoolSize, PoolSizeDefault)
	pc, err := pgxpool.ParseConfig(cfg.DatabaseURL)
	if err != nil {
		return nil, fmt.Errorf("parse database url: %w", err)
	}
	pc.MaxConns = int32(cfg.PoolSize)
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("connect river database: %w", err)
	}
	m, err := rivermigrate.New(riverpgxv5.New(pool), nil)
	if err != nil {
		pool.Close()
		return nil, fmt.Errorf("river migrator: %w", err)
	}
	if _, err := m.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		pool.Close()
		return nil, fmt.Errorf("river migrate: %w", err)
	}
	return &Bench{cfg: cfg, pool: pool, rep: rep}, nil
}

// Close closes the pool.
func (b *Bench) Close() { b.pool.Close() }

// quietLogger drops River's logs below error.
func quietLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// Mode is how the storm's jobs are made due.
type Mode string

// The storm modes.
const (
	// ModeScheduled inserts with InsertOpts.ScheduledAt: River's documented
	// way. Jobs are "scheduled" until the leader's job scheduler moves them
	// to "available"; its interval (5 s) is not configurable.
	ModeScheduled Mode = "scheduled"
	// ModeAvailable inserts the same jobs, with the same scheduled_at, in
	// state "available" through a public JobInsertMiddleware, so the
	// producers' fetch (scheduled_at <= now()) picks each up as soon as it is
	// due, without waiting for the scheduler. It is River's fastest path for
	// future jobs through its public API.
	ModeAvailable Mode = "available"
)

func (b *Bench) client(st Storm, workers *river.Workers, queues map[string]river.QueueConfig) (*river.Client[pgx.Tx], error) {
	cfg := &river.Config{
		Logger:  quietLogger(),
		Workers: workers,
		Queues:  queues,
	}
	if queues != nil {
		cfg.FetchCooldown = st.FetchCooldown
		cfg.FetchPollInterval = st.FetchPollInterval
	}
	if st.Mode == ModeAvailable {
		cfg.Middleware = []rivertype.Middleware{river.JobInsertMiddlewareFunc(func(ctx context.Context, params []*rivertype.JobInsertParams, doInner func(context.Context) ([]*rivertype.JobInsertResult, error)) ([]*rivertype.JobInsertResult, error) {
			for _, p := range params {
				if p.State == rivertype.JobStateScheduled {
					p.State = rivertype.JobStateAvailable
				}
			}
			return doInner(ctx)
		})}
	}
	c, err := river.NewClient(riverpgxv5.New(b.pool), cfg)
	if err != nil {
		return nil, fmt.Errorf("river client: %w", err)
	}
	return c, nil
}

// Insert inserts one job per key, scheduled at deadlines[i], with
// InsertMany in batches, prints the rate and the CPU per job (Config.CPUs
// and this process), and returns the job ids.
func (b *Bench) Insert(ctx context.Context, keys []string, deadlines []time.Time) ([]int64, error) {
	c, err := b.client(Storm{Mode: ModeScheduled}, nil, nil)
	if err != nil {
		return nil, err
	}
	cpus := b.cpus()
	cpu0, err := cpus.Sample()
	if err != nil {
		return nil, fmt.Errorf("river insert: %w", err)
	}
	ids, d, err := b.insert(ctx, c, keys, deadlines)
	if err != nil {
		return nil, err
	}
	cpu1, err := cpus.Sample()
	if err != nil {
		return nil, fmt.Errorf("river insert: %w", err)
	}
	kv := []any{"peer", "river", "workload", "insert", "api", "InsertMany", "batch", b.cfg.BatchSize,
		"n", len(keys), "seconds", d.Seconds(), "per_sec", harness.PerSec(len(keys), d)}
	b.rep.Line("result", append(kv, cpus.PerUnit("us_per_job_", cpu0, cpu1, len(keys))...)...)
	return ids, nil
}

// cpus returns the CPU sources of a measurement: Config.CPUs and this
// process, which holds River's client and workers.
func (b *Bench) cpus() harness.CPUs {
	return append(slices.Clip(b.cfg.CPUs), harness.CPUSource{Name: "loadgen", Platform: true, Time: harness.ProcessCPU(os.Getpid())})
}

func (b *Bench) insert(ctx context.Context, c *river.Client[pgx.Tx], keys []string, deadlines []time.Time) ([]int64, time.Duration, error) {
	ids := make([]int64, 0, len(keys))
	params := make([]river.InsertManyParams, 0, b.cfg.BatchSize)
	start := time.Now()
	for i := 0; i < len(keys); i += b.cfg.BatchSize {
		params = params[:0]
		for j := i; j < min(i+b.cfg.BatchSize, len(keys)); j++ {
			params = append(params, river.InsertManyParams{Args: TimeoutArgs{Key: keys[j]}, InsertOpts: &river.InsertOpts{ScheduledAt: deadlines[j]}})
		}
		res, err := c.InsertMany(ctx, params)
		if err != nil {
			return nil, 0, fmt.Errorf("insert many: %w", err)
		}
		for _, r := range res {
			ids = append(ids, r.Job.ID)
		}
	}
	return ids, time.Since(start), nil
}

// Bytes prints the Postgres size of river_job with its indexes and TOAST
// divided by pending, the number of jobs it holds.
func (b *Bench) Bytes(ctx context.Context, pending int) error {
	var size int64
	if _, err := b.pool.Exec(ctx, "VACUUM ANALYZE river_job"); err != nil {
		return fmt.Errorf("vacuum river_job: %w", err)
	}
	if err := b.pool.QueryRow(ctx, "SELECT pg_total_relation_size('river_job')").Scan(&size); err != nil {
		return fmt.Errorf("size of river_job: %w", err)
	}
	b.rep.Line("result", "peer", "river", "workload", "bytes", "pending", pending, "total_bytes", size,
		"bytes_per_pending", float64(size)/float64(pending), "tables", "river_job+indexes+toast")
	return nil
}

// Cancel times JobCancel on the first CancelSample ids from
// CancelConcurrency goroutines and prints the rate.
func (b *Bench) Cancel(ctx context.Context, ids []int64) error {
	c, err := b.client(Storm{Mode: ModeScheduled}, nil, nil)
	if err != nil {
		return err
	}
	sample := ids[:min(len(ids), b.cfg.CancelSample)]
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, b.cfg.CancelConcurrency)
	start := time.Now()
	for range b.cfg.CancelConcurrency {
		wg.Go(func() {
			for {
				i := next.Add(1) - 1
				if i >= int64(len(sample)) {
					return
				}
				if _, err := c.JobCancel(ctx, sample[i]); err != nil {
					errs <- fmt.Errorf("job cancel %d: %w", sample[i], err)
					return
				}
			}
		})
	}
	wg.Wait()
	d := time.Since(start)
	close(errs)
	if err := <-errs; err != nil {
		return err
	}
	b.rep.Line("result", "peer", "river", "workload", "clear", "api", "JobCancel", "concurrency", b.cfg.CancelConcurrency,
		"n", len(sample), "of", len(ids), "seconds", d.Seconds(), "per_sec", harness.PerSec(len(sample), d))
	return nil
}

// Reset deletes every job, so the next workload starts from an empty table.
func (b *Bench) Reset(ctx context.Context) error {
	if _, err := b.pool.Exec(ctx, "TRUNCATE river_job"); err != nil {
		return fmt.Errorf("truncate river_job: %w", err)
	}
	if _, err := b.pool.Exec(ctx, "VACUUM ANALYZE river_job"); err != nil {
		return fmt.Errorf("vacuum river_job: %w", err)
	}
	return nil
}

// stormWorker records each job's start time minus its scheduled_at.
type stormWorker struct {
	river.WorkerDefaults[TimeoutArgs]
	mu       sync.Mutex
	lateness []time.Duration
	done     chan struct{}
	want     int
}

// Work implements river.Worker: it does nothing but record the lateness.
func (w *stormWorker) Work(_ context.Context, job *river.Job[TimeoutArgs]) error {
	late := time.Since(job.ScheduledAt)
	w.mu.Lock()
	w.lateness = append(w.lateness, late)
	if len(w.lateness) == w.want {
		close(w.done)
	}
	w.mu.Unlock()
	return nil
}

// Storm inserts one job per key at deadlines (which must lie in the future),
// runs a client with a no-op worker until every job ran, and prints the
// lateness distribution (worker start minus scheduled_at) and the early
// count. Jobs that have not run grace after the last deadline are reported
// (complete=false, received=…) and returned as an error wrapping
// harness.ErrIncomplete, with the lateness of those that ran.
//
// It also prints the CPU time of Config.CPUs and of this process, which
// holds River's client and workers, per job: during InsertMany, and from
// the first deadline until every job ran and was marked completed.
func (b *Bench) Storm(ctx context.Context, st Storm, keys []string, deadlines []time.Time, grace time.Duration) (harness.Summary, error) {
	w := &stormWorker{want: len(keys), done: make(chan struct{}), lateness: make([]time.Duration, 0, len(keys))}
	workers := river.NewWorkers()
	river.AddWorker(workers, w)
	c, err := b.client(st, workers, map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: b.cfg.Workers}})
	if err != nil {
		return harness.Summary{}, err
	}
	if err := c.Start(ctx); err != nil {
		return harness.Summary{}, fmt.Errorf("start river: %w", err)
	}
	defer func() {
		stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		_ = c.Stop(stopCtx)
	}()
	r, err := b.stormInsert(ctx, c, keys, deadlines)
	if err != nil {
		return harness.Summary{}, err
	}
	if err := b.stormExpiry(ctx, w, &r, deadlines[0], deadlines[len(deadlines)-1], grace); err != nil {
		return harness.Summary{}, err
	}
	return b.reportStorm(st, w, &r, keys, deadlines, grace)
}

// stormRun holds a storm's phase lengths and CPU samples.
type stormRun struct {
	cpus     harness.CPUs
	cpu      [4]harness.CPUSample // insert from, to; expiry from, to
	insert   time.Duration        // InsertMany's time
	lead     time.Duration        // from the insert's end to the first deadline
	expiry   time.Duration        // from the first deadline until every job was completed
	complete bool                 // every job ran within the grace
}

// stormInsert inserts one job per key, sampling the CPU before and after.
func (b *Bench) stormInsert(ctx context.Context, c *river.Client[pgx.Tx], keys []string, deadlines []time.Time) (stormRun, error) {
	r := stormRun{cpus: b.cpus()}
	var err error
	if r.cpu[0], err = r.cpus.Sample(); err != nil {
		return stormRun{}, fmt.Errorf("river storm: %w", err)
	}
	if _, r.insert, err = b.insert(ctx, c, keys, deadlines); err != nil {
		return stormRun{}, err
	}
	if r.cpu[1], err = r.cpus.Sample(); err != nil {
		return stormRun{}, fmt.Errorf("river storm: %w", err)
	}
	r.lead = time.Until(deadlines[0])
	return r, nil
}

// stormExpiry waits from the first deadline until every job ran (or grace
// after the last) and was marked completed, sampling the CPU at both ends.
func (b *Bench) stormExpiry(ctx context.Context, w *stormWorker, r *stormRun, first, last time.Time, grace time.Duration) error {
	if err := harness.SleepUntil(ctx, first); err != nil {
		return err
	}
	start := time.Now()
	var err error
	if r.cpu[2], err = r.cpus.Sample(); err != nil {
		return fmt.Errorf("river storm: %w", err)
	}
	r.complete = true
	select {
	case <-w.done:
	case <-time.After(time.Until(last) + grace):
		r.complete = false
	case <-ctx.Done():
		return ctx.Err()
	}
	// The expiry ends when the completer has marked every job completed
	// (the index on state answers without a scan).
	err = harness.Poll(ctx, 10*time.Second, 50*time.Millisecond, func() (bool, error) {
		var unfinished bool
		err := b.pool.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM river_job WHERE state IN ('available', 'pending', 'retryable', 'running', 'scheduled'))").Scan(&unfinished)
		return err == nil && !unfinished, err
	})
	if err != nil {
		b.rep.Line("note", "peer", "river", "workload", "storm", "jobs_not_completed", err.Error())
	}
	r.expiry = time.Since(start)
	if r.cpu[3], err = r.cpus.Sample(); err != nil {
		return fmt.Errorf("river storm: %w", err)
	}
	return nil
}

// reportStorm prints a storm's lateness and CPU lines and returns the
// lateness, with an error wrapping harness.ErrIncomplete if jobs are
// missing.
func (b *Bench) reportStorm(st Storm, w *stormWorker, r *stormRun, keys []string, deadlines []time.Time, grace time.Duration) (harness.Summary, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	early := 0
	for _, l := range w.lateness {
		if l < 0 {
			early++
		}
	}
	span := deadlines[len(deadlines)-1].Sub(deadlines[0])
	kv := []any{"peer", "river", "workload", "storm", "mode", string(st.Mode), "workers", b.cfg.Workers,
		"fetch_cooldown", st.FetchCooldown.String(), "fetch_poll_interval", st.FetchPollInterval.String(),
		"n", len(keys), "due_per_sec", harness.PerSec(len(keys), span), "insert_seconds", r.insert.Seconds(), "lead_after_insert_ms", r.lead,
		"complete", r.complete, "received", len(w.lateness), "early", early}
	lateness := harness.Summarize(w.lateness)
	kv = append(kv, lateness.KV("lateness_")...)
	b.rep.Line("result", kv...)
	kv = []any{"peer", "river", "workload", "storm", "mode", string(st.Mode), "measured", "cpu", "n", len(keys),
		"insert_seconds", r.insert.Seconds()}
	kv = append(kv, r.cpus.PerUnit("insert_us_per_job_", r.cpu[0], r.cpu[1], len(keys))...)
	kv = append(kv, "expiry_seconds", r.expiry.Seconds())
	kv = append(kv, r.cpus.PerUnit("expiry_us_per_job_", r.cpu[2], r.cpu[3], len(keys))...)
	b.rep.Line("result", kv...)
	if !r.complete {
		return lateness, fmt.Errorf("%w: river: %d of %d jobs ran within %s after the last deadline", harness.ErrIncomplete, len(w.lateness), len(keys), grace)
	}
	return lateness, nil
}
