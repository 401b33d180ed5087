package e2e

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2/client"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ordertimeout/ordertimeout/internal/machine"
	"github.com/ordertimeout/ordertimeout/services/timeoutd"
)

// The chaos run (issue 26): the cluster (3 NATS nodes, streams R3, 3
// timeoutd, 2 orders, one Postgres) under the soak's load while a nemesis
// runs a schedule of faults drawn from a seed, then an audit from outside
// the services: the soak's auditor (orders' final states, the events stored
// in JetStream read by a consumer of its own), the write audit trigger on
// the timeouts table, and the lease rows. docs/RELIABILITY.md describes it.

// chaosConfig is a chaos run: the load, how many faults, and the kinds of
// fault they are drawn from.
type chaosConfig struct {
	Load   soakConfig
	Faults int
	Kinds  []chaosKind
	// Must names kinds every schedule has at least once: when the draw
	// left one out, it replaces a fault drawn at random (by the seed).
	Must []string
}

// chaosShort runs inside `make test` (brief, bounds for a loaded 2-core
// machine); chaosLong is `make chaos` (CHAOS=long).
var (
	// The short run always cuts an instance off the network, so that
	// `make test` checks a partitioned former owner's partitions move and
	// it writes nothing for them.
	chaosShort = chaosConfig{Load: chaosLoad(50, 40*time.Second), Faults: 4, Kinds: chaosMix, Must: []string{"netcut-timeoutd"}}
	chaosLong  = chaosConfig{Load: chaosLoad(70, 80*time.Second), Faults: 8, Kinds: slices.Concat(chaosMix, chaosHangs)}
)

// chaosLoad is the soak's load generator at rate orders/s for d, spread
// over both orders instances, deadlines 2–20 s, half of the orders paid at
// a random moment between their creation and a little after their
// deadline.
func chaosLoad(rate int, d time.Duration) soakConfig {
	return soakConfig{Rate: rate, Duration: d, MinDeadline: 2 * time.Second, MaxDeadline: 20 * time.Second,
		PayShare: 0.5, Workers: 48, HA: true, Settle: 2 * time.Minute, Stall: time.Minute}
}

// chaosKind is a kind of fault: its name, its weight in the draw, and how
// to plan one instance of it on a stack with the random source of the
// schedule (every random choice is made when planning, so a seed gives one
// schedule).
type chaosKind struct {
	Name   string
	Weight int
	Plan   func(c *chaos, r *rand.Rand) func(*testing.T) string
}

// chaosMix is the default mix of faults.
var chaosMix = []chaosKind{
	{"kill-timeoutd", 3, (*chaos).planKillTimeoutd},
	{"pause-timeoutd", 1, (*chaos).planPause},
	{"netcut-timeoutd", 1, (*chaos).planNetcut},
	{"kill-nats", 1, (*chaos).planKillNATS},
	{"restart-postgres", 1, (*chaos).planRestartPostgres},
	{"kill-orders", 1, (*chaos).planKillOrders},
	{"proxy-latency", 1, (*chaos).planLatency},
	{"proxy-reset", 1, (*chaos).planReset},
	{"proxy-timeout", 1, (*chaos).planTimeout},
	{"proxy-commit-cut", 1, (*chaos).planCommitCut},
	{"clock-skew", 1, (*chaos).planSkew},
}

// chaosHangs are the hangs: a dependency that stops answering with its
// connections open (a stalled disk, a VM pause), which a client notices
// only by its own deadlines. They are in the long run's mix (`make
// chaos`), not in the short one of `make test`, whose 40 s a hang of
// 4–8 s would mostly fill: there a frozen Postgres is proven by
// TestASilenceOfTheWholeClusterMovesNothing (the store's rule, on
// Postgres) and TestAFrozenDatabaseCostsItsLengthAndMovesNothing (the
// core, in the simulation's world); docs/RELIABILITY.md, "The chaos run",
// has what the whole stack does.
var chaosHangs = []chaosKind{
	{"freeze-postgres", 1, (*chaos).planFreezePostgres},
	{"freeze-nats", 1, (*chaos).planFreezeNATS},
	{"blackhole-postgres", 1, planBlackhole(toPostgres)},
	{"blackhole-nats", 1, planBlackhole(toNATS)},
}

// chaosKinds is every kind CHAOS_KINDS can name.
var chaosKinds = slices.Concat(chaosMix, chaosHangs, chaosFailovers)

// chaosWindowMargin extends each fault's window past its end: the system's
// catch-up after a fault is part of the fault.
const chaosWindowMargin = 5 * time.Second

// netcutBound is the most the partitions of a timeoutd cut off the
// network may take to move to the others: the lease TTL (the instances'
// default, TIMEOUTD_LEASE_TTL) plus a margin for a loaded machine.
const netcutBound = timeoutd.LeaseTTLDefault + 5*time.Second

