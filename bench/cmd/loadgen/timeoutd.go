package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"hash/fnv"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/ordertimeout/ordertimeout/bench/internal/harness"
	"github.com/ordertimeout/ordertimeout/bench/internal/natschedbench"
	"github.com/ordertimeout/ordertimeout/bench/internal/riverbench"
	"github.com/ordertimeout/ordertimeout/bench/internal/timeoutdbench"
)

// timeoutdWorkload measures timeoutd and River with the same keys and
// deadlines on the same Postgres server.
type timeoutdWorkload struct {
	n            int
	stormN       int
	stormSpan    time.Duration
	stormLead    time.Duration
	stormGrace   time.Duration
	readyTimeout time.Duration
	peers        string
	riverStorms  string
	riverWorkers int
	cancelSample int
	cancelConc   int
	steps        map[string]bool
	uuidKeys     bool
	commandBatch int

	capacityRates ratesFlag
	capacityP99   time.Duration

	sustainedStormN int

	// pg is -pg: the Postgres topology (pgSingle, pgPatroni).
	pg string

	sustained timeoutdbench.SustainedConfig

	// stormProfiles is -storm-profiles (timeoutdbench.Config.ProfileDir).
	stormProfiles string
	// timeoutdEnv is -timeoutd-env (timeoutdbench.Config.Env).
	timeoutdEnv envFlag
}

// envFlag is a repeatable flag of TIMEOUTD_* settings, KEY=VALUE each.
type envFlag []string

func (e *envFlag) String() string { return strings.Join(*e, " ") }

func (e *envFlag) Set(v string) error {
	if k, _, ok := strings.Cut(v, "="); !ok || !strings.HasPrefix(k, "TIMEOUTD_") {
		return fmt.Errorf("%q: want TIMEOUTD_<NAME>=<value>", v)
	}
	*e = append(*e, v)
	return nil
}

// stepsFlag is the set of -steps.
type stepsFlag map[string]bool

func (s stepsFlag) String() string { return "" }

func (s stepsFlag) Set(v string) error {
	clear(s)
	for _, step := range strings.Split(v, ",") {
		switch step {
		case "ingest", "bytes", "recovery", "clear", "backlog", "storm", "capacity", "sustained":
			s[step] = true
		default:
			return fmt.Errorf("unknown step %q: want ingest, bytes, recovery, clear, backlog, storm, capacity or sustained", step)
		}
	}
	if (s["bytes"] || s["recovery"] || s["clear"]) && !s["ingest"] {
		return fmt.Errorf("steps bytes, recovery and clear need ingest")
	}
	if s["backlog"] && !s["clear"] {
		return fmt.Errorf("step backlog needs clear")
	}
	return nil
}

func timeoutdFlags(fs *flag.FlagSet) *timeoutdWorkload {
	w := &timeoutdWorkload{steps: map[string]bool{"ingest": true, "bytes": true, "recovery": true, "clear": true, "backlog": true, "storm": true}}
	fs.Var(stepsFlag(w.steps), "steps", "steps to run, comma-separated (ingest,bytes,recovery,clear,backlog,storm,capacity,sustained; River runs insert, bytes, JobCancel, storms and capacity for them, not sustained); capacity and sustained are not in the default")
	fs.IntVar(&w.n, "n", 100_000, "timeouts for ingest, bytes, RSS, recovery and clear (the targets use 1000000)")
	fs.IntVar(&w.stormN, "storm-n", 200_000, "timeouts of the expiry storm")
	fs.DurationVar(&w.stormSpan, "storm-span", 10*time.Second, "the storm's deadlines are spread uniformly over this span")
	fs.DurationVar(&w.stormLead, "storm-lead", 20*time.Second, "the first storm deadline is this long after the storm's first command")
	fs.DurationVar(&w.stormGrace, "storm-grace", 2*time.Minute, "a storm gives up on events still missing this long after its last deadline")
	fs.DurationVar(&w.readyTimeout, "ready-timeout", timeoutdbench.ReadyTimeoutDefault, "how long timeoutd may take from exec to /readyz (recovery)")
	fs.StringVar(&w.peers, "peers", "timeoutd,river,natsched", "peers to measure, comma-separated: timeoutd, river, natsched (NATS JetStream's own message schedules on the same server)")
	fs.BoolVar(&w.uuidKeys, "uuid-keys", false, "36-character time-ordered UUIDv7 keys, like the orders service's ids, instead of short <prefix>-<i> keys")
	fs.IntVar(&w.commandBatch, "command-batch", 0, "pack every window of this many commands into batches of a partition's commands (events.Batch, as the orders relay packs a claim of 1000 rows); 0 publishes one message per command")
	fs.StringVar(&w.riverStorms, "river-storms", "available:1ms/1ms,available:10ms/50ms,scheduled:10ms/50ms",
		"River storm runs, comma-separated mode:FetchCooldown/FetchPollInterval; mode available (due jobs fetched directly) or scheduled (River's job scheduler)")
	fs.IntVar(&w.riverWorkers, "river-workers", riverbench.WorkersDefault, "River storm MaxWorkers")
	fs.IntVar(&w.cancelSample, "river-cancel-sample", riverbench.CancelSampleDefault, "JobCancel is timed on this many jobs")
	fs.IntVar(&w.cancelConc, "river-cancel-concurrency", riverbench.CancelConcurrencyDefault, "goroutines calling JobCancel")
	w.capacityRates = ratesFlag{5000, 10000, 15000, 20000, 30000, 40000}
	fs.Var(&w.capacityRates, "capacity-rates", "capacity: storm rates in deadlines/s, increasing; each storm spreads rate × -storm-span deadlines over -storm-span")
	fs.DurationVar(&w.capacityP99, "capacity-p99", 100*time.Millisecond, "capacity: stop at the first storm whose lateness p99 (timeoutd: arrival at the consumer) exceeds this, or that does not complete within -storm-grace")
	fs.DurationVar(&w.sustained.Duration, "sustained-duration", 30*time.Minute, "sustained: length of the run")
	fs.IntVar(&w.sustained.Rate, "sustained-rate", 1000, "sustained: churn commands/s on live orders (sets extending, clears settling, sets opening)")
	fs.IntVar(&w.sustained.Live, "sustained-live", timeoutdbench.SustainedLiveDefault, "sustained: live orders of the churn")
	fs.DurationVar(&w.sustained.Deadline, "sustained-deadline", timeoutdbench.SustainedDeadlineDefault, "sustained: the churn's deadlines are this far ahead (so it fires nothing)")
	fs.DurationVar(&w.sustained.StormEvery, "sustained-storm-every", 5*time.Minute, "sustained: a storm of -sustained-storm-n deadlines over -storm-span starts this often, the first after -sustained-warmup")
	fs.DurationVar(&w.sustained.Warmup, "sustained-warmup", timeoutdbench.SustainedWarmupDefault, "sustained: churn alone from the start to the first storm")
	fs.IntVar(&w.sustainedStormN, "sustained-storm-n", 100_000, "sustained: deadlines of each storm")
	fs.DurationVar(&w.sustained.Interval, "sustained-interval", timeoutdbench.SustainedIntervalDefault, "sustained: CPU, table and stream sampling interval")
	fs.StringVar(&w.sustained.ProfileDir, "sustained-profiles", "", "sustained: directory (created) for two nats-server CPU profiles per storm, the churn's just before it and its expiries'; the storms start 10 s later")
	fs.StringVar(&w.pg, "pg", pgSingle, "Postgres: single (one server) or patroni (three members under Patroni, synchronous replication in strict mode, and a three-member etcd, on a docker network of their own; timeoutd and River get the multi-host URL with target_session_attrs=read-write); the CPU lines' postgres is then the three members summed, etcd the three etcd members summed, both in the total")
	fs.Var(&w.timeoutdEnv, "timeoutd-env", "a setting of the timeoutd measured, TIMEOUTD_<NAME>=<value> (repeatable; e.g. TIMEOUTD_TICK=5ms), printed in the workload line")
	fs.StringVar(&w.stormProfiles, "storm-profiles", "", "storm, capacity: directory (created) for each timeoutd storm's CPU profiles of timeoutd and nats-server over its deadlines (storm-<i>-<process>.pprof), and its Postgres statements' cost per expiry in the report (pg_stat_statements, then preloaded); not with sustained")
	return w
}

// spread returns n keys and deadlines uniformly spread over span from
// start: keys "<prefix>-<i>", or with uuid time-ordered UUIDv7 strings
// unique to (prefix, i).
func spread(prefix string, n int, start time.Time, span time.Duration, uuid bool) ([]string, []time.Time) {
	keys := make([]string, n)
	deadlines := make([]time.Time, n)
	for i := range n {
		if uuid {
			keys[i] = uuidKey(prefix, i, start)
		} else {
			keys[i] = fmt.Sprintf("%s-%d", prefix, i)
		}
		deadlines[i] = start.Add(time.Duration(int64(span) * int64(i) / int64(n))).UTC()
	}
	return keys, deadlines
}

// uuidKey returns a UUIDv7 whose timestamp advances a millisecond every 50
// keys from base (order ids created at 50k/s) and whose random bits hold a
// hash of prefix and i itself, so keys are unique to (prefix, i).
func uuidKey(prefix string, i int, base time.Time) string {
	h := fnv.New64a()
	h.Write([]byte(prefix))
	sum := h.Sum64()
	ms := uint64(base.UnixMilli()) + uint64(i/50)
	randA := sum & 0xfff
	randB := (sum>>12)&0x3fffffff<<32 | uint64(uint32(i)) // 62 bits
	return fmt.Sprintf("%08x-%04x-7%03x-%04x-%012x", ms>>16&0xffffffff, ms&0xffff, randA,
		0x8000|randB>>48&0x3fff, randB&0xffffffffffff)
}

func (w *timeoutdWorkload) run(ctx context.Context, o options, rep *harness.Report) error {
	if w.stormProfiles != "" {
		if w.steps["sustained"] {
			return errors.New("-storm-profiles and the sustained step both take nats-server's one CPU profile at a time: use -sustained-profiles")
		}
		if err := os.MkdirAll(w.stormProfiles, 0o755); err != nil {
			return err
		}
		harness.PostgresArgs = append(harness.PostgresArgs, harness.StatementsArgs...)
	}
	in, cleanup, err := startInfra(ctx, o, rep, w.pg, true)
	defer cleanup()
	if err != nil {
		return err
	}
	rep.Line("workload", "name", "timeoutd", "n", w.n, "storm_n", w.stormN, "storm_span_ms", w.stormSpan, "storm_lead_ms", w.stormLead, "peers", w.peers, "command_batch", w.commandBatch, "pg", w.pg, "timeoutd_env", w.timeoutdEnv.String())
	pgCPU, err := in.postgresCPU(ctx)
	if err != nil {
		return err
	}
	natsCPU, err := in.nats.CPU(ctx)
	if err != nil {
		return err
	}
	nats := harness.CPUSource{Name: "nats", Platform: true, Time: natsCPU}
	run := time.Now().Unix()
	// Far-future deadlines: nothing fires while ingest, bytes and recovery
	// are measured.
	keys, deadlines := spread(fmt.Sprintf("k%d", run), w.n, time.Now().Add(2*time.Hour), time.Hour, w.uuidKeys)
	// A peer that fails is reported and the next one still runs.
	var errs []error
	for _, peer := range strings.Split(w.peers, ",") {
		switch peer {
		case "timeoutd":
			err = w.timeoutd(ctx, o, rep, in, append(slices.Clone(pgCPU), nats), keys, deadlines)
		case "river":
			err = w.river(ctx, rep, in, pgCPU, keys, deadlines)
		case "natsched":
			err = w.natsched(ctx, rep, in, harness.CPUs{nats}, keys, deadlines)
		default:
			err = fmt.Errorf("unknown peer %q", peer)
		}
		if err != nil {
			rep.Line("error", "peer", peer, "error", err.Error())
			errs = append(errs, fmt.Errorf("%s: %w", peer, err))
		}
	}
	if in.patroni != nil {
		// A failover during the run shows as another leader or timeline.
		ms, err := in.patroni.State(ctx)
		if err != nil {
			errs = append(errs, err)
		}
		rep.Line("infra", "pg", w.pg, "state_at_end", ms.String(), "leader_container_at_start", in.patroni.Leader.Name)
	}
	return errors.Join(errs...)
}

// stormKeys returns n keys, unique to the second and peer, and their
// deadlines over -storm-span from -storm-lead ahead.
func (w *timeoutdWorkload) stormKeys(peer string, n int) ([]string, []time.Time) {
	return spread(fmt.Sprintf("s%d%s", time.Now().Unix(), peer), n, time.Now().Add(w.stormLead), w.stormSpan, w.uuidKeys)
}

// timeoutd measures the timeoutd peer; cpus are the containers whose CPU
// time its storm reports beside timeoutd's.
func (w *timeoutdWorkload) timeoutd(ctx context.Context, o options, rep *harness.Report, in *infra, cpus harness.CPUs, keys []string, deadlines []time.Time) error {
	b, err := w.startTimeoutd(ctx, o, rep, in, cpus)
	if err != nil {
		return err
	}
	defer b.Close()
	if err := b.Memory(ctx, "idle"); err != nil {
		return err
	}
	if err := w.timeoutdKeySteps(ctx, b, keys, deadlines); err != nil {
		return err
	}
	if err := w.timeoutdStorms(ctx, rep, b); err != nil {
		return err
	}
	if !w.steps["sustained"] {
		return nil
	}
	return w.timeoutdSustained(ctx, b)
}

// startTimeoutd builds timeoutd, creates its database and starts it.
func (w *timeoutdWorkload) startTimeoutd(ctx context.Context, o options, rep *harness.Report, in *infra, cpus harness.CPUs) (*timeoutdbench.Bench, error) {
	bin, err := harness.Build(ctx, o.root, "./services/timeoutd/cmd/timeoutd", o.work)
	if err != nil {
		return nil, err
	}
	db, err := in.createDatabase(ctx, "timeoutd")
	if err != nil {
		return nil, err
	}
	return timeoutdbench.New(ctx, timeoutdbench.Config{
		Bin: bin, DatabaseURL: db, NATSURL: in.nats.URL, NATSProfileURL: in.nats.ProfileURL, LogPath: filepath.Join(o.work, "timeoutd.log"),
		ReadyTimeout: w.readyTimeout, CPUs: cpus, CommandBatch: w.commandBatch, ProfileDir: w.stormProfiles, Env: w.timeoutdEnv,
	}, rep)
}

// timeoutdKeySteps runs the selected steps on the workload's keys: ingest,
// bytes, recovery, clear and backlog.
func (w *timeoutdWorkload) timeoutdKeySteps(ctx context.Context, b *timeoutdbench.Bench, keys []string, deadlines []time.Time) error {
	n := int64(len(keys))
	if w.steps["ingest"] {
		if err := b.Live(ctx, "ingest", len(keys), n, timeoutdbench.SetCommands(keys, deadlines, 1)); err != nil {
			return err
		}
		if err := b.Memory(ctx, "after_ingest"); err != nil {
			return err
		}
	}
	if w.steps["bytes"] {
		if err := b.Bytes(ctx, len(keys)); err != nil {
			return err
		}
	}
	if w.steps["recovery"] {
		if err := b.Recovery(ctx, len(keys)); err != nil {
			return err
		}
	}
	if w.steps["clear"] {
		if err := b.Live(ctx, "clear", len(keys), -n, timeoutdbench.ClearCommands(keys, 2)); err != nil {
			return err
		}
	}
	if !w.steps["backlog"] {
		return nil
	}
	// The same keys again, at newer versions than their tombstones.
	if err := b.Backlog(ctx, "ingest", len(keys), n, timeoutdbench.SetCommands(keys, deadlines, 3)); err != nil {
		return err
	}
	if err := b.Backlog(ctx, "clear", len(keys), -n, timeoutdbench.ClearCommands(keys, 4)); err != nil {
		return err
	}
	// New keys, as InsertMany inserts new jobs: rows inserted, where the
	// sets above update tombstones.
	fresh, _ := spread("n", len(keys), time.Now(), time.Hour, w.uuidKeys)
	return b.Backlog(ctx, "ingest_new", len(fresh), n, timeoutdbench.SetCommands(fresh, deadlines, 1))
}

// timeoutdStorms runs the selected storm steps: one storm, and the
// capacity search.
func (w *timeoutdWorkload) timeoutdStorms(ctx context.Context, rep *harness.Report, b *timeoutdbench.Bench) error {
	if w.steps["storm"] {
		sk, sd := w.stormKeys("t", w.stormN)
		if _, err := b.Storm(ctx, sk, sd, w.stormGrace); err != nil {
			return err
		}
	}
	if !w.steps["capacity"] {
		return nil
	}
	return w.capacity(ctx, rep, []any{"peer", "timeoutd"}, func(ctx context.Context, n int) (time.Duration, error) {
		sk, sd := w.stormKeys(fmt.Sprintf("c%d", n), n)
		res, err := b.Storm(ctx, sk, sd, w.stormGrace)
		return res.Arrival.P99, err
	})
}

// timeoutdSustained runs the sustained load with its storms.
func (w *timeoutdWorkload) timeoutdSustained(ctx context.Context, b *timeoutdbench.Bench) error {
	cfg := w.sustained
	cfg.Prefix = fmt.Sprintf("o%d", time.Now().Unix())
	cfg.Grace = w.stormGrace
	cfg.Storm = func(i int) ([]string, []time.Time) { return w.stormKeys(fmt.Sprintf("u%d", i), w.sustainedStormN) }
	if cfg.ProfileDir != "" {
		if err := os.MkdirAll(cfg.ProfileDir, 0o755); err != nil {
			return err
		}
	}
	return b.Sustained(ctx, cfg)
}

