package timeoutd

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math"
	"math/rand/v2"
	"os"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ordertimeout/ordertimeout/internal/retry"
	"github.com/ordertimeout/ordertimeout/pkg/events"
)

// TestSimulation runs timeoutd's real core (membership, ingest, schedule
// and wheel, fire path) as a cluster inside testing/synctest bubbles,
// against the world's models of Postgres and JetStream (sim_world_test.go),
// under a seeded nemesis and load; a checker reads the whole history and
// asserts each invariant. A seed draws the cluster's settings, the faults
// and the load; virtual time makes a run of a minute take a fraction of a
// second. The goroutines' interleaving is the runtime's, so a seed replays
// its schedule of faults and load exactly and its interleaving only
// approximately: a failing seed usually fails again, and its history is
// printed either way.
//
//	go test ./services/timeoutd -run TestSimulation -sim.seed=N -v   # replay one seed
//	make sim SIM_DURATION=1h                                         # a long run
var (
	simSeed     = flag.Uint64("sim.seed", 0, "run this seed only (0: run seeds from sim.first for sim.budget)")
	simFirst    = flag.Uint64("sim.first", 1, "the first seed of a run")
	simBudget   = flag.Duration("sim.budget", 0, "how long to run seeds (default: SIM_BUDGET, else 90s; -short: 10s)")
	simVerbose  = flag.Bool("sim.history", false, "print the history of every seed, not only of a failing one")
	simMaxFails = flag.Int("sim.maxfails", 3, "stop after this many failing seeds")
	simWorkers  = flag.Int("sim.workers", 0, "how many seeds run at once (default: GOMAXPROCS)")
	simStuck    = flag.Duration("sim.stuck", 2*time.Minute, "the real time a seed may take before it counts as stuck")
)

// simLoad and simSettle are how long a seed's load and faults last, and
// how long after them everything must be settled: every acknowledged set
// that is its key's latest version published.
const (
	simLoad   = 20 * time.Second
	simSettle = 15 * time.Second
)

// The kinds of fault the nemesis draws.
const (
	faultCrash     = "crash"       // SIGKILL, restarted later under the same id
	faultDBCut     = "db-cut"      // statements hang; the database keeps the sessions
	faultDBCutDrop = "db-cut-drop" // statements hang; the database dropped the sessions
	faultNATSCut   = "nats-cut"    // fetch, ack and publish hang
	faultClockStep = "clock-step"  // the wall clock steps forward or back
	faultSlowNATS  = "slow-nats"   // publishes take tens to hundreds of ms
	faultSlowDB    = "slow-db"     // statements take up to 200 ms
	faultAmbiguous = "ambiguous"   // writes commit and lose their reply
	faultPause     = "pause"       // cut from both, as a paused process
	faultRestart   = "restart"     // graceful stop, then start again
	faultDBRestart = "db-restart"  // Postgres restarts: every session gone, statements refused
	faultDBFreeze  = "db-freeze"   // Postgres freezes: every statement waits, sessions and clock alive
)

var faultKinds = []string{faultCrash, faultDBCut, faultDBCutDrop, faultNATSCut, faultClockStep, faultSlowNATS, faultSlowDB,
	faultAmbiguous, faultPause, faultRestart, faultDBRestart, faultDBFreeze}