// chaosLateBound is the chaos run's bound on any cancel event's lateness: a
// hang's bound; the lateness itself is reported, not asserted.
const chaosLateBound = time.Minute

// chaos is one run's nemesis: the stack, the schedule's record of what it
// did, and what it measured on the way.
type chaos struct {
	s  *stack
	db *pgxpool.Pool // the timeouts database, from the host
	// proxied is the timeoutd instance behind the fault proxy.
	proxied string

	mu      sync.Mutex
	windows []faultWindow
	kills   []chaosKill
	// failovers are the faults of the Postgres cluster, as measured.
	failovers []pgFailover
	// problems are violations found while the faults ran.
	problems []string
}

// faultWindow is when a fault ran, from its start to its end, and how
// many partitions acquired anew meanwhile (the leases' epochs' growth; -1
// when the leases could not be read at either end, as across a Postgres
// restart's start), and from its start until the next fault's (or the
// audit): a takeover that follows the fault's end, as after a frozen
// Postgres thawed, is counted there.
type faultWindow struct {
	Kind       string
	From, Till time.Time
	Moves      int64
	Since      int64
	epochsAt   int64 // the epochs' sum at From, -1 if unread
}

// closeLast records, under c.mu, the moves of the last window until now,
// when the epochs' sum is now.
func (c *chaos) closeLast(now int64) {
	if n := len(c.windows); n > 0 && c.windows[n-1].epochsAt >= 0 && now >= 0 {
		c.windows[n-1].Since = now - c.windows[n-1].epochsAt
	}
}

// chaosKill is a SIGKILLed timeoutd and the partitions it owned then, for
// the failover, with when each was opened by its new owner (openedSince,
// read once the killed instance is ready again: a later clock-skew fault
// replaces a container, and its log with it).
type chaosKill struct {
	Name   string
	At     time.Time
	Parts  []int
	Opened map[int]time.Time
}

// chaosSeeds returns the seeds of the runs: CHAOS_SEED (or one from the
// clock), then the next ones, CHAOS_RUNS in all (default 1).
func chaosSeeds(t *testing.T) []uint64 {
	t.Helper()
	seed := uint64(time.Now().UnixNano() % 1_000_000_000)
	if v := os.Getenv("CHAOS_SEED"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("CHAOS_SEED %q: want an unsigned integer", v)
		}
		seed = n
	}
	runs := 1
	if v := os.Getenv("CHAOS_RUNS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("CHAOS_RUNS %q: want a positive integer", v)
		}
		runs = n
	}
	out := make([]uint64, runs)
	for i := range out {
		out[i] = seed + uint64(i)
	}
	return out
}

// chaosFaultEvery is the long run's pace of faults: one per 10 s of load.
var chaosFaultEvery = chaosLong.Load.Duration / time.Duration(chaosLong.Faults)

// chaosConfigFromEnv returns the short run, or the long one with
// CHAOS=long; CHAOS_DURATION (a Go duration, at least 30 s) replaces the
// load's duration, with one fault per chaosFaultEvery of it (the soak:
// `make chaos-soak`); CHAOS_SINGLE=1 runs the single-instance stack (one
// timeoutd, behind the fault proxy, one NATS server, one orders) under the
// seed's same schedule, for the comparison; CHAOS_KINDS (comma-separated
// names of chaosKinds) replaces the mix; CHAOS_PG=patroni runs Postgres as
// the cluster under Patroni, with its faults (chaosFailovers) added to the
// mix; CHAOS_PG_CLOCKS (comma-separated offsets, one per member, e.g.
// ",+0.25,+0.5") sets the members' clocks that far from the host's.
func chaosConfigFromEnv(t *testing.T) chaosConfig {
	t.Helper()
	cfg := chaosShort
	if os.Getenv("CHAOS") == "long" {
		cfg = chaosLong
	}
	if v := os.Getenv("CHAOS_DURATION"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < 30*time.Second {
			t.Fatalf("CHAOS_DURATION %q: want a duration of at least 30s", v)
		}
		cfg.Load.Duration, cfg.Faults = d, max(1, int(d/chaosFaultEvery))
	}
	if os.Getenv("CHAOS_SINGLE") == "1" {
		cfg.Load.HA = false
	}
	switch v := os.Getenv("CHAOS_PG"); v {
	case "":
	case "patroni":
		cfg.Load = cfg.Load.onPatroni()
		cfg.Kinds = slices.Concat(cfg.Kinds, chaosFailovers)
	default:
		t.Fatalf("CHAOS_PG %q: want patroni or nothing", v)
	}
	if v := os.Getenv("CHAOS_PG_CLOCKS"); v != "" {
		if !cfg.Load.Patroni {
			t.Fatalf("CHAOS_PG_CLOCKS %q: needs CHAOS_PG=patroni", v)
		}
		cfg.Load.PGClockOffsets = strings.Split(v, ",")
		for _, o := range cfg.Load.PGClockOffsets {
			if _, err := strconv.ParseFloat(o, 64); o != "" && (err != nil || !strings.ContainsAny(o[:1], "+-")) {
				t.Fatalf("CHAOS_PG_CLOCKS %q: offset %q, want seconds with a sign (+0.25, -0.4) or nothing", v, o)
			}
		}
	}
	if v := os.Getenv("CHAOS_KINDS"); v != "" {
		cfg.Kinds = nil
		for _, name := range strings.Split(v, ",") {
			i := slices.IndexFunc(chaosKinds, func(k chaosKind) bool { return k.Name == strings.TrimSpace(name) })
			if i < 0 {
				t.Fatalf("CHAOS_KINDS: unknown kind %q", name)
			}
			cfg.Kinds = append(cfg.Kinds, chaosKinds[i])
		}
	}
	return cfg
}

