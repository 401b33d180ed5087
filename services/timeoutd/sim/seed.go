package sim

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ordertimeout/ordertimeout/internal/retry"
	"github.com/ordertimeout/ordertimeout/pkg/events"
	"github.com/ordertimeout/ordertimeout/services/timeoutd"
)

// simLoad and simSettle are how long a seed's load and faults last, and
// how long after them everything must be settled: every acknowledged set
// that is its key's latest version published.
const (
	simLoad   = 20 * time.Second
	simSettle = 15 * time.Second
)

// result is what a seed saw, for the run's report.
type result struct {
	faults     map[string]int
	publishes  int
	violations []string
}

// keyState is a producer's view of one key.
type keyState struct {
	key      string
	version  int64
	deadline time.Time
	cleared  bool
	last     events.Command
}

// latestDue returns the key of keys whose deadline passed last by at,
// nil if none has.
func latestDue(keys []*keyState, at time.Time) *keyState {
	var due *keyState
	for _, k := range keys {
		if !k.deadline.After(at) && (due == nil || k.deadline.After(due.deadline)) {
			due = k
		}
	}
	return due
}

// run is one seed's run: its world, cluster and load.
type run struct {
	t        *testing.T
	seed     uint64
	w        *World
	nodes    []*node
	keys     map[string]*keyState // every key produced
	res      result
	loadEnd  time.Time
	full     bool     // one instance, its schedule full
	settings []string // what the seed drew, for its report
}

// runSeed runs one seed in the current bubble and checks its history;
// verbose reports its history even when it passes.
func runSeed(t *testing.T, seed uint64, verbose bool) result {
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	worldRng := rand.New(rand.NewPCG(seed, 0x3041d))
	w := New(Config{AckWait: 5 * time.Second, Dedupe: 2 * time.Minute, CrashGrace: timeoutd.CrashGraceDefault, TTL: timeoutd.LeaseTTLDefault,
		Batch: 1 + rng.IntN(64), PubAckLossP: 0.02 * rng.Float64(), Latency: time.Duration(rng.IntN(5000)) * time.Microsecond,
		Rand: worldRng.Float64})
	res := result{faults: map[string]int{}}

	var logs strings.Builder
	logger := discardLogger()
	if verbose {
		logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	nodes := make([]*node, 2+rng.IntN(2))
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
	settings := []string{fmt.Sprintf("instances %d, latency up to %v", len(nodes), w.cfg.Latency)}
	for i := range nodes {
		n := newNode(w, fmt.Sprintf("t%d", i+1))
		n.cfg = timeoutd.Config{InstanceID: n.id, Now: n.wall, Logger: logger.With("instance", n.id),
			MaxPending: maxPending(), FireBatch: 1 + rng.IntN(32), FireConcurrency: 1 + rng.IntN(3),
			MarkDelay: markDelay(), IngestLanes: lanes(),
			RetryDelay: 200 * time.Millisecond, RecoveryCatchupMax: 2 * time.Second}
		n.skew.Store(int64(time.Duration(rng.IntN(2001)-1000) * time.Millisecond))
		settings = append(settings, fmt.Sprintf("%s: MaxPending %d, FireBatch %d, FireConcurrency %d, MarkDelay %v, lanes %d, skew %v",
			n.id, n.cfg.MaxPending, n.cfg.FireBatch, n.cfg.FireConcurrency, n.cfg.MarkDelay, n.cfg.IngestLanes, time.Duration(n.skew.Load())))
		nodes[i] = n
	}
	if full {
		w.cfg.Fits = nodes[0].cfg.MaxPending
	}
	w.nodes = make(map[string]*node, len(nodes))
	for _, n := range nodes {
		w.nodes[n.id] = n
	}
	// As the daemon requires, no instance holds fewer timeouts than a
	// fetch may bring (TIMEOUTD_MAX_PENDING against TIMEOUTD_BATCH_SIZE):
	// half of the least, so that reservations leave a takeover room.
	w.cfg.Batch = max(1, min(w.cfg.Batch, slices.MinFunc(nodes, func(a, b *node) int { return a.cfg.MaxPending - b.cfg.MaxPending }).cfg.MaxPending/2))
	settings = append(settings, fmt.Sprintf("fetch batch %d", w.cfg.Batch))
	for _, n := range nodes {
		n.start(t)
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	loadEnd := time.Now().Add(simLoad)
	var wg sync.WaitGroup

	r := &run{t: t, seed: seed, w: w, nodes: nodes, keys: map[string]*keyState{}, res: res, loadEnd: loadEnd, full: full, settings: settings}
	wg.Go(func() { r.load(ctx) })
	wg.Go(func() { r.nemesis(ctx) })

	// Bounded memory and partitions taken, sampled.
	wg.Go(func() {
		for retry.Sleep(ctx, 10*time.Millisecond) {
			for _, n := range nodes {
				if held, bound := n.pending(); held > bound {
					w.mu.Lock()
					w.hist.violate(time.Now(), "bounded memory", n.id, fmt.Sprintf("%d timeouts held, MaxPending %d", held, bound))
					w.mu.Unlock()
				}
			}
			w.mu.Lock()
			w.checkTaken(time.Now())
			w.mu.Unlock()
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
	check(w, r.keys, time.Now())
	res.publishes = len(w.hist.pubs)
	res.violations = w.hist.violations
	if len(res.violations) > 0 || verbose {
		report(t, seed, r.settings, &w.hist, logs.String(), verbose)
	}
	return res
}

func cmpAbs(a, b time.Duration) int {
	return int(min(max(a.Abs()-b.Abs(), -1), 1))
}

// discardLogger is the logger of an instance whose logs nobody reads.
func discardLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }
