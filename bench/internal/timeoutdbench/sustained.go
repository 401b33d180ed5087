package timeoutdbench

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"path/filepath"
	"runtime/metrics"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ordertimeout/ordertimeout/bench/internal/harness"
	"github.com/ordertimeout/ordertimeout/pkg/events"
	"github.com/ordertimeout/ordertimeout/services/timeoutd/api"
)

// Defaults of SustainedConfig.
const (
	// SustainedLiveDefault is the number of live orders the churn works on.
	SustainedLiveDefault = 100_000
	// SustainedDeadlineDefault is how far ahead the churn sets deadlines:
	// well beyond the time it takes to visit every live order again at the
	// rates used, so that the churn itself fires nothing.
	SustainedDeadlineDefault = 10 * time.Minute
	// SustainedIntervalDefault is the time between two samples.
	SustainedIntervalDefault = time.Minute
	// SustainedWarmupDefault is the least time from the start to the
	// first storm; the storm also waits for autovacuum's first analyze of
	// the tables (see SustainedConfig.Warmup).
	SustainedWarmupDefault = 90 * time.Second
	// analyzedTimeout bounds the wait for autovacuum's first analyze.
	analyzedTimeout = 5 * time.Minute
	// analyzedMinRows is the size from which a table must have been
	// analysed before the first storm: autovacuum never analyses a small
	// table nobody writes to again (goose_db_version's 7 rows), and
	// without this bound the wait ended only at analyzedTimeout, in an
	// error.
	analyzedMinRows = 1000
)

// SustainedConfig configures Bench.Sustained.
type SustainedConfig struct {
	// Duration of the run; required.
	Duration time.Duration
	// Rate is the churn's commands a second; required.
	Rate int
	// Live is the number of live orders of the churn; defaults to
	// SustainedLiveDefault.
	Live int
	// Deadline is how far ahead the churn's sets are due; defaults to
	// SustainedDeadlineDefault. A live order is visited every Live × 1.5 /
	// Rate seconds: that must stay below Deadline.
	Deadline time.Duration
	// StormEvery is the time between two storms' starts; required.
	StormEvery time.Duration
	// Warmup is the least time from the start to the first storm's start;
	// defaults to SustainedWarmupDefault. The first storm then also waits
	// (up to 5 minutes) until every table of timeoutd's database holding
	// more than analyzedMinRows rows has been analysed once, so the first
	// storm, the reference of the others, meets the tables with statistics
	// as the later ones do, not the seed's table without any (the first
	// storm of bench/results/2026-11-25-expiry-key-lookup/sustained-6m-check.txt met it so and
	// was 400 times later at p99 than the next two). The storms' times move
	// by that wait.
	Warmup time.Duration
	// Storm returns storm i's keys and deadlines, which lie in the future;
	// required.
	Storm func(i int) ([]string, []time.Time)
	// Grace of each storm (see Storm); required.
	Grace time.Duration
	// Interval is the time between two samples; defaults to
	// SustainedIntervalDefault.
	Interval time.Duration
	// Prefix of the churn's keys; required.
	Prefix string
	// ProfileDir, when set, receives two CPU profiles of nats-server per
	// storm i (Config.NATSProfileURL is then required):
	// storm-<i>-churn.pprof, of the stormProfileSpan before the storm's
	// first publish (the churn alone), and storm-<i>-expiry.pprof, of the
	// storm's deadlines (its expiries beside the churn). The storms then
	// start stormProfileSpan later.
	ProfileDir string
}

// stormProfileSpan is the length of a storm's churn profile.
const stormProfileSpan = 10 * time.Second

// Sustained seeds the churn's live orders, then for Duration keeps the
// churn running, runs a storm every StormEvery (the first after Warmup) and
// samples every Interval. Per storm it prints Storm's lines and one
// "measured=storm" line with the time of its first deadline since the
// start (t_s) and the p50/p99 lateness of the arrival at the consumer and
// of fired_at. Per interval it prints "measured=interval": the commands
// and expiries timeoutd counted and the CPU time of timeoutd, of
// Config.CPUs and of the harness per unit (commands + expiries; in an
// interval without a storm every unit is a churn command); and, at the start
// and after each interval, "measured=pg" per table of timeoutd's database
// (partitions summed into their parent: size with indexes and TOAST, index
// size, live and dead tuples, vacuums) and "measured=stream" per stream
// (messages, bytes, interior deletes).
func (b *Bench) Sustained(ctx context.Context, cfg SustainedConfig) error {
	cfg, err := b.sustainedConfig(cfg)
	if err != nil {
		return err
	}
	churn, err := b.NewChurn(cfg.Prefix, cfg.Live, cfg.Rate, cfg.Deadline)
	if err != nil {
		return err
	}
	defer churn.Close()
	conn, err := pgx.Connect(ctx, b.cfg.DatabaseURL)
	if err != nil {
		return fmt.Errorf("connect timeoutd database: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if err := b.Live(ctx, "sustained_seed", cfg.Live, int64(cfg.Live), churn.Seed(time.Now())); err != nil {
		return err
	}
	b.rep.Line("workload", "name", "sustained", "duration_s", cfg.Duration.Seconds(), "churn_per_sec", cfg.Rate, "live", cfg.Live,
		"churn_deadline_s", cfg.Deadline.Seconds(), "storm_every_s", cfg.StormEvery.Seconds(), "interval_s", cfg.Interval.Seconds())
	cpus := b.cpus()
	start := time.Now()
	s := &sampler{b: b, conn: conn, cpus: cpus, churn: churn, start: start}
	if err := s.record(ctx); err != nil {
		return err
	}
	if err := b.runSustained(ctx, cfg, churn, s); err != nil {
		return err
	}
	// The last, partial interval, so the churn's last commands are counted.
	return s.record(ctx)
}

// sustainedConfig returns cfg with its defaults, or an error naming what
// is missing or inconsistent.
func (b *Bench) sustainedConfig(cfg SustainedConfig) (SustainedConfig, error) {
	cfg.Live = cmp.Or(cfg.Live, SustainedLiveDefault)
	cfg.Deadline = cmp.Or(cfg.Deadline, SustainedDeadlineDefault)
	cfg.Interval = cmp.Or(cfg.Interval, SustainedIntervalDefault)
	cfg.Warmup = cmp.Or(cfg.Warmup, SustainedWarmupDefault)
	switch {
	case cfg.Duration <= 0 || cfg.Rate <= 0:
		return cfg, errors.New("timeoutdbench: sustained: Duration and Rate must be positive")
	case cfg.StormEvery <= 0:
		return cfg, errors.New("timeoutdbench: sustained: StormEvery must be positive")
	case cfg.Storm == nil || cfg.Grace <= 0 || cfg.Prefix == "":
		return cfg, errors.New("timeoutdbench: sustained: Storm, Grace and Prefix are required")
	case cfg.ProfileDir != "" && b.cfg.NATSProfileURL == "":
		return cfg, errors.New("timeoutdbench: sustained: ProfileDir needs Config.NATSProfileURL")
	}
	if visit := time.Duration(float64(cfg.Live) * 1.5 / float64(cfg.Rate) * float64(time.Second)); visit >= cfg.Deadline {
		return cfg, fmt.Errorf("timeoutdbench: sustained: a live order is visited every %s, not within its Deadline %s: raise the rate or the deadline, or lower live", visit, cfg.Deadline)
	}
	return cfg, nil
}

// runSustained runs the churn and the interval sampling in the background
// and the storms in the foreground until the run's end; the first error of
// any of them ends the others.
func (b *Bench) runSustained(ctx context.Context, cfg SustainedConfig, churn *Churn, s *sampler) error {
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		bgErrs []error
	)
	background := func(f func(context.Context) error) {
		wg.Go(func() {
			if err := f(runCtx); err != nil {
				mu.Lock()
				bgErrs = append(bgErrs, err)
				mu.Unlock()
				stop()
			}
		})
	}
	background(churn.Run)
	background(func(ctx context.Context) error { return s.every(ctx, cfg.Interval) })
	err := b.storms(runCtx, cfg, s.start)
	if err == nil {
		err = harness.SleepUntil(runCtx, s.start.Add(cfg.Duration))
	}
	stop()
	wg.Wait()
	if len(bgErrs) > 0 {
		return errors.Join(bgErrs...)
	}
	return err
}