// chaosRand is the schedule's random source for seed: PCG, so a seed gives
// the same schedule on every machine and Go release.
func chaosRand(seed uint64) *rand.Rand {
	return rand.New(rand.NewPCG(seed, seed^0x6f72646572740a))
}

// chaosPlan is a drawn schedule: which timeoutd goes through the fault
// proxy and which faults run when.
type chaosPlan struct {
	Proxied string
	Faults  []plannedFault
}

// plannedFault is a fault of the schedule before the stack exists: its
// time, kind, and the random source positioned for its own choices.
type plannedFault struct {
	At   time.Duration
	Kind chaosKind
	r    *rand.Rand
}

// drawPlan draws cfg.Faults faults from cfg.Kinds by weight, one in each of
// equal slots of the load's duration (from 5 s to 5 s before its end) at a
// random offset in the slot's first third, and the proxied instance. Each
// fault gets its own random source drawn from the schedule's, so its
// choices (target, length) depend on the seed alone.
func drawPlan(cfg chaosConfig, seed uint64) chaosPlan {
	r := chaosRand(seed)
	p := chaosPlan{Proxied: names(svcTimeoutd, 3)[r.IntN(3)]}
	if !cfg.Load.HA {
		p.Proxied = svcTimeoutd // the only one; the draw above keeps the seed's schedule
	}
	total := 0
	for _, k := range cfg.Kinds {
		total += k.Weight
	}
	slot := (cfg.Load.Duration - 10*time.Second) / time.Duration(cfg.Faults)
	for i := range cfg.Faults {
		n := r.IntN(total)
		var kind chaosKind
		for _, k := range cfg.Kinds {
			if n -= k.Weight; n < 0 {
				kind = k
				break
			}
		}
		at := 5*time.Second + time.Duration(i)*slot + time.Duration(r.Int64N(int64(slot/3)))
		p.Faults = append(p.Faults, plannedFault{At: at, Kind: kind, r: chaosRand(r.Uint64())})
	}
	for _, must := range cfg.Must {
		i := slices.IndexFunc(chaosKinds, func(k chaosKind) bool { return k.Name == must })
		if !slices.ContainsFunc(p.Faults, func(f plannedFault) bool { return f.Kind.Name == must }) {
			p.Faults[r.IntN(len(p.Faults))].Kind = chaosKinds[i]
		}
	}
	return p
}

func (p chaosPlan) String() string {
	var out []string
	for _, f := range p.Faults {
		out = append(out, fmt.Sprintf("%s %s", f.At.Round(100*time.Millisecond), f.Kind.Name))
	}
	return "proxied " + p.Proxied + "; " + strings.Join(out, ", ")
}

// kinds returns the names of the plan's faults, in order.
func (p chaosPlan) kinds() string {
	var out []string
	for _, f := range p.Faults {
		out = append(out, f.Kind.Name)
	}
	return strings.Join(out, ",")
}

// TestChaos runs the cluster under a seeded nemesis (see chaosKind for the
// faults) while the soak's load runs, and audits it: the test fails on any
// lost deadline (a reconciled order counts as lost), early cancellation,
// paid order cancelled, cancel event stored twice, write by an instance
// without the live lease, cancel event more than chaosLateBound late, or a cut
// off instance whose partitions did not move within netcutBound. The
// lateness and the failover are reported, one line per run, to stdout and
// to CHAOS_REPORT (default build/chaos-report.txt when run by make chaos).
// `make test` runs one short run (40 s, 4 faults); `make chaos` runs
// CHAOS=long (80 s, 8 faults), CHAOS_RUNS runs in a row from CHAOS_SEED.
func TestChaos(t *testing.T) {
	if testing.Short() {
		t.Skip("e2e test: needs Docker and the built images; run without -short (make test)")
	}
	cfg := chaosConfigFromEnv(t)
	var rows []string
	var opens []time.Duration // every killed partition's kill to opening, over the runs
	for _, seed := range chaosSeeds(t) {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			row, o := runChaos(t, cfg, seed)
			rows, opens = append(rows, row), append(opens, o...)
			fmt.Println("CHAOS " + row)
		})
	}
	report := append([]string{chaosHeader}, rows...)
	report = append(report, "crash failover over the runs (kill to the new owner's opening, each partition of each SIGKILLed timeoutd): "+
		spreadOf(opens))
	t.Log("\n" + strings.Join(report, "\n"))
	if out := os.Getenv("CHAOS_REPORT"); out != "" {
		if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(out, []byte(strings.Join(report, "\n")+"\n"), 0o644); err != nil {
			t.Errorf("write CHAOS_REPORT: %v", err)
		}
	}
}