func TestSimulation(t *testing.T) {
	budget := *simBudget
	if budget == 0 {
		budget = 90 * time.Second
		if v, err := time.ParseDuration(os.Getenv("SIM_BUDGET")); err == nil {
			budget = v
		} else if testing.Short() {
			budget = 10 * time.Second
		}
	}
	// Seeds run on as many workers as there are cores, each in its own
	// bubble: one seed runs on one core at a time.
	workers := *simWorkers
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	next, last := *simFirst, uint64(math.MaxUint64)
	if *simSeed != 0 {
		next, last, workers = *simSeed, *simSeed, 1
	}
	start := time.Now()
	var (
		mu          sync.Mutex
		ran, failed int
		publishes   int
		faults      = map[string]int{}
		wg          sync.WaitGroup
	)
	take := func() (seed uint64, ok bool) {
		mu.Lock()
		defer mu.Unlock()
		if next > last || failed >= *simMaxFails || (*simSeed == 0 && time.Since(start) > budget) {
			return 0, false
		}
		seed, next = next, next+1
		ran++
		return seed, true
	}
	for range workers {
		wg.Go(func() {
			for seed, ok := take(); ok; seed, ok = take() {
				var r simResult
				t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
					// A bubble whose clock stops (a goroutine blocked on a mutex
					// held across a wait) hangs: fail the seed instead, with
					// every stack.
					stuck := time.AfterFunc(*simStuck, func() {
						debug.SetTraceback("all")
						panic(fmt.Sprintf("simulation seed %d: no progress within %v of real time (replay with -sim.seed=%d)", seed, *simStuck, seed))
					})
					defer stuck.Stop()
					synctest.Test(t, func(t *testing.T) { r = runSeed(t, seed) })
				})
				mu.Lock()
				for k, n := range r.faults {
					faults[k] += n
				}
				publishes += r.publishes
				if len(r.violations) > 0 {
					failed++
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	took := time.Since(start)
	kinds := slices.Sorted(maps.Keys(faults))
	var drawn []string
	for _, k := range kinds {
		drawn = append(drawn, fmt.Sprintf("%s %d", k, faults[k]))
	}
	t.Logf("simulation: %d seeds (from %d) in %v on %d workers, %.2f seeds/s, %d failed; %d publishes; faults drawn: %s",
		ran, *simFirst, took.Round(time.Millisecond), workers, float64(ran)/took.Seconds(), failed, publishes, strings.Join(drawn, ", "))
}

// simResult is what a seed saw, for the run's report.
type simResult struct {
	faults     map[string]int
	publishes  int
	violations []string
}

// simNode is one timeoutd instance of the simulated cluster, restarted
// under the same id after a crash. Its lifecycle calls are serialised by
// turn, a channel (a goroutine blocked on a mutex is not durably blocked,
// and would stop the bubble's clock).
type simNode struct {
	w    *world
	id   string
	cfg  Config
	skew atomic.Int64 // the wall clock's offset from the reference
	turn chan struct{}
	svc  atomic.Pointer[Service]
	stop context.CancelFunc
	done chan struct{}
}

func newSimNode(w *world, id string) *simNode {
	return &simNode{w: w, id: id, turn: make(chan struct{}, 1)}
}

func (n *simNode) wall() time.Time { return time.Now().Add(time.Duration(n.skew.Load())) }

func (n *simNode) lock()   { n.turn <- struct{}{} }
func (n *simNode) unlock() { <-n.turn }

// start runs a new Service of the node, unless one runs.
func (n *simNode) start(t *testing.T) {
	n.lock()
	defer n.unlock()
	if n.svc.Load() != nil {
		return
	}
	pub := simPublisher{w: n.w, id: n.id}
	svc, err := New(n.cfg, Deps{Store: simStore{w: n.w, id: n.id}, Source: &simSource{w: n.w, id: n.id, parts: map[int]bool{}},
		DeadLetters: pub, Publisher: pub, Leases: simLeases{w: n.w, id: n.id}})
	if err != nil {
		t.Errorf("%s: New: %v", n.id, err)
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := svc.Run(ctx); err != nil {
			t.Errorf("%s: Run: %v", n.id, err)
		}
	}()
	n.stop, n.done = cancel, done
	n.svc.Store(svc)
}

// crash kills the running Service as a SIGKILL would: its sessions vanish.
func (n *simNode) crash() { n.end(true) }

// shutdown stops the running Service gracefully.
func (n *simNode) shutdown() { n.end(false) }

func (n *simNode) end(kill bool) {
	n.lock()
	defer n.unlock()
	svc := n.svc.Load()
	if svc == nil {
		return
	}
	if kill {
		svc.Kill()
	}
	n.stop()
	<-n.done
	n.svc.Store(nil)
	n.w.loseSessions(n.id)
}

// pending returns what the running Service holds in memory, and its bound.
func (n *simNode) pending() (held, bound int) {
	if svc := n.svc.Load(); svc != nil {
		return svc.sched.Len(), n.cfg.MaxPending
	}
	return 0, n.cfg.MaxPending
}

// simKey is a producer's view of one key.
type simKey struct {
	key      string
	version  int64
	deadline time.Time
	cleared  bool
	last     events.Command
}

// latestDue returns the key of keys whose deadline passed last by at,
// nil if none has.
func latestDue(keys []*simKey, at time.Time) *simKey {
	var due *simKey
	for _, k := range keys {
		if !k.deadline.After(at) && (due == nil || k.deadline.After(due.deadline)) {
			due = k
		}
	}
	return due
}

// runSeed runs one seed in the current bubble and checks its history.
func runSeed(t *testing.T, seed uint64) simResult {
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	worldRng := rand.New(rand.NewPCG(seed, 0x3041d))
	w := newWorld(worldConfig{ackWait: 5 * time.Second, dedupe: 2 * time.Minute, crashGrace: CrashGraceDefault, ttl: LeaseTTLDefault,
		batch: 1 + rng.IntN(64), pubAckLossP: 0.02 * rng.Float64(), latency: time.Duration(rng.IntN(5000)) * time.Microsecond,
		rand: worldRng.Float64})
	res := simResult{faults: map[string]int{}}

	var logs strings.Builder
	logger := discardLogger()
	if *simVerbose {
		logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	nodes := make([]*simNode, 2+rng.IntN(2))
	// Some seeds run with schedules small enough to fill: sets deferred,
	// takeovers failing, moves of timeouts in flight at MaxPending.
	maxPending := func() int { return 40 + rng.IntN(300) }
	if rng.Float64() < 0.3 {
		maxPending = func() int { return 24 + rng.IntN(40) }
	}
	// A third of the seeds run one instance asked to hold twice what it
	// may: its schedule stays full, every new key waits for a fire's room,
	// and the moves of timeouts in flight race for it. Alone, it holds
	// every partition, so whatever it committed fits it again after a
	// restart (with more instances, a takeover of more than an instance
	// holds is a limit of capacity, not a bug).
	full := rand.New(rand.NewPCG(seed, 0xf011)).Float64() < 1.0/3
	lanes := func() int { return 1 + rng.IntN(4) }
	markDelay := func() time.Duration { return time.Duration(1+rng.IntN(30)) * time.Millisecond }
	if full {
		// Marks gathered longer keep fired timeouts in flight longer, for
		// the producer's moves of keys at their deadline to meet.
		markDelay = func() time.Duration { return time.Duration(10+rng.IntN(60)) * time.Millisecond }
		nodes = nodes[:1]
		maxPending = func() int { return 24 + rng.IntN(40) }
		lanes = func() int { return 3 + rng.IntN(4) } // lanes race for the room a fire frees
	}
	settings := []string{fmt.Sprintf("instances %d, latency up to %v", len(nodes), w.cfg.latency)}
	for i := range nodes {
		n := newSimNode(w, fmt.Sprintf("t%d", i+1))
		n.cfg = Config{InstanceID: n.id, Now: n.wall, Logger: logger.With("instance", n.id),
			MaxPending: maxPending(), FireBatch: 1 + rng.IntN(32), FireConcurrency: 1 + rng.IntN(3),
			MarkDelay: markDelay(), IngestLanes: lanes(),
			RetryDelay: 200 * time.Millisecond, RecoveryCatchupMax: 2 * time.Second}
		n.skew.Store(int64(time.Duration(rng.IntN(2001)-1000) * time.Millisecond))
		settings = append(settings, fmt.Sprintf("%s: MaxPending %d, FireBatch %d, FireConcurrency %d, MarkDelay %v, lanes %d, skew %v",
			n.id, n.cfg.MaxPending, n.cfg.FireBatch, n.cfg.FireConcurrency, n.cfg.MarkDelay, n.cfg.IngestLanes, time.Duration(n.skew.Load())))
		nodes[i] = n
	}
	if full {
		w.cfg.fits = nodes[0].cfg.MaxPending
	}
	w.nodes = make(map[string]*simNode, len(nodes))
	for _, n := range nodes {
		w.nodes[n.id] = n
	}
	// As the daemon requires, no instance holds fewer timeouts than a
	// fetch may bring (TIMEOUTD_MAX_PENDING against TIMEOUTD_BATCH_SIZE):
	// half of the least, so that reservations leave a takeover room.
	w.cfg.batch = max(1, min(w.cfg.batch, slices.MinFunc(nodes, func(a, b *simNode) int { return a.cfg.MaxPending - b.cfg.MaxPending }).cfg.MaxPending/2))
	settings = append(settings, fmt.Sprintf("fetch batch %d", w.cfg.batch))
	for _, n := range nodes {
		n.start(t)
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	loadEnd := time.Now().Add(simLoad)
	var wg sync.WaitGroup

	// The producers: new keys, moves and clears, many racing their key's
	// deadline, and now and then a stale command replayed or a bad one.
	// The pending timeouts stay within what one instance holds (every other
	// may be down: were they more, no instance could take the others'
	// partitions over, a limit of capacity, not a bug): three quarters of
	// the least MaxPending, all but a few slots of it in a burst in the
	// first half of some seeds, where the schedules fill and sets are
	// deferred.
	keys := map[string]*simKey{}
	var live []*simKey
	prodRng := rand.New(rand.NewPCG(seed, 0x9d0d))
	least := slices.MinFunc(nodes, func(a, b *simNode) int { return a.cfg.MaxPending - b.cfg.MaxPending }).cfg.MaxPending
	capacity, burst := least*3/4, least*3/4
	if prodRng.Float64() < 0.3 {
		burst = least - 2
	}
	if full {
		capacity, burst = 2*least, 2*least
	}
	settings = append(settings, fmt.Sprintf("pending at most %d, %d in the burst (full: %v)", capacity, burst, full))
	// Bad input is dead-lettered by an ingest lane while the others go
	// on: at a full schedule, more of it makes lanes admit at other times
	// than the batch's start.
	// nearest bounds the share of actions that move the key whose deadline
	// is nearest: in full seeds, more of them, to race the fires.
	badP, nearest, pace := 0.02, 0.70, 25
	if full {
		badP, nearest, pace = 0.10, 0.85, 12
	}
	// waiting counts the new keys whose first set is not committed yet:
	// lingering in a batch, in the stream, or deferred for room; they count
	// against the cap as much as the pending rows do.
	waiting := func() int {
		w.mu.Lock()
		defer w.mu.Unlock()
		n := 0
		for _, k := range live {
			if _, ok := w.rows[k.key]; !ok {
				n++
			}
		}
		return n
	}
	// Some seeds publish as pkg/timeouts' writer does under load: the
	// commands of a linger packed into batches of one partition's, their
	// keys drawn from 8 partitions so that batches form.
	batchRng := rand.New(rand.NewPCG(seed, 0xba7c))
	batching := batchRng.Float64() < 0.3
	linger := time.Duration(20+batchRng.IntN(180)) * time.Millisecond
	var hot [events.Partitions]bool
	for range 8 {
		hot[batchRng.IntN(events.Partitions)] = true
	}
	var lingering []events.Command
	var lingerEnd time.Time
	send := func(cmd events.Command) {
		if !batching {
			w.produce(cmd)
			return
		}
		if len(lingering) == 0 {
			lingerEnd = time.Now().Add(linger)
		}
		lingering = append(lingering, cmd)
	}
	flush := func(now time.Time) {
		if len(lingering) > 0 && !now.Before(lingerEnd) {
			w.produceBatch(lingering)
			lingering = nil
		}
	}
	if batching {
		settings = append(settings, fmt.Sprintf("batches: linger %v", linger))
	}
	wg.Go(func() {
		defer func() { flush(time.Now().Add(linger)) }()
		burstEnd := time.Now().Add(simLoad / 2)
		for n := 0; time.Now().Before(loadEnd); n++ {
			if !retry.Sleep(ctx, time.Duration(1+prodRng.IntN(pace))*time.Millisecond) {
				return
			}
			now := time.Now()
			flush(now)
			pending := w.pending() + waiting()
			room := pending < capacity || (pending < burst && now.Before(burstEnd))
			var k *simKey
			switch r := prodRng.Float64(); {
			case (r < 0.35 || len(live) == 0) && room:
				k = &simKey{key: fmt.Sprintf("k%05d", n)}
				for j := 0; batching && !hot[events.PartitionOf(k.key)]; j++ {
					k.key = fmt.Sprintf("k%05d-%d", n, j)
				}
				keys[k.key] = k
				live = append(live, k)
			case len(live) == 0:
				continue
			case r < 0.35+badP:
				bad := live[prodRng.IntN(len(live))].last // bad input: dead-lettered, never applied
				bad.Kind, bad.Version, bad.FireSubject = events.KindSet, bad.Version+1000, "elsewhere."+bad.Key
				bad.Deadline = now.Add(time.Second).UTC()
				send(bad)
				continue
			case r < 0.38+badP:
				old := live[prodRng.IntN(len(live))]
				if old.version > 1 {
					stale := old.last
					stale.Version = 1 + prodRng.Int64N(old.version-1)
					send(stale) // a stale version, replayed late
				}
				continue
			case r < nearest && full && prodRng.Float64() < 0.5:
				// The key that fired last, its mark about to commit: a set
				// of it is admitted while it is in flight, and its room
				// freed by the fire's Done must stay kept for it.
				if k = latestDue(live, now.Add(-nodes[0].cfg.MarkDelay*3/4)); k == nil {
					continue
				}
			case r < nearest:
				k = slices.MinFunc(live, func(a, b *simKey) int { // the key whose deadline is nearest
					return cmpAbs(now.Sub(a.deadline), now.Sub(b.deadline))
				})
			default:
				k = live[prodRng.IntN(len(live))]
			}
			k.version++
			cmd := events.Command{Schema: events.SchemaVersion, Kind: events.KindSet, Key: k.key, Version: k.version,
				FireSubject: events.OrderCancelSubject(k.key)}
			if k.version > 1 && prodRng.Float64() < 0.4 {
				cmd.Kind, k.cleared = events.KindClear, true
				cmd.FireSubject = ""
				live = slices.DeleteFunc(live, func(x *simKey) bool { return x == k })
			} else {
				k.deadline = now.Add(time.Duration(prodRng.IntN(3000)-300) * time.Millisecond).UTC()
				cmd.Deadline = k.deadline
				if prodRng.Float64() < 0.15 {
					cmd.Payload = []byte(`{"n":1}`) // not plain: the fire path reads its row
				}
			}
			k.last = cmd
			send(cmd)
			if len(live) > 400 {
				live = live[1:] // forgotten by the producer: its set stands
			}
		}
	})

	// The nemesis.
	nemRng := rand.New(rand.NewPCG(seed, 0x7e3e))
	wg.Go(func() {
		var faults sync.WaitGroup
		defer faults.Wait()
		for time.Now().Before(loadEnd.Add(-3 * time.Second)) {
			if !retry.Sleep(ctx, time.Duration(200+nemRng.IntN(2000))*time.Millisecond) {
				return
			}
			n := nodes[nemRng.IntN(len(nodes))]
			kind := faultKinds[nemRng.IntN(len(faultKinds))]
			d := time.Duration(300+nemRng.IntN(4000)) * time.Millisecond
			res.faults[kind]++
			who := n.id
			switch kind { // of Postgres, not of an instance
			case faultDBRestart: // down for a restart's time
				who, d = "pg", d/2
			case faultDBFreeze:
				who = "pg"
			}
			w.mu.Lock()
			w.hist.add(time.Now(), "FAULT", who, kind, 0, d.String())
			w.mu.Unlock()
			heal := func(f func(*link)) {
				faults.Go(func() {
					retry.Sleep(ctx, d)
					w.setLink(n.id, f)
				})
			}
			switch kind {
			case faultCrash:
				n.crash()
				faults.Go(func() {
					retry.Sleep(ctx, d)
					n.start(t)
				})
			case faultRestart:
				n.shutdown()
				n.start(t)
			case faultDBRestart:
				faults.Go(func() { w.restartDB(ctx, d) })
			case faultDBFreeze:
				faults.Go(func() { w.freezeDB(ctx, d) })
			case faultDBCut, faultDBCutDrop:
				w.setLink(n.id, func(l *link) { l.dbCut = true })
				if kind == faultDBCutDrop {
					w.loseSessions(n.id)
				}
				heal(func(l *link) { l.dbCut = false })
			case faultNATSCut:
				w.setLink(n.id, func(l *link) { l.natsCut = true })
				heal(func(l *link) { l.natsCut = false })
			case faultPause:
				w.setLink(n.id, func(l *link) { l.dbCut, l.natsCut = true, true })
				heal(func(l *link) { l.dbCut, l.natsCut = false, false })
			case faultClockStep:
				n.skew.Add(int64(time.Duration(nemRng.IntN(6001)-3000) * time.Millisecond))
			case faultSlowNATS:
				lat := time.Duration(10+nemRng.IntN(300)) * time.Millisecond
				w.setLink(n.id, func(l *link) { l.natsLatency = lat })
				heal(func(l *link) { l.natsLatency = 0 })
			case faultSlowDB:
				lat := time.Duration(1+nemRng.IntN(200)) * time.Millisecond
				w.setLink(n.id, func(l *link) { l.dbLatency = lat })
				heal(func(l *link) { l.dbLatency = 0 })
			case faultAmbiguous:
				w.setLink(n.id, func(l *link) { l.ambiguousP = 0.3 })
				heal(func(l *link) { l.ambiguousP = 0 })
			}
		}
	})

	// Bounded memory, sampled.
	wg.Go(func() {
		for retry.Sleep(ctx, 10*time.Millisecond) {
			for _, n := range nodes {
				if held, bound := n.pending(); held > bound {
					w.mu.Lock()
					w.hist.violate(time.Now(), "bounded memory", n.id, fmt.Sprintf("%d timeouts held, MaxPending %d", held, bound))
					w.mu.Unlock()
				}
			}
		}
	})

	retry.Sleep(ctx, simLoad)
	// Every fault heals; crashed nodes are back.
	for _, n := range nodes {
		w.setLink(n.id, func(l *link) { *l = link{healed: l.healed} })
	}
	retry.Sleep(ctx, simSettle)
	cancel()
	wg.Wait()
	for _, n := range nodes {
		n.start(t) // a crash whose restart the end cut short
	}
	for _, n := range nodes {
		n.crash()
	}

	w.mu.Lock()
	defer w.mu.Unlock()
	check(w, keys, time.Now())
	res.publishes = len(w.hist.pubs)
	res.violations = w.hist.violations
	if len(res.violations) > 0 || *simVerbose {
		report(t, seed, settings, &w.hist, logs.String())
	}
	return res
}

// check asserts the invariants over the history, under w.mu; end is when
// the run ended, after the settling time.
func check(w *world, keys map[string]*simKey, end time.Time) {
	h := &w.hist
	for _, p := range h.pubs {
		e := p.event
		if p.at.Before(e.Deadline) {
			h.violate(p.at, "never early", e.Key, fmt.Sprintf("v%d published by %s %v before its deadline", e.Version, p.by, e.Deadline.Sub(p.at)))
		}
		if !p.held {
			h.violate(p.at, "fencing", e.Key, fmt.Sprintf("v%d published by %s, which did not hold partition %d's lease", e.Version, p.by, events.PartitionOf(e.Key)))
		}
		for v, at := range h.acks[e.Key] {
			if v > e.Version && at.Before(p.at) {
				h.violate(p.at, "latest wins", e.Key, fmt.Sprintf("v%d published by %s %v after v%d was acknowledged", e.Version, p.by, p.at.Sub(at), v))
			}
		}
	}
	perVersion := map[string]int{}
	for _, s := range w.stored {
		perVersion[fmt.Sprintf("%s v%d", s.event.Key, s.event.Version)]++
	}
	for kv, n := range perVersion {
		if n > 1 {
			h.violate(end, "effectively once", kv, fmt.Sprintf("%d events stored (fired and missed)", n))
		}
	}
	for _, k := range keys {
		if k.last.Kind != events.KindSet || k.deadline.After(end) {
			continue // cleared, or not due yet
		}
		msgID := events.Expiry{Outcome: events.OutcomeFired, Key: k.key, Version: k.version}.MsgID()
		missed := events.Expiry{Outcome: events.OutcomeMissed, Key: k.key, Version: k.version}.MsgID()
		_, fired := w.stored[msgID]
		_, skipped := w.stored[missed]
		if !fired && !skipped {
			h.violate(end, "nothing lost", k.key, fmt.Sprintf("v%d (deadline %s) acknowledged, latest, never published",
				k.version, k.deadline.Format("15:04:05.000000")))
		}
	}
	for p, s := range w.parts {
		for _, m := range s.msgs {
			if !m.done {
				c := m.cmds[0]
				h.violate(end, "nothing lost", c.Key, fmt.Sprintf("v%d %s (partition %d, seq %d, %d commands) never acknowledged", c.Version, c.Kind, p, m.seq, len(m.cmds)))
			}
		}
	}
}

// report prints a seed's replay line, its settings and its history up to
// the first violation, around the keys involved.
func report(t *testing.T, seed uint64, settings []string, h *history, logs string) {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "replay: go test ./services/timeoutd -run 'TestSimulation' -sim.seed=%d -sim.history -v\n", seed)
	fmt.Fprintf(&b, "settings: %s\n", strings.Join(settings, "; "))
	for i, v := range h.violations {
		if i == 10 {
			fmt.Fprintf(&b, "… and %d more violations\n", len(h.violations)-i)
			break
		}
		fmt.Fprintf(&b, "VIOLATION %s\n", v)
	}
	// The history shrunk to the faults, leases and the first violating
	// key's lines, up to its violation.
	lines := h.lines
	first := h.firstViolation()
	key := h.firstKey
	if first >= 0 {
		lines = lines[:first+1]
	}
	b.WriteString("history (faults, leases and the first violation's key):\n")
	for _, l := range lines {
		f := strings.Fields(l)
		if *simVerbose || len(f) < 4 || f[1] == "FAULT" || f[1] == "acquire" || f[1] == "release" || f[3] == key || strings.HasPrefix(l, "VIOLATION") {
			b.WriteString(l + "\n")
		}
	}
	if logs != "" {
		b.WriteString("logs:\n" + logs)
	}
	if len(h.violations) > 0 {
		t.Error(b.String())
	} else {
		t.Log(b.String())
	}
}

func cmpAbs(a, b time.Duration) int {
	return int(min(max(a.Abs()-b.Abs(), -1), 1))
}

// discardLogger is the logger of an instance whose logs nobody reads.
func discardLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }
