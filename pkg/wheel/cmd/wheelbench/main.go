// Command wheelbench measures pkg/wheel against Go's runtime timers
// (time.AfterFunc) on the same workloads in the same run, printing one line
// per workload and implementation:
//
//	go run ./pkg/wheel/cmd/wheelbench <churn|memory|storm|idle|parallel|pile|all> <n>
//
// pile has no Go peer: it measures the wheel alone delivering n timers that
// share one deadline (see pile).
package main

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"runtime/metrics"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/ordertimeout/ordertimeout/pkg/wheel"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "wheelbench:", err)
		os.Exit(2)
	}
}

func run(args []string) error {
	if len(args) != 2 {
		return errors.New("usage: wheelbench <churn|memory|storm|idle|parallel|pile|all> <n>")
	}
	n, err := strconv.Atoi(args[1])
	if err != nil || n <= 0 {
		return fmt.Errorf("n %q: want a positive integer", args[1])
	}
	workloads := map[string]func(int) error{
		"churn": churn, "memory": memory, "storm": storm, "idle": idle, "parallel": parallel, "pile": pile,
	}
	if args[0] == "all" {
		for _, name := range []string{"churn", "memory", "storm", "idle", "parallel", "pile"} {
			if err := workloads[name](n); err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
		}
		return nil
	}
	f, ok := workloads[args[0]]
	if !ok {
		return fmt.Errorf("unknown workload %q", args[0])
	}
	return f(n)
}

// delays returns n delays uniform in [lo, hi), the same for every run.
func delays(n int, lo, hi time.Duration) []time.Duration {
	r := rand.New(rand.NewPCG(1, 2))
	d := make([]time.Duration, n)
	for i := range d {
		d[i] = lo + time.Duration(r.Int64N(int64(hi-lo)))
	}
	return d
}

func noop[T any]([]wheel.Expired[T]) {}

func perOp(d time.Duration, n int) string {
	return strconv.FormatFloat(float64(d.Nanoseconds())/float64(n), 'f', 1, 64)
}

// churn schedules n timers due uniformly in [1 s, 30 min] and cancels them
// all in the same order; a first round warms the slabs (and Go's heap), the
// second is measured.
func churn(n int) error {
	ds := delays(n, time.Second, 30*time.Minute)
	w, err := wheel.New(wheel.Config{}, noop[int])
	if err != nil {
		return err
	}
	defer w.Stop()
	hs := make([]wheel.Handle, n)
	var sched, canc time.Duration
	for range 2 {
		now := time.Now()
		t0 := time.Now()
		for i, d := range ds {
			if hs[i], err = w.Schedule(now.Add(d), i); err != nil {
				return err
			}
		}
		t1 := time.Now()
		for _, h := range hs {
			w.Cancel(h)
		}
		sched, canc = t1.Sub(t0), time.Since(t1)
	}
	fmt.Printf("wheel churn n=%d schedule_ns_per_op=%s cancel_ns_per_op=%s\n", n, perOp(sched, n), perOp(canc, n))

	ts := make([]*time.Timer, n)
	f := func() {}
	for range 2 {
		t0 := time.Now()
		for i, d := range ds {
			ts[i] = time.AfterFunc(d, f)
		}
		t1 := time.Now()
		for _, t := range ts {
			t.Stop()
		}
		sched, canc = t1.Sub(t0), time.Since(t1)
	}
	fmt.Printf("go-afterfunc churn n=%d schedule_ns_per_op=%s cancel_ns_per_op=%s\n", n, perOp(sched, n), perOp(canc, n))
	return nil
}

func heapAlloc() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// memory reports HeapAlloc after GC with n and 10n timers pending, minus the
// baseline, per timer. The caller's handle slices are allocated before the
// baseline, so only the timers' own memory counts.
func memory(n int) error {
	for _, m := range []int{n, 10 * n} {
		ds := delays(m, time.Second, 30*time.Minute)
		hs := make([]wheel.Handle, m)
		base := heapAlloc()
		w, err := wheel.New(wheel.Config{}, noop[int])
		if err != nil {
			return err
		}
		now := time.Now()
		for i, d := range ds {
			if hs[i], err = w.Schedule(now.Add(d), i); err != nil {
				return err
			}
		}
		used := heapAlloc() - base
		runtime.KeepAlive(hs) // the caller's handles were in the baseline
		fmt.Printf("wheel memory n=%d bytes_per_timer=%.1f\n", m, float64(used)/float64(m))
		w.Stop()

		ts := make([]*time.Timer, m)
		base = heapAlloc()
		f := func() {}
		for i, d := range ds {
			ts[i] = time.AfterFunc(d, f)
		}
		used = heapAlloc() - base
		fmt.Printf("go-afterfunc memory n=%d bytes_per_timer=%.1f\n", m, float64(used)/float64(m))
		for _, t := range ts {
			t.Stop()
		}
	}
	return nil
}

// latency summarises lateness samples as the storm line's fields.
func latency(lat []time.Duration) string {
	slices.Sort(lat)
	early := 0
	for _, l := range lat {
		if l < 0 {
			early++
		}
	}
	ms := func(q float64) string {
		l := lat[min(len(lat)-1, int(q*float64(len(lat))))]
		return strconv.FormatFloat(float64(l)/1e6, 'f', 2, 64)
	}
	return fmt.Sprintf("lateness_ms p50=%s p99=%s p999=%s max=%s early=%d",
		ms(0.5), ms(0.99), ms(0.999), strconv.FormatFloat(float64(lat[len(lat)-1])/1e6, 'f', 2, 64), early)
}

// storm schedules n timers due uniformly within [1 s, 3 s] on a 10 ms tick
// and measures each one's lateness when its batch is delivered (for Go, when
// its callback runs).
func storm(n int) error {
	ds := delays(n, time.Second, 3*time.Second)
	lat := make([]time.Duration, n)
	deadlines := make([]time.Time, n)
	// The wheel as configured by default for a 10 ms tick (1 ms sub-slots),
	// then with Precision = Tick: each tick fired whole at its end.
	for _, run := range []struct {
		name string
		cfg  wheel.Config
	}{
		{"wheel", wheel.Config{Tick: 10 * time.Millisecond}},
		{"wheel-tick-only", wheel.Config{Tick: 10 * time.Millisecond, Precision: 10 * time.Millisecond}},
	} {
		if err := stormWheel(run.cfg, ds, deadlines, lat); err != nil {
			return err
		}
		fmt.Printf("%s storm n=%d tick_ms=10 %s\n", run.name, n, latency(lat))
	}

	var left atomic.Int64
	done := make(chan struct{})
	left.Store(int64(n))
	start := time.Now()
	for i, d := range ds {
		deadlines[i] = start.Add(d)
		time.AfterFunc(time.Until(deadlines[i]), func() {
			lat[i] = time.Since(deadlines[i])
			if left.Add(-1) == 0 {
				close(done)
			}
		})
	}
	<-done
	fmt.Printf("go-afterfunc storm n=%d tick_ms=none %s\n", n, latency(lat))
	return nil
}

// stormWheel schedules the timers due ds from now on a wheel of cfg and
// records each one's lateness at onExpire in lat.
func stormWheel(cfg wheel.Config, ds []time.Duration, deadlines []time.Time, lat []time.Duration) error {
	var left atomic.Int64
	left.Store(int64(len(ds)))
	done := make(chan struct{})
	w, err := wheel.New(cfg, func(batch []wheel.Expired[int]) {
		now := time.Now()
		for _, e := range batch {
			lat[e.Value] = now.Sub(deadlines[e.Value])
		}
		if left.Add(-int64(len(batch))) == 0 {
			close(done)
		}
	})
	if err != nil {
		return err
	}
	defer w.Stop()
	start := time.Now()
	for i, d := range ds {
		deadlines[i] = start.Add(d)
		if _, err := w.Schedule(deadlines[i], i); err != nil {
			return err
		}
	}
	<-done
	return nil
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// idle holds one timer an hour away for 10 s and counts the wheel driver's
// wake-ups and the process's CPU time. Go's runtime timer loop cannot be
// instrumented, so its wake-ups are reported as n/a; its CPU time is measured
// the same way.
func idle(int) error {
	const window = 10 * time.Second
	w, err := wheel.New(wheel.Config{}, noop[int])
	if err != nil {
		return err
	}
	w.ScheduleAfter(time.Hour, 1)
	time.Sleep(100 * time.Millisecond) // let the driver settle into its sleep
	runtime.GC()
	wake0, cpu0 := w.Stats().Wakeups, cpuTime()
	time.Sleep(window)
	wake1, cpu1 := w.Stats().Wakeups, cpuTime()
	w.Stop()
	fmt.Printf("wheel idle seconds=%d wakeups=%d cpu_ms=%d\n", int(window.Seconds()), wake1-wake0, (cpu1 - cpu0).Milliseconds())

	t := time.AfterFunc(time.Hour, func() {})
	time.Sleep(100 * time.Millisecond)
	runtime.GC()
	cpu0 = cpuTime()
	time.Sleep(window)
	cpu1 = cpuTime()
	t.Stop()
	fmt.Printf("go-afterfunc idle seconds=%d wakeups=n/a cpu_ms=%d\n", int(window.Seconds()), (cpu1 - cpu0).Milliseconds())
	return nil
}

// timed runs n operations split across g goroutines and returns the best
// wall time of 5 rounds.
func timed(g, n int, op func(i int)) time.Duration {
	best := time.Duration(1<<63 - 1)
	for range 5 {
		var wg sync.WaitGroup
		start := time.Now()
		for k := range g {
			wg.Go(func() {
				for i := k; i < n; i += g {
					op(i)
				}
			})
		}
		wg.Wait()
		best = min(best, time.Since(start))
	}
	return best
}

// parallel runs n schedule+cancel pairs from 1 and then 2 goroutines (best
// of 5 rounds each) with 1M timers (or n, if smaller) pending and reports
// the throughput ratio.
func parallel(n int) error {
	pending := min(n, 1_000_000)
	ds := delays(pending, time.Second, 30*time.Minute)
	w, err := wheel.New(wheel.Config{}, noop[int])
	if err != nil {
		return err
	}
	defer w.Stop()
	now := time.Now()
	for i, d := range ds {
		w.Schedule(now.Add(d), i)
	}
	deadline := now.Add(time.Minute)
	op := func(i int) {
		h, _ := w.Schedule(deadline, i)
		w.Cancel(h)
	}
	timed(2, n, op) // warm up
	one, two := timed(1, n, op), timed(2, n, op)
	fmt.Printf("wheel parallel goroutines=2 speedup=%.2f\n", float64(one)/float64(two))

	f := func() {}
	ts := make([]*time.Timer, pending)
	for i, d := range ds {
		ts[i] = time.AfterFunc(d, f)
	}
	gop := func(int) { time.AfterFunc(time.Minute, f).Stop() }
	timed(2, n, gop)
	one, two = timed(1, n, gop), timed(2, n, gop)
	fmt.Printf("go-afterfunc parallel goroutines=2 speedup=%.2f\n", float64(one)/float64(two))
	for _, t := range ts {
		t.Stop()
	}
	return nil
}

// pile schedules n timers on one deadline (from one goroutine, so mostly on
// one shard, the worst case for the driver) on the default 1 ms tick, then
// measures from the deadline to the last delivery: when onExpire first and
// last received timers (after the deadline, by time.Now in the callback),
// how many calls, the heap allocated (objects and
// bytes, per timer), and the GC's work (cycles and CPU time, from
// runtime/metrics). The consumer only counts. Three rounds, one line each.
func pile(n int) error {
	for round := range 3 {
		var first, last time.Time
		calls, got, early := 0, 0, 0
		done := make(chan struct{})
		deadline := time.Now().Add(time.Second + time.Duration(n/1000)*time.Millisecond)
		w, err := wheel.New(wheel.Config{}, func(batch []wheel.Expired[int]) {
			now := time.Now()
			if calls == 0 {
				first = now
			}
			calls++
			for _, e := range batch {
				if now.Before(deadline) || e.Fired.Before(e.Deadline) {
					early++
				}
			}
			if got += len(batch); got == n {
				last = now
				close(done)
			}
		})
		if err != nil {
			return err
		}
		for i := range n {
			if _, err := w.Schedule(deadline, i); err != nil {
				return err
			}
		}
		runtime.GC()
		before := pileStats()
		time.Sleep(time.Until(deadline) - 10*time.Millisecond)
		<-done
		after := pileStats()
		w.Stop()
		ms := func(t time.Time) string { return strconv.FormatFloat(float64(t.Sub(deadline))/1e6, 'f', 2, 64) }
		fmt.Printf("wheel pile n=%d round=%d first_ms=%s last_ms=%s calls=%d allocs_per_timer=%.4f bytes_per_timer=%.1f gc_cycles=%d gc_cpu_ms=%.1f early=%d\n",
			n, round+1, ms(first), ms(last), calls,
			float64(after.allocs-before.allocs)/float64(n), float64(after.bytes-before.bytes)/float64(n),
			after.cycles-before.cycles, (after.gcCPU-before.gcCPU)*1e3, early)
	}
	return nil
}

// pileCounters are the process's cumulative heap and GC counters.
type pileCounters struct {
	allocs, bytes, cycles uint64
	gcCPU                 float64 // seconds
}

func pileStats() pileCounters {
	s := []metrics.Sample{
		{Name: "/gc/heap/allocs:objects"},
		{Name: "/gc/heap/allocs:bytes"},
		{Name: "/gc/cycles/total:gc-cycles"},
		{Name: "/cpu/classes/gc/total:cpu-seconds"},
	}
	metrics.Read(s)
	return pileCounters{s[0].Value.Uint64(), s[1].Value.Uint64(), s[2].Value.Uint64(), s[3].Value.Float64()}
}