// leaseMetrics are the membership's counters each interval reports: a
// lapse or a partition lost with no fault injected is a defect.
var leaseMetrics = []string{"timeoutd_lease_lapses_total", "timeoutd_partitions_lost_total", "timeoutd_partitions_released_total"}

// storms runs cfg's storms, the first Warmup after start, until the next
// would start after the run's end. Beside each storm's lines it prints a
// "measured=storm_env" line of what else ran during its deadlines (see
// watchStorm).
func (b *Bench) storms(ctx context.Context, cfg SustainedConfig, start time.Time) error {
	for i := 0; ; i++ {
		at := start.Add(cfg.Warmup + time.Duration(i)*cfg.StormEvery)
		if at.Sub(start) >= cfg.Duration {
			return nil
		}
		if err := harness.SleepUntil(ctx, at); err != nil {
			return err
		}
		if i == 0 {
			if err := b.waitAnalyzed(ctx); err != nil {
				return err
			}
		}
		var profiles [2]string // churn, expiry
		if cfg.ProfileDir != "" {
			for j, name := range []string{"churn", "expiry"} {
				profiles[j] = filepath.Join(cfg.ProfileDir, fmt.Sprintf("storm-%d-%s.pprof", i, name))
			}
			if err := harness.FetchCPUProfile(ctx, b.cfg.NATSProfileURL, stormProfileSpan, profiles[0]); err != nil {
				return fmt.Errorf("storm %d: nats-server: %w", i, err)
			}
		}
		keys, deadlines := cfg.Storm(i)
		env := b.watchStorm(ctx, deadlines[0], deadlines[len(deadlines)-1], profiles[1])
		res, err := b.Storm(ctx, keys, deadlines, cfg.Grace)
		if err != nil && !errors.Is(err, harness.ErrIncomplete) {
			return err
		}
		b.rep.Line("result", "peer", "timeoutd", "workload", "sustained", "measured", "storm", "storm", i,
			"t_s", deadlines[0].Sub(start).Seconds(), "n", len(keys), "complete", res.Complete, "received", res.Received,
			"arrival_p50_ms", res.Arrival.P50, "arrival_p99_ms", res.Arrival.P99,
			"fired_p50_ms", res.FiredAt.P50, "fired_p99_ms", res.FiredAt.P99)
		kv, err := env()
		if err != nil {
			return fmt.Errorf("storm %d: %w", i, err)
		}
		if cfg.ProfileDir != "" {
			kv = append(kv, "churn_profile", profiles[0], "expiry_profile", profiles[1])
		}
		b.rep.Line("result", append([]any{"peer", "timeoutd", "workload", "sustained", "measured", "storm_env", "storm", i}, kv...)...)
	}
}

// pgActivity holds the Postgres server's cumulative WAL and checkpoint
// counters.
type pgActivity struct {
	walRecords, walFPI, walBytes, walSyncs, checkpoints, buffersCheckpoint int64
	walSyncMs                                                              float64
}

func readPGActivity(ctx context.Context, conn *pgx.Conn) (pgActivity, error) {
	var a pgActivity
	err := conn.QueryRow(ctx, `SELECT w.wal_records, w.wal_fpi, w.wal_bytes::bigint, w.wal_sync, w.wal_sync_time,
			b.checkpoints_timed + b.checkpoints_req, b.buffers_checkpoint
		FROM pg_stat_wal w, pg_stat_bgwriter b`).Scan(&a.walRecords, &a.walFPI, &a.walBytes, &a.walSyncs, &a.walSyncMs, &a.checkpoints, &a.buffersCheckpoint)
	if err != nil {
		return a, fmt.Errorf("wal and checkpoint stats: %w", err)
	}
	return a, nil
}

