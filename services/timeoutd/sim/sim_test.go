package sim

import (
	"flag"
	"fmt"
	"maps"
	"math"
	"os"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// TestSimulation runs timeoutd's real core (membership, ingest, schedule
// and wheel, fire path) as a cluster inside testing/synctest bubbles,
// against the world's models of Postgres and JetStream (the package's World),
// under a seeded nemesis and load; a checker reads the whole history and
// asserts each invariant. A seed draws the cluster's settings, the faults
// and the load; virtual time makes a run of a minute take a fraction of a
// second. The goroutines' interleaving is the runtime's, so a seed replays
// its schedule of faults and load exactly and its interleaving only
// approximately: a failing seed usually fails again, and its history is
// printed either way.
//
//	go test ./services/timeoutd/sim -run TestSimulation -sim.seed=N -v   # replay one seed
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
				var r result
				t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
					// A bubble whose clock stops (a goroutine blocked on a mutex
					// held across a wait) hangs: fail the seed instead, with
					// every stack.
					stuck := time.AfterFunc(*simStuck, func() {
						debug.SetTraceback("all")
						panic(fmt.Sprintf("simulation seed %d: no progress within %v of real time (replay with -sim.seed=%d)", seed, *simStuck, seed))
					})
					defer stuck.Stop()
					synctest.Test(t, func(t *testing.T) { r = runSeed(t, seed, *simVerbose) })
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
