package wheel

import (
	"math/rand/v2"
	"strconv"
	"testing"
	"time"
)

// The benchmarks run with 1M timers already pending, deadlines uniform in
// [1 s, 30 min]; each has a go-afterfunc peer on the same workload. The wheel
// takes absolute deadlines (as timeoutd does), computed before the timer
// starts; time.AfterFunc takes the equivalent durations.

const benchPending = 1_000_000

func benchDelays(n int) []time.Duration {
	r := rand.New(rand.NewPCG(1, 2))
	d := make([]time.Duration, n)
	for i := range d {
		d[i] = time.Second + time.Duration(r.Int64N(int64(30*time.Minute-time.Second)))
	}
	return d
}

func benchWheel(b *testing.B) (*Wheel[uint64], time.Time) {
	b.Helper()
	w, err := New(Config{}, func([]Expired[uint64]) {})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { w.Stop() })
	now := time.Now()
	for i, d := range benchDelays(benchPending) {
		w.Schedule(now.Add(d), uint64(i))
	}
	return w, now
}

func benchTimers(b *testing.B) []*time.Timer {
	b.Helper()
	ts := make([]*time.Timer, 0, benchPending)
	for _, d := range benchDelays(benchPending) {
		ts = append(ts, time.AfterFunc(d, func() {}))
	}
	b.Cleanup(func() {
		for _, t := range ts {
			t.Stop()
		}
	})
	return ts
}

func BenchmarkSchedule(b *testing.B) {
	b.Run("wheel", func(b *testing.B) {
		w, now := benchWheel(b)
		delays := benchDelays(b.N)
		hs := make([]Handle, b.N)
		b.ReportAllocs()
		b.ResetTimer()
		for i := range b.N {
			hs[i], _ = w.Schedule(now.Add(delays[i]), uint64(i))
		}
		b.StopTimer()
		for _, h := range hs {
			w.Cancel(h)
		}
	})
	b.Run("go-afterfunc", func(b *testing.B) {
		benchTimers(b)
		delays := benchDelays(b.N)
		ts := make([]*time.Timer, b.N)
		f := func() {}
		b.ReportAllocs()
		b.ResetTimer()
		for i := range b.N {
			ts[i] = time.AfterFunc(delays[i], f)
		}
		b.StopTimer()
		for _, t := range ts {
			t.Stop()
		}
	})
}

func BenchmarkCancel(b *testing.B) {
	b.Run("wheel", func(b *testing.B) {
		w, now := benchWheel(b)
		hs := make([]Handle, b.N)
		for i, d := range benchDelays(b.N) {
			hs[i], _ = w.Schedule(now.Add(d), uint64(i))
		}
		b.ReportAllocs()
		b.ResetTimer()
		for _, h := range hs {
			w.Cancel(h)
		}
	})
	b.Run("go-afterfunc", func(b *testing.B) {
		benchTimers(b)
		ts := make([]*time.Timer, b.N)
		for i, d := range benchDelays(b.N) {
			ts[i] = time.AfterFunc(d, func() {})
		}
		b.ReportAllocs()
		b.ResetTimer()
		for _, t := range ts {
			t.Stop()
		}
	})
}

// BenchmarkScheduleParallel is one Schedule plus one Cancel per op, from
// GOMAXPROCS goroutines (run with -cpu 1,2 to see the scaling).
func BenchmarkScheduleParallel(b *testing.B) {
	b.Run("wheel", func(b *testing.B) {
		w, now := benchWheel(b)
		deadline := now.Add(time.Minute)
		b.ReportAllocs()
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				h, _ := w.Schedule(deadline, 1)
				w.Cancel(h)
			}
		})
	})
	b.Run("go-afterfunc", func(b *testing.B) {
		benchTimers(b)
		f := func() {}
		b.ReportAllocs()
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				time.AfterFunc(time.Minute, f).Stop()
			}
		})
	})
}

// BenchmarkPile fires a pile of timers sharing one deadline on a fake clock:
// one op schedules the pile and moves the clock to the tick before the
// deadline's, letting the driver cascade the pile to level 0 (not timed: the
// real driver does it ahead of the deadline unless the deadline's tick starts
// a 64-tick block), then moves the clock past the deadline and waits until
// onExpire has received every timer. first-µs is the time from that move to
// the first onExpire call, last-µs to the last; the allocations are the
// fire's. The consumer only counts. No peer: Go's runtime timers have no
// batch hand-off to compare.
func BenchmarkPile(b *testing.B) {
	for _, n := range []int{200_000, 1_000_000} {
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			clock := newFakeClock()
			var got int
			var first, last time.Time
			done := make(chan struct{}, 1)
			w, err := New(Config{Clock: clock}, func(batch []Expired[uint64]) {
				if got == 0 {
					first = time.Now()
				}
				if got += len(batch); got == n {
					last = time.Now()
					done <- struct{}{}
				}
			})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { w.Stop() })
			var firstSum, lastSum time.Duration
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				b.StopTimer()
				got = 0
				deadline := clock.Now().Add(100 * time.Millisecond)
				if w.tickOf(w.offset(deadline))%levelSlots == 0 {
					deadline = deadline.Add(w.tickDur())
				}
				for i := range n {
					w.Schedule(deadline, uint64(i))
				}
				clock.Advance(deadline.Sub(clock.Now()) - w.tickDur())
				for !w.onlyLevel0() {
					time.Sleep(100 * time.Microsecond)
				}
				b.StartTimer()
				start := time.Now()
				clock.Advance(w.tickDur())
				<-done
				firstSum += first.Sub(start)
				lastSum += last.Sub(start)
			}
			b.ReportMetric(float64(firstSum.Microseconds())/float64(b.N), "first-µs")
			b.ReportMetric(float64(lastSum.Microseconds())/float64(b.N), "last-µs")
			b.ReportMetric(float64(lastSum.Nanoseconds())/float64(b.N)/float64(n), "ns/timer")
		})
	}
}

// tickDur returns the wheel's tick.
func (w *Wheel[T]) tickDur() time.Duration { return time.Duration(w.tick) }

// onlyLevel0 reports whether no shard holds a timer above level 0 or in a
// cascade under way.
func (w *Wheel[T]) onlyLevel0() bool {
	for i := range w.shards {
		s := &w.shards[i]
		s.mu.Lock()
		busy := s.t.pend != 0
		for _, occ := range s.t.occupied[1:numLevels] {
			busy = busy || occ != 0
		}
		s.mu.Unlock()
		if busy {
			return false
		}
	}
	return true
}