// stormWatchInterval is how often watchStorm samples.
const stormWatchInterval = 250 * time.Millisecond

// watchStorm samples, from first to last (a storm's deadlines), what ran
// beside the storm's expiries, so that a slow storm can be told from a
// quick one by what the machine did rather than by guess:
//   - the WAL Postgres wrote (records, full-page images, bytes), its
//     checkpoints and the buffers they wrote;
//   - the share of stormWatchInterval samples with an autovacuum worker
//     running, the tables it worked on and the timeline slots (see
//     timeline) it ran in;
//   - timeoutd's GC cycles and their pauses;
//   - per timeline slot: Postgres's WAL syncs and the time they took
//     (track_wal_io_timing), the disks' weighted I/O time
//     (harness.DiskWait), and the GC cycles of timeoutd and of the harness,
//     each counted in the slot where the sample that saw it was read (a
//     sample late by a slow query lands in the next slot);
//   - when profile is set, a CPU profile of nats-server written there.
//
// The returned function waits for the sampling to end and returns its
// key-value pairs.
func (b *Bench) watchStorm(ctx context.Context, first, last time.Time, profile string) func() ([]any, error) {
	type result struct {
		kv  []any
		err error
	}
	done := make(chan result, 1)
	go func() {
		kv, err := b.sampleStorm(ctx, first, last, profile)
		done <- result{kv, err}
	}()
	return func() ([]any, error) {
		r := <-done
		return r.kv, r.err
	}
}

// stormCounters are the cumulative counters a storm's watch reads at each
// sample.
type stormCounters struct {
	pg                  pgActivity
	disk                time.Duration // harness.DiskWait
	gcCycles, gcSeconds float64       // timeoutd's GC
	harnessGC           uint64        // harnessGCCycles
}

// timeoutd's GC counters, from its /metrics.
const (
	gcCountMetric = "go_gc_duration_seconds_count"
	gcSumMetric   = "go_gc_duration_seconds_sum"
)

func (b *Bench) readStormCounters(ctx context.Context, conn *pgx.Conn) (stormCounters, error) {
	var c stormCounters
	var err error
	if c.pg, err = readPGActivity(ctx, conn); err != nil {
		return c, err
	}
	if c.disk, err = harness.DiskWait(); err != nil {
		return c, err
	}
	err = b.metrics(ctx, func(r io.Reader) error {
		v, err := parseValues(r, gcCountMetric, gcSumMetric)
		c.gcCycles, c.gcSeconds = v[gcCountMetric], v[gcSumMetric]
		return err
	})
	c.harnessGC = harnessGCCycles()
	return c, err
}

// sampleStorm samples from first to last as watchStorm describes and
// returns the key-value pairs of what it saw.
func (b *Bench) sampleStorm(ctx context.Context, first, last time.Time, profile string) ([]any, error) {
	conn, err := pgx.Connect(ctx, b.cfg.DatabaseURL)
	if err != nil {
		return nil, fmt.Errorf("connect timeoutd database: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if err := harness.SleepUntil(ctx, first); err != nil {
		return nil, err
	}
	var profErr chan error
	if profile != "" {
		profErr = make(chan error, 1)
		go func() { profErr <- harness.FetchCPUProfile(ctx, b.cfg.NATSProfileURL, last.Sub(first), profile) }()
	}
	c0, err := b.readStormCounters(ctx, conn)
	if err != nil {
		return nil, err
	}
	w := newStormSamples(first, last, c0)
	t := time.NewTicker(stormWatchInterval)
	defer t.Stop()
	for time.Now().Before(last) {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-t.C:
		}
		if err := b.sampleStormOnce(ctx, conn, w); err != nil {
			return nil, err
		}
	}
	if profErr != nil {
		if err := <-profErr; err != nil {
			return nil, fmt.Errorf("nats-server: %w", err)
		}
	}
	return w.kv(), nil
}

