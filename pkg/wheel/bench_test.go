package wheel

import (
	"math/rand/v2"
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