// river measures the River peer; cpus are the containers whose CPU time
// its storms report beside this process's.
func (w *timeoutdWorkload) river(ctx context.Context, rep *harness.Report, in *infra, cpus harness.CPUs, keys []string, deadlines []time.Time) error {
	db, err := in.createDatabase(ctx, "river")
	if err != nil {
		return err
	}
	b, err := riverbench.New(ctx, riverbench.Config{
		DatabaseURL: db, Workers: w.riverWorkers, CancelSample: w.cancelSample, CancelConcurrency: w.cancelConc, CPUs: cpus,
	}, rep)
	if err != nil {
		return err
	}
	defer b.Close()
	if w.steps["ingest"] {
		ids, err := b.Insert(ctx, keys, deadlines)
		if err != nil {
			return err
		}
		if w.steps["bytes"] {
			if err := b.Bytes(ctx, len(keys)); err != nil {
				return err
			}
		}
		if w.steps["clear"] {
			if err := b.Cancel(ctx, ids); err != nil {
				return err
			}
		}
	}
	if !w.steps["storm"] && !w.steps["capacity"] {
		return nil
	}
	// One storm falling behind does not hide the others'.
	var errs []error
	for i, s := range strings.Split(w.riverStorms, ",") {
		st, err := riverbench.ParseStorm(s)
		if err != nil {
			return err
		}
		if w.steps["storm"] {
			if err := b.Reset(ctx); err != nil {
				return err
			}
			sk, sd := w.stormKeys(fmt.Sprintf("r%d", i), w.stormN)
			if _, err := b.Storm(ctx, st, sk, sd, w.stormGrace); err != nil {
				errs = append(errs, err)
			}
		}
		if w.steps["capacity"] {
			labels := []any{"peer", "river", "mode", string(st.Mode), "fetch_cooldown", st.FetchCooldown.String(), "fetch_poll_interval", st.FetchPollInterval.String()}
			err := w.capacity(ctx, rep, labels, func(ctx context.Context, n int) (time.Duration, error) {
				if err := b.Reset(ctx); err != nil {
					return 0, err
				}
				sk, sd := w.stormKeys(fmt.Sprintf("r%dc%d", i, n), n)
				lateness, err := b.Storm(ctx, st, sk, sd, w.stormGrace)
				return lateness.P99, err
			})
			if err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// natsched measures NATS JetStream's own message schedules on the NATS
// server timeoutd uses: with ingest, the bytes of the far-future keys
// pending; with clear, the cancel of half of a storm's keys before their
// deadlines; then the storm and the capacity steps. cpus are the
// containers whose CPU time it reports: nats-server.
func (w *timeoutdWorkload) natsched(ctx context.Context, rep *harness.Report, in *infra, cpus harness.CPUs, keys []string, deadlines []time.Time) error {
	pid, err := in.nats.PID(ctx)
	if err != nil {
		return err
	}
	b, err := natschedbench.New(ctx, natschedbench.Config{NATSURL: in.nats.URL, PID: pid, CPUs: cpus}, rep)
	if err != nil {
		return err
	}
	defer b.Close()
	if w.steps["ingest"] && w.steps["bytes"] {
		if err := b.Bytes(ctx, keys, deadlines); err != nil {
			return err
		}
	}
	if w.steps["clear"] {
		sk, sd := w.stormKeys("nc", len(keys))
		if err := b.Cancel(ctx, sk, sd, w.cancelConc, w.stormGrace); err != nil {
			return err
		}
	}
	if w.steps["storm"] {
		if err := b.Reset(ctx); err != nil {
			return err
		}
		sk, sd := w.stormKeys("q", w.stormN)
		if _, err := b.Storm(ctx, sk, sd, w.stormGrace); err != nil {
			return err
		}
	}
	if !w.steps["capacity"] {
		return nil
	}
	return w.capacity(ctx, rep, []any{"peer", "natsched"}, func(ctx context.Context, n int) (time.Duration, error) {
		if err := b.Reset(ctx); err != nil {
			return 0, err
		}
		sk, sd := w.stormKeys(fmt.Sprintf("qc%d", n), n)
		res, err := b.Storm(ctx, sk, sd, w.stormGrace)
		return res.P99, err
	})
}