// stormSamples accumulates a storm's watch: the autovacuum samples, and the
// counters' growth per timeline slot.
type stormSamples struct {
	first, last        time.Time
	samples, vacuuming int
	tables             map[string]bool
	vacSlots           []string // the timeline slots with an autovacuum running
	syncs, syncMs      []float64
	diskMs             []float64
	gcs, harnessGCs    []float64
	c0, prev           stormCounters
}

// newStormSamples returns the empty samples of the watch from first to
// last, whose counters read c0 at the start.
func newStormSamples(first, last time.Time, c0 stormCounters) *stormSamples {
	n := int(last.Sub(first)/harness.TimelineSlot) + 1
	return &stormSamples{first: first, last: last, tables: map[string]bool{},
		syncs: make([]float64, n), syncMs: make([]float64, n), diskMs: make([]float64, n),
		gcs: make([]float64, n), harnessGCs: make([]float64, n), c0: c0, prev: c0}
}

// sampleStormOnce takes one sample into w: the autovacuum workers running
// and the counters' growth since the previous sample.
func (b *Bench) sampleStormOnce(ctx context.Context, conn *pgx.Conn, w *stormSamples) error {
	slot := min(int(time.Since(w.first)/harness.TimelineSlot), len(w.syncs)-1)
	// Autovacuum of any database; the tables of other databases than
	// timeoutd's have no name here.
	rows, err := conn.Query(ctx, `SELECT coalesce(c.relname, '?') FROM pg_stat_progress_vacuum v
		LEFT JOIN pg_class c ON c.oid = v.relid AND v.datname = current_database()`)
	if err != nil {
		return fmt.Errorf("vacuum progress: %w", err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return fmt.Errorf("vacuum progress: %w", err)
	}
	w.samples++
	if len(names) > 0 {
		w.vacuuming++
		if s := strconv.Itoa(slot); !slices.Contains(w.vacSlots, s) {
			w.vacSlots = append(w.vacSlots, s)
		}
	}
	for _, name := range names {
		w.tables[name] = true
	}
	c, err := b.readStormCounters(ctx, conn)
	if err != nil {
		return err
	}
	w.syncs[slot] += float64(c.pg.walSyncs - w.prev.pg.walSyncs)
	w.syncMs[slot] += c.pg.walSyncMs - w.prev.pg.walSyncMs
	w.diskMs[slot] += float64(c.disk-w.prev.disk) / float64(time.Millisecond)
	w.gcs[slot] += c.gcCycles - w.prev.gcCycles
	w.harnessGCs[slot] += float64(c.harnessGC - w.prev.harnessGC)
	w.prev = c
	return nil
}

// kv returns the key-value pairs of the watch.
func (w *stormSamples) kv() []any {
	pg0, pg1 := w.c0.pg, w.prev.pg
	vacuumed := slices.Sorted(maps.Keys(w.tables))
	return []any{"seconds", w.last.Sub(w.first).Seconds(),
		"wal_records", pg1.walRecords - pg0.walRecords, "wal_fpi", pg1.walFPI - pg0.walFPI,
		"wal_mb", float64(pg1.walBytes-pg0.walBytes) / (1 << 20),
		"wal_syncs", pg1.walSyncs - pg0.walSyncs, "wal_sync_ms", pg1.walSyncMs - pg0.walSyncMs,
		"checkpoints", pg1.checkpoints - pg0.checkpoints, "buffers_checkpoint", pg1.buffersCheckpoint - pg0.buffersCheckpoint,
		"autovacuum_share", float64(w.vacuuming) / float64(max(w.samples, 1)), "autovacuum_tables", cmp.Or(strings.Join(vacuumed, "+"), "-"),
		"autovacuum_slots", cmp.Or(strings.Join(w.vacSlots, ","), "-"),
		"timeoutd_gc_cycles", w.prev.gcCycles - w.c0.gcCycles, "timeoutd_gc_pause_ms", 1000 * (w.prev.gcSeconds - w.c0.gcSeconds),
		"wal_syncs_per_slot", harness.JoinFloats(w.syncs, 0), "wal_sync_ms_per_slot", harness.JoinFloats(w.syncMs, 1),
		"disk_wait_ms_per_slot", harness.JoinFloats(w.diskMs, 0),
		"timeoutd_gc_per_slot", harness.JoinFloats(w.gcs, 0), "harness_gc_per_slot", harness.JoinFloats(w.harnessGCs, 0),
	}
}

// harnessGCCycles returns the GC cycles this process (the harness, whose
// consumer timestamps the events' arrival) has completed.
func harnessGCCycles() uint64 {
	s := []metrics.Sample{{Name: "/gc/cycles/total:gc-cycles"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// waitAnalyzed waits until every table of timeoutd's database holding more
// than analyzedMinRows rows has been analysed at least once, and prints how
// long it waited.
func (b *Bench) waitAnalyzed(ctx context.Context) error {
	conn, err := pgx.Connect(ctx, b.cfg.DatabaseURL)
	if err != nil {
		return fmt.Errorf("connect timeoutd database: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	start := time.Now()
	err = harness.Poll(ctx, analyzedTimeout, time.Second, func() (bool, error) {
		var never int
		err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_stat_user_tables
			WHERE n_live_tup > $1 AND analyze_count + autoanalyze_count = 0`, analyzedMinRows).Scan(&never)
		return err == nil && never == 0, err
	})
	if err != nil {
		return fmt.Errorf("wait for the first analyze: %w", err)
	}
	b.rep.Line("note", "peer", "timeoutd", "workload", "sustained", "waited_for_first_analyze_s", time.Since(start).Seconds())
	return nil
}

// sampler prints the interval, table and stream lines of Sustained.
type sampler struct {
	b     *Bench
	conn  *pgx.Conn
	cpus  harness.CPUs
	churn *Churn
	start time.Time
	// The previous sample; prev.at is zero before the first.
	prev struct {
		at    time.Time
		cpu   harness.CPUSample
		stats api.Stats
		churn int64
	}
}

// every records a sample each interval until ctx ends.
func (s *sampler) every(ctx context.Context, interval time.Duration) error {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		if err := s.record(ctx); err != nil && ctx.Err() == nil {
			return err
		}
	}
}

// record samples, prints the interval since the previous sample (if any),
// then the tables and streams.
func (s *sampler) record(ctx context.Context) error {
	cpu, err := s.cpus.Sample()
	if err != nil {
		return fmt.Errorf("sample: %w", err)
	}
	now := time.Now()
	st, err := s.b.Stats(ctx)
	if err != nil {
		return fmt.Errorf("sample: %w", err)
	}
	churn, failed := s.churn.Published()
	var lease map[string]float64
	if err := s.b.metrics(ctx, func(r io.Reader) (err error) { lease, err = parseValues(r, leaseMetrics...); return err }); err != nil {
		return fmt.Errorf("sample: lease metrics: %w", err)
	}
	t := now.Sub(s.start).Seconds()
	if !s.prev.at.IsZero() {
		cur, old := st.Totals, s.prev.stats.Totals
		commands := (cur.Scheduled - old.Scheduled) + (cur.Cleared - old.Cleared)
		expiries := (cur.Fired - old.Fired) + (cur.Missed - old.Missed)
		kv := []any{"peer", "timeoutd", "workload", "sustained", "measured", "interval", "t_s", t,
			"seconds", now.Sub(s.prev.at).Seconds(), "churn_published", churn - s.prev.churn, "churn_failed_total", failed,
			"commands", commands, "expiries", expiries, "pending", st.Pending,
			"lease_lapses_total", lease["timeoutd_lease_lapses_total"], "partitions_lost_total", lease["timeoutd_partitions_lost_total"],
			"partitions_released_total", lease["timeoutd_partitions_released_total"]}
		kv = append(kv, s.cpus.PerUnit("us_per_unit_", s.prev.cpu, cpu, int(commands+expiries))...)
		s.b.rep.Line("result", kv...)
	}
	s.prev.at, s.prev.cpu, s.prev.stats, s.prev.churn = now, cpu, st, churn
	if err := s.tables(ctx, t); err != nil {
		return err
	}
	if err := s.streams(ctx, t); err != nil {
		return err
	}
	m, err := harness.ReadMemory(s.b.proc.PID())
	if err != nil {
		return err
	}
	s.b.rep.Line("result", "peer", "timeoutd", "workload", "sustained", "measured", "rss", "t_s", t, "rss_mb", float64(m.RSSBytes)/(1<<20))
	return nil
}

// tables prints each table's size and tuples, partitions summed into their
// parent.
func (s *sampler) tables(ctx context.Context, t float64) error {
	rows, err := s.conn.Query(ctx, `SELECT coalesce(p.relname, c.relname), count(*),
			sum(pg_total_relation_size(c.oid))::bigint, sum(pg_indexes_size(c.oid))::bigint,
			sum(st.n_live_tup)::bigint, sum(st.n_dead_tup)::bigint, sum(st.n_mod_since_analyze)::bigint,
			sum(st.vacuum_count + st.autovacuum_count)::bigint, sum(st.analyze_count + st.autoanalyze_count)::bigint
		FROM pg_stat_user_tables st JOIN pg_class c ON c.oid = st.relid
		LEFT JOIN pg_inherits i ON i.inhrelid = c.oid LEFT JOIN pg_class p ON p.oid = i.inhparent
		GROUP BY 1 ORDER BY 1`)
	if err != nil {
		return fmt.Errorf("table stats: %w", err)
	}
	type table struct {
		name                                           string
		parts                                          int64
		total, index, live, dead, modified, vac, analy int64
	}
	var tables []table
	for rows.Next() {
		var tb table
		if err := rows.Scan(&tb.name, &tb.parts, &tb.total, &tb.index, &tb.live, &tb.dead, &tb.modified, &tb.vac, &tb.analy); err != nil {
			return fmt.Errorf("scan table stats: %w", err)
		}
		tables = append(tables, tb)
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("table stats: %w", err)
	}
	for _, tb := range tables {
		s.b.rep.Line("result", "peer", "timeoutd", "workload", "sustained", "measured", "pg", "t_s", t, "table", tb.name,
			"partitions", tb.parts, "total_bytes", tb.total, "index_bytes", tb.index, "live_tup", tb.live, "dead_tup", tb.dead,
			"mod_since_analyze", tb.modified, "vacuums", tb.vac, "analyzes", tb.analy)
	}
	return nil
}

// streams prints the state of the command streams (every field summed over
// the partitions' streams, as TIMEOUT_COMMANDS_*) and of the expiry stream.
func (s *sampler) streams(ctx context.Context, t float64) error {
	state := func(name string) (jetstream.StreamState, error) {
		str, err := s.b.js.Stream(ctx, name)
		if err != nil {
			return jetstream.StreamState{}, fmt.Errorf("stream %s: %w", name, err)
		}
		return str.CachedInfo().State, nil
	}
	var cmds jetstream.StreamState
	for _, name := range events.CommandStreams() {
		st, err := state(name)
		if err != nil {
			return err
		}
		cmds.Msgs, cmds.Bytes, cmds.NumDeleted, cmds.Consumers = cmds.Msgs+st.Msgs, cmds.Bytes+st.Bytes, cmds.NumDeleted+st.NumDeleted, cmds.Consumers+st.Consumers
		cmds.FirstSeq, cmds.LastSeq = cmds.FirstSeq+st.FirstSeq, cmds.LastSeq+st.LastSeq
	}
	exp, err := state(events.StreamExpiries)
	if err != nil {
		return err
	}
	for _, row := range []struct {
		name string
		st   jetstream.StreamState
	}{{events.StreamCommandsPrefix + "*", cmds}, {events.StreamExpiries, exp}} {
		st := row.st
		s.b.rep.Line("result", "peer", "timeoutd", "workload", "sustained", "measured", "stream", "t_s", t, "stream", row.name,
			"messages", st.Msgs, "bytes", st.Bytes, "num_deleted", st.NumDeleted, "first_seq", st.FirstSeq, "last_seq", st.LastSeq,
			"consumers", st.Consumers)
	}
	return nil
}
