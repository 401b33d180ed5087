package schedule

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

// BenchmarkScheduleMemory measures the memory of the in-memory schedule
// (index + wheel) per pending timeout: TIMEOUTD_BENCH_PENDING timeouts
// (default 1M) with 14-character keys like the recovery benchmark's, spread
// over an hour. It reports the live heap after a GC (runtime.ReadMemStats)
// and the process's RSS and peak RSS (/proc/self/status) growth, each per
// pending timeout. Run it alone, once:
//
//	go test -run '^$' -bench ScheduleMemory -benchtime 1x ./services/timeoutd/internal/schedule
func BenchmarkScheduleMemory(b *testing.B) {
	n := 1_000_000
	if v := os.Getenv("TIMEOUTD_BENCH_PENDING"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil {
			b.Fatal(err)
		}
	}
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	rss0, _ := procStatus(b)
	s, err := New(Config{Tick: time.Millisecond, MaxPending: n, OnDue: func([]Due) {}})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Stop()
	base := time.Now().Add(time.Hour)
	start := time.Now()
	const batch = 5000
	changes := make([]Change, 0, batch)
	for i := range n {
		dl := base.Add(time.Duration(i) * time.Hour / time.Duration(n))
		changes = append(changes, Change{Entry: Entry{Key: fmt.Sprintf("ord-%010d", i), Version: 1, Deadline: dl}})
		if len(changes) == batch || i == n-1 {
			if set, _ := s.Apply(changes); set != len(changes) {
				b.Fatalf("applied %d of %d sets", set, len(changes))
			}
			changes = changes[:0]
		}
	}
	took := time.Since(start)
	runtime.GC()
	runtime.ReadMemStats(&after)
	rss1, hwm1 := procStatus(b)
	if s.Len() != n {
		b.Fatalf("len = %d, want %d", s.Len(), n)
	}
	b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/float64(n), "heap_B/pending")
	b.ReportMetric(float64(rss1-rss0)/float64(n), "rss_B/pending")
	b.ReportMetric(float64(hwm1-rss0)/float64(n), "peak_rss_B/pending")
	b.ReportMetric(float64(took.Nanoseconds())/float64(n), "ns/set")
	runtime.KeepAlive(s)
}

// procStatus returns VmRSS and VmHWM of this process in bytes.
func procStatus(b *testing.B) (rss, hwm int64) {
	b.Helper()
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		kb, _ := strconv.ParseInt(f[1], 10, 64)
		switch f[0] {
		case "VmRSS:":
			rss = kb << 10
		case "VmHWM:":
			hwm = kb << 10
		}
	}
	return rss, hwm
}