// chaosHeader names the columns of a run's row (chaosRow).
const chaosHeader = "seed | faults | lost (reconciled included)/early/paid-cancelled/fired-twice/unfenced/reconciled | " +
	"order cancelled in its database, lateness p50/p99/max | orders.cancelled stored p99 | cancel event stored p50/p99/max | " +
	"p99 outside fault windows: order cancelled, cancel event | crash failover: kill to opening; worst kill to first fire | load | CPU"

// spreadOf returns the count, p50, p99 and max of ds, or "none".
func spreadOf(ds []time.Duration) string {
	if len(ds) == 0 {
		return "none"
	}
	ds = slices.Sorted(slices.Values(ds))
	at := func(q float64) string { return ds[int(q*float64(len(ds)-1))].Round(time.Millisecond).String() }
	return fmt.Sprintf("n=%d p50 %s p99 %s max %s", len(ds), at(0.5), at(0.99), at(1))
}

// runChaos runs one seeded run and returns its row and every killed
// partition's kill to opening by its new owner.
func runChaos(t *testing.T, cfg chaosConfig, seed uint64) (string, []time.Duration) {
	plan := drawPlan(cfg, seed)
	t.Logf("chaos seed %d (replay: CHAOS_SEED=%d): %s", seed, seed, plan)
	fmt.Printf("CHAOS seed %d: %s\n", seed, plan)
	opts := cfg.Load.stackOptions()
	opts.Proxied = plan.Proxied
	s := startStack(t, opts)
	db, err := pgxpool.New(t.Context(), s.pgURL("timeouts"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(t.Context(), writeAuditSQL); err != nil {
		t.Fatalf("install the write audit: %v", err)
	}
	c := &chaos{s: s, db: db, proxied: plan.Proxied}
	timeline := 0
	if cfg.Load.Patroni {
		if timeline, err = s.pgWritable(t.Context()); err != nil {
			t.Fatalf("the Postgres cluster's timeline: %v", err)
		}
	}
	var faults []fault
	for _, f := range plan.Faults {
		faults = append(faults, fault{At: f.At, What: f.Kind.Name, Do: c.recorded(f.Kind.Name, f.Kind.Plan(c, f.r))})
	}
	res := runSoak(t, s, cfg.Load, faults)
	for _, l := range res.Report {
		t.Log(l)
	}

	wa, err := readWriteAudit(t.Context(), db)
	if err != nil {
		t.Fatalf("write audit: %v", err)
	}
	for _, u := range wa.Unfenced {
		t.Errorf("unfenced write: %s", u)
	}
	if wa.Fires == 0 {
		t.Error("the write audit saw no fire: is the trigger installed?")
	}
	a := res.Audit
	if a.FiredTwice > 0 {
		t.Errorf("%d cancel events stored twice for the same (key, version)", a.FiredTwice)
	}
	for _, p := range c.problems {
		t.Error(p)
	}

	all, _ := summarise(a.Samples, nil)
	outsideWindows := func(ls lateSample) bool { return !c.inWindow(ls.PayBy) }
	outside, _ := summarise(a.Samples, outsideWindows)
	cancelled, announced := atTheOrder(a.Samples, nil)
	cancelledOutside, _ := atTheOrder(a.Samples, outsideWindows)
	if all.Max > chaosLateBound {
		t.Errorf("a cancel event was stored %s after its deadline, more than %s", all.Max, chaosLateBound)
	}
	worst := "none"
	var worstD, worstLate time.Duration
	var opens []time.Duration
	for _, k := range c.kills {
		// A partition not yet open when the killed instance was ready
		// again is looked for once more, in the logs as they are now.
		for p, at := range openedSince(t.Context(), s, k.Parts, k.At) {
			if _, ok := k.Opened[p]; !ok {
				k.Opened[p] = at
			}
		}
		f, err := failoverOf(t.Context(), db, k.Name, k.At, k.Parts, res.Events, k.Opened)
		if err != nil {
			t.Errorf("failover of %s: %v", k.Name, err)
			continue
		}
		t.Logf("kill at %s: %s (partitions with no fire after the kill: %v)", k.At.Format("15:04:05.000"), f.Line, f.Unfired)
		if f.Worst > 0 && f.Worst >= worstD {
			worstD = f.Worst
		}
		worstLate = max(worstLate, f.LateP99)
		opens = append(opens, f.Opens...)
		worst = fmt.Sprintf("opening %s; first fire %s (due meanwhile: late p99 %s)", spreadOf(opens),
			worstD.Round(time.Millisecond), worstLate.Round(time.Millisecond))
	}
	c.mu.Lock()
	c.closeLast(c.epochs(t.Context()))
	c.mu.Unlock()
	for _, w := range c.windows {
		in, _ := summarise(a.Samples, func(ls lateSample) bool { return !ls.PayBy.Before(w.From) && !ls.PayBy.After(w.Till) })
		t.Logf("fault window %-16s %s – %s (%s; +%s), %d partitions acquired anew (%d until the next fault); the %d deadlines due in it late by at most %s",
			w.Kind, w.From.Format("15:04:05.000"), w.Till.Format("15:04:05.000"), w.Till.Sub(w.From).Round(time.Millisecond),
			chaosWindowMargin, w.Moves, w.Since, in.N, in.Max.Round(time.Millisecond))
	}
	for _, l := range c.reportFailovers(t, a.Samples) {
		fmt.Printf("CHAOS seed %d failover %s\n", seed, l)
	}
	if cfg.Load.Patroni {
		fmt.Printf("CHAOS seed %d promotions: %s\n", seed, c.reportPromotions(t, plan, timeline))
	}
	t.Logf("partition leases acquired anew during each kind of fault (and until the next fault): %s", movesByKind(c.windows))
	fmt.Printf("CHAOS seed %d moves: %s\n", seed, movesByKind(c.windows))
	ms := func(d time.Duration) string { return d.Round(time.Millisecond).String() }
	stack := ""
	if !cfg.Load.HA {
		stack = " (single)"
	}
	if cfg.Load.Patroni {
		stack = " (patroni)"
	}
	return fmt.Sprintf("%d%s | %s | %d/%d/%d/%d/%d/%d | %s/%s/%s | %s | %s/%s/%s | %s, %s (n=%d of %d) | %s | %d orders, %d cancel events | %s",
		seed, stack, plan.kinds(), a.Lost+a.Reconciled, a.Early, a.PaidCancelled, a.FiredTwice, len(wa.Unfenced), a.Reconciled,
		ms(cancelled.P50), ms(cancelled.P99), ms(cancelled.Max), ms(announced.P99),
		ms(all.P50), ms(all.P99), ms(all.Max), ms(cancelledOutside.P99), ms(outside.P99), outside.N, all.N, worst,
		res.Acked, a.CancelEvents, machine.CPUModel()), opens
}

// atTheOrder returns the lateness of the samples keep selects (nil: all)
// measured at the order: its cancellation committed in the orders
// database, and its orders.cancelled event stored.
func atTheOrder(samples []lateSample, keep func(lateSample) bool) (cancelled, announced lateness) {
	var cs, as []time.Duration
	for _, s := range samples {
		if keep == nil || keep(s) {
			cs = append(cs, s.Cancelled)
			as = append(as, s.Announced)
		}
	}
	return summary(cs), summary(as)
}

// recorded wraps a fault's action so that its window is recorded.
func (c *chaos) recorded(kind string, do func(*testing.T) string) func(*testing.T) string {
	return func(t *testing.T) string {
		from := time.Now()
		before := c.epochs(t.Context())
		c.mu.Lock()
		c.closeLast(before)
		c.mu.Unlock()
		out := do(t)
		w := faultWindow{Kind: kind, From: from, Till: time.Now(), Moves: -1, Since: -1, epochsAt: before}
		if after := c.epochs(t.Context()); before >= 0 && after >= 0 {
			w.Moves = after - before
		}
		c.mu.Lock()
		c.windows = append(c.windows, w)
		c.mu.Unlock()
		return fmt.Sprintf("%s; %d partitions acquired anew", out, w.Moves)
	}
}

// epochs returns the sum of the leases' epochs, which grows by one each
// time a partition is acquired, or -1 when the leases cannot be read.
func (c *chaos) epochs(ctx context.Context) int64 {
	var sum int64
	if err := c.db.QueryRow(ctx, `SELECT coalesce(sum(epoch), 0) FROM timeout_leases`).Scan(&sum); err != nil {
		return -1
	}
	return sum
}

// movesByKind returns, for each kind of fault in the windows, how many
// partitions acquired anew during its faults and until the next fault
// (the faults whose leases could be read), e.g. "kill-nats 0 (0) in 2".
func movesByKind(windows []faultWindow) string {
	moves, since, n := map[string]int64{}, map[string]int64{}, map[string]int{}
	for _, w := range windows {
		if w.Moves >= 0 && w.Since >= 0 {
			moves[w.Kind] += w.Moves
			since[w.Kind] += w.Since
			n[w.Kind]++
		}
	}
	var out []string
	for _, k := range slices.Sorted(maps.Keys(n)) {
		out = append(out, fmt.Sprintf("%s %d (%d) in %d", k, moves[k], since[k], n[k]))
	}
	return strings.Join(out, ", ")
}

// inWindow reports whether a deadline fell inside a fault's window (its
// run plus chaosWindowMargin).
func (c *chaos) inWindow(at time.Time) bool {
	for _, w := range c.windows {
		if !at.Before(w.From) && !at.After(w.Till.Add(chaosWindowMargin)) {
			return true
		}
	}
	return false
}

func (c *chaos) problem(format string, args ...any) {
	c.mu.Lock()
	c.problems = append(c.problems, fmt.Sprintf(format, args...))
	c.mu.Unlock()
}

// owned returns the partitions name holds a live lease on (none when the
// leases cannot be read, as during a Postgres restart).
func (c *chaos) owned(ctx context.Context, name string) []int {
	ls, err := readLeases(ctx, c.db)
	if err != nil {
		return nil
	}
	return byOwner(ls)[name]
}

// movedFrom waits, up to limit, until every partition of parts is held
// live by an instance other than name, and returns how long it took from
// since, and whether they all moved.
func (c *chaos) movedFrom(ctx context.Context, name string, parts []int, since time.Time, limit time.Duration) (time.Duration, bool) {
	for time.Since(since) < limit {
		if ls, err := readLeases(ctx, c.db); err == nil && !slices.ContainsFunc(parts, func(p int) bool {
			return !ls[p].Live || ls[p].Owner == name
		}) {
			return time.Since(since), true
		}
		time.Sleep(100 * time.Millisecond)
	}
	return time.Since(since), false
}

// planKillTimeoutd: SIGKILL a timeoutd, start it again 3 s later; its
// partitions and the kill time are kept for the failover.
func (c *chaos) planKillTimeoutd(r *rand.Rand) func(*testing.T) string {
	name := c.s.Timeoutds[r.IntN(len(c.s.Timeoutds))]
	return func(t *testing.T) string {
		parts := c.owned(t.Context(), name)
		at := time.Now()
		c.s.Kill(t, name)
		time.Sleep(3 * time.Second)
		started := c.s.Start(t, name)
		ready := waitReady(t, c.s.readyURL(name), 2*time.Minute)
		// Ready comes before the restarted instance's own partitions open
		// (alone, it owns them all): wait a little for every opening.
		opened := openedSince(t.Context(), c.s, parts, at)
		for deadline := time.Now().Add(5 * time.Second); len(opened) < len(parts) && time.Now().Before(deadline); {
			time.Sleep(100 * time.Millisecond)
			opened = openedSince(t.Context(), c.s, parts, at)
		}
		c.mu.Lock()
		c.kills = append(c.kills, chaosKill{name, at, parts, opened})
		c.mu.Unlock()
		return fmt.Sprintf("%s (%d partitions) SIGKILLed, started 3 s later, ready %s after its start",
			name, len(parts), ready.Sub(started).Round(time.Millisecond))
	}
}

// planPause: docker pause a timeoutd for 6–12 s.
func (c *chaos) planPause(r *rand.Rand) func(*testing.T) string {
	name := c.s.Timeoutds[r.IntN(len(c.s.Timeoutds))]
	hold := 6*time.Second + time.Duration(r.Int64N(int64(6*time.Second)))
	return func(t *testing.T) string {
		parts := c.owned(t.Context(), name)
		at := time.Now()
		c.s.Pause(t, name)
		moved, ok := c.movedFrom(t.Context(), name, parts, at, hold)
		time.Sleep(time.Until(at.Add(hold)))
		c.s.Unpause(t, name)
		return fmt.Sprintf("%s (%d partitions) frozen %s; partitions moved: %v, after %s", name, len(parts),
			hold.Round(time.Millisecond), ok, moved.Round(10*time.Millisecond))
	}
}

// planNetcut: docker network disconnect a timeoutd for 6 s (longer if its
// partitions have not moved yet, up to netcutBound), then reconnect it and
// wait until it is ready. Its partitions must move within netcutBound; the
// write audit shows whether it wrote anything for them meanwhile.
func (c *chaos) planNetcut(r *rand.Rand) func(*testing.T) string {
	name := c.s.Timeoutds[r.IntN(len(c.s.Timeoutds))]
	const hold = 6 * time.Second
	return func(t *testing.T) string {
		parts := c.owned(t.Context(), name)
		at := time.Now()
		c.s.Disconnect(t, name)
		if len(c.s.Timeoutds) == 1 { // alone: nobody to move to
			time.Sleep(hold)
			c.s.Reconnect(t, name)
			back := time.Now()
			ready := waitReady(t, c.s.readyURL(name), 2*time.Minute)
			return fmt.Sprintf("%s cut off %s; reconnected, ready %s later", name, back.Sub(at).Round(time.Millisecond),
				ready.Sub(back).Round(time.Millisecond))
		}
		moved, ok := c.movedFrom(t.Context(), name, parts, at, netcutBound)
		if !ok {
			c.problem("netcut of %s: its %d partitions not all held by others %s after the cut", name, len(parts), netcutBound)
		}
		time.Sleep(time.Until(at.Add(hold)))
		c.s.Reconnect(t, name)
		back := time.Now()
		ready := waitReady(t, c.s.readyURL(name), 2*time.Minute)
		return fmt.Sprintf("%s (%d partitions) cut off %s: partitions moved after %s; reconnected, ready %s later", name, len(parts),
			back.Sub(at).Round(time.Millisecond), moved.Round(10*time.Millisecond), ready.Sub(back).Round(time.Millisecond))
	}
}

// planKillNATS: SIGKILL a NATS node, start it again 3 s later, wait until
// every service is ready.
func (c *chaos) planKillNATS(r *rand.Rand) func(*testing.T) string {
	name := c.s.NATSNodes[r.IntN(len(c.s.NATSNodes))]
	return func(t *testing.T) string {
		at := time.Now()
		c.s.Kill(t, name)
		time.Sleep(3 * time.Second)
		c.s.Start(t, name)
		back := time.Now()
		ready := c.s.waitServices(t)
		return fmt.Sprintf("%s SIGKILLed, started again %s later; every service ready %s after", name,
			back.Sub(at).Round(time.Millisecond), max(0, ready.Sub(back)).Round(time.Millisecond))
	}
}

// planRestartPostgres: the soak's restart of Postgres; on the cluster, of
// its primary (Patroni hands the lead to the synchronous standby first).
func (c *chaos) planRestartPostgres(*rand.Rand) func(*testing.T) string {
	return func(t *testing.T) string { return c.s.restartDependency(t, c.pgPrimary(t)) }
}

// pgPrimary returns the Postgres container that is the primary, once the
// cluster is healthy (pgHealthy).
func (c *chaos) pgPrimary(t *testing.T) string {
	t.Helper()
	if len(c.s.PGNodes) == 1 {
		return c.s.PGNodes[0]
	}
	name, _, _, _ := c.pgHealthy(t)
	return name
}

// planKillOrders: the soak's SIGKILL of an orders instance, started again
// at once.
func (c *chaos) planKillOrders(r *rand.Rand) func(*testing.T) string {
	name := c.s.Orders[r.IntN(len(c.s.Orders))]
	return func(t *testing.T) string { return name + ": " + c.s.killAndStart(t, name) }
}

// proxyFault returns a fault that adds x to the proxied instance's
// connections to target for hold.
func (c *chaos) proxyFault(target proxyTarget, x toxic, hold time.Duration) func(*testing.T) string {
	return func(t *testing.T) string {
		if err := c.s.proxy.withToxic(t.Context(), target, x, hold); err != nil {
			t.Error(err)
		}
		return fmt.Sprintf("%s's connections to %s: %s %s %v for %s", c.proxied, target, x.Type, x.Stream, x.Attrs, hold)
	}
}

// drawTarget draws Postgres or NATS.
func drawTarget(r *rand.Rand) proxyTarget {
	if r.IntN(2) == 0 {
		return toPostgres
	}
	return toNATS
}

// planLatency: 100–500 ms added to every reply (downstream) from Postgres
// or NATS to the proxied instance, ±50 ms, for 8 s.
func (c *chaos) planLatency(r *rand.Rand) func(*testing.T) string {
	target := drawTarget(r)
	ms := 100 + r.IntN(401)
	return c.proxyFault(target, toxic{"latency", "downstream", toxiproxy.Attributes{"latency": ms, "jitter": 50}}, 8*time.Second)
}

// planReset: for 2 s, every connection of the proxied instance to Postgres
// or NATS is reset (TCP RST) as soon as the instance sends on it
// (reset_peer, upstream, timeout 0); it reconnects afterwards.
func (c *chaos) planReset(r *rand.Rand) func(*testing.T) string {
	return c.proxyFault(drawTarget(r), toxic{"reset_peer", "upstream", toxiproxy.Attributes{"timeout": 0}}, 2*time.Second)
}

// planTimeout: for 6 s, nothing the proxied instance sends to Postgres or
// NATS gets through, and each connection is closed 2–4 s after the toxic
// came (timeout, upstream): a black hole, then a close.
func (c *chaos) planTimeout(r *rand.Rand) func(*testing.T) string {
	target := drawTarget(r)
	ms := 2000 + r.IntN(2001)
	return c.proxyFault(target, toxic{"timeout", "upstream", toxiproxy.Attributes{"timeout": ms}}, 6*time.Second)
}

// planCommitCut approximates a connection cut right after COMMIT is sent:
// for 1.5 s every reply from Postgres to the proxied instance is swallowed
// and the connection reset (reset_peer on the downstream direction), while
// what the instance sends still reaches Postgres. A statement in flight
// then, a COMMIT among them, is executed by Postgres but its outcome never
// reaches the instance: an ambiguous commit.
func (c *chaos) planCommitCut(*rand.Rand) func(*testing.T) string {
	return c.proxyFault(toPostgres, toxic{"reset_peer", "downstream", toxiproxy.Attributes{"timeout": 0}}, 1500*time.Millisecond)
}

// planFreezePostgres: docker pause Postgres for 4–8 s: every connection
// stays open and nothing answers, as with a stalled disk or a paused VM.
func (c *chaos) planFreezePostgres(r *rand.Rand) func(*testing.T) string {
	hold := 4*time.Second + time.Duration(r.Int64N(int64(4*time.Second)))
	return func(t *testing.T) string {
		name := c.pgPrimary(t)
		c.s.Pause(t, name)
		time.Sleep(hold) // the fault's length
		c.s.Unpause(t, name)
		return fmt.Sprintf("%s frozen %s", name, hold.Round(time.Millisecond))
	}
}

// planFreezeNATS: docker pause one NATS node (the only one of a single
// stack) for 4–8 s.
func (c *chaos) planFreezeNATS(r *rand.Rand) func(*testing.T) string {
	name := c.s.NATSNodes[r.IntN(len(c.s.NATSNodes))]
	hold := 4*time.Second + time.Duration(r.Int64N(int64(4*time.Second)))
	return func(t *testing.T) string {
		c.s.Pause(t, name)
		time.Sleep(hold) // the fault's length
		c.s.Unpause(t, name)
		return fmt.Sprintf("%s frozen %s", name, hold.Round(time.Millisecond))
	}
}

// planBlackhole returns the plan of a black hole in the proxied instance's
// connections to target for 4–8 s: nothing it sends gets through and no
// connection is closed (toxiproxy's timeout toxic with timeout 0, upstream),
// a hung connection the instance notices only by its own deadlines.
func planBlackhole(target proxyTarget) func(*chaos, *rand.Rand) func(*testing.T) string {
	return func(c *chaos, r *rand.Rand) func(*testing.T) string {
		hold := 4*time.Second + time.Duration(r.Int64N(int64(4*time.Second)))
		return c.proxyFault(target, toxic{"timeout", "upstream", toxiproxy.Attributes{"timeout": 0}}, hold)
	}
}

// planSkew: start a timeoutd again with its wall clock 1 or 2 s ahead of
// the others' and Postgres's (TIMEOUTD_CLOCK_SKEW, for fault injection);
// it stays skewed for the rest of the run. Ahead is the direction that
// could fire early; a clock behind only fires late.
func (c *chaos) planSkew(r *rand.Rand) func(*testing.T) string {
	name := c.s.Timeoutds[r.IntN(len(c.s.Timeoutds))]
	skew := time.Duration(1+r.IntN(2)) * time.Second
	return func(t *testing.T) string {
		began := time.Now()
		if err := c.s.replaceTimeoutd(context.Background(), name, map[string]string{"TIMEOUTD_CLOCK_SKEW": skew.String()}); err != nil {
			t.Fatal(err)
		}
		return fmt.Sprintf("%s started again with TIMEOUTD_CLOCK_SKEW=%s, ready %s after the stop", name, skew, time.Since(began).Round(time.Millisecond))
	}
}

// TestChaosPlanIsSeeded: a seed gives one schedule (kinds, times, the
// proxied instance and each fault's own draws); another seed another one.
func TestChaosPlanIsSeeded(t *testing.T) {
	t.Parallel()
	draw := func(seed uint64) string {
		p := drawPlan(chaosLong, seed)
		out := p.String()
		for _, f := range p.Faults {
			out += fmt.Sprintf(" %d", f.r.Uint64())
		}
		return out
	}
	if a, b := draw(42), draw(42); a != b {
		t.Errorf("seed 42 drew two schedules:\n%s\n%s", a, b)
	}
	if a, b := draw(42), draw(43); a == b {
		t.Errorf("seeds 42 and 43 drew the same schedule: %s", a)
	}
	if p := drawPlan(chaosLong, 7); len(p.Faults) != chaosLong.Faults || p.Faults[len(p.Faults)-1].At >= chaosLong.Load.Duration {
		t.Errorf("seed 7: %s; want %d faults within %s", p, chaosLong.Faults, chaosLong.Load.Duration)
	}
	single := chaosLong
	single.Load.HA = false
	if a, b := drawPlan(chaosLong, 42), drawPlan(single, 42); a.kinds() != b.kinds() || a.Faults[3].At != b.Faults[3].At || b.Proxied != svcTimeoutd {
		t.Errorf("seed 42 on one instance drew %s, want the cluster's schedule %s behind %s", b, a, svcTimeoutd)
	}
	for seed := range uint64(50) {
		if p := drawPlan(chaosShort, seed); !strings.Contains(p.kinds(), "netcut-timeoutd") {
			t.Errorf("seed %d: the short run's schedule %s has no netcut-timeoutd", seed, p)
		}
	}
}
