package daemon_test

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ordertimeout/ordertimeout/pkg/events"
	"github.com/ordertimeout/ordertimeout/services/timeoutd/daemon"
	thttp "github.com/ordertimeout/ordertimeout/services/timeoutd/http"
)

// The benchmarks drive a real daemon on the test containers (Postgres runs
// with fsync=off and synchronous_commit=off, see internal/testinfra) and
// report throughput and lateness with b.ReportMetric. Each runs its
// workload once whatever b.N: go test -run '^$' -bench . -benchtime 1x.

// publishAll publishes cmds asynchronously and waits for every PubAck.
func (e *env) publishAll(b testing.TB, cmds []events.Command) {
	b.Helper()
	nc, err := nats.Connect(e.nats.URL)
	if err != nil {
		b.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(8192))
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range cmds {
		data, _ := json.Marshal(c)
		m := &nats.Msg{Subject: c.Subject(), Data: data, Header: nats.Header{}}
		m.Header.Set(jetstream.MsgIDHeader, c.MsgID(events.NewNonce()))
		if _, err := js.PublishMsgAsync(m, jetstream.WithStallWait(30*time.Second)); err != nil {
			b.Fatal(err)
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-time.After(2 * time.Minute):
		b.Fatal("publish did not complete")
	}
}

// BenchmarkIngest measures durable ingest: N set commands wait in JetStream
// before a daemon starts, then go through validate → upsert → commit → ack
// → wheel; then N clears wait while the daemon is stopped and a new one
// applies them. Metrics: commands per second from ready to all applied in
// memory, so the publisher does not share the two cores meanwhile.
func BenchmarkIngest(b *testing.B) {
	const n = 200_000
	e := newEnv(b)
	far := time.Now().Add(time.Hour)
	sets := make([]events.Command, n)
	clears := make([]events.Command, n)
	for i := range sets {
		sets[i] = setCmd("ord-"+strconv.Itoa(i), 1, far.Add(time.Duration(i)*time.Millisecond))
		clears[i] = clearCmd("ord-"+strconv.Itoa(i), 2)
	}
	start := time.Now()
	e.publishAll(b, sets)
	pub := time.Since(start)

	d := e.start(b, nil)
	start = time.Now()
	eventually(b, 2*time.Minute, "sets applied", func() bool { return d.Service().Pending() == n })
	setRate := float64(n) / time.Since(start).Seconds()
	d.stop(b)

	e.publishAll(b, clears)
	d = e.start(b, nil) // recovers the N pending first
	start = time.Now()
	eventually(b, 2*time.Minute, "clears applied", func() bool { return d.Service().Pending() == 0 })
	clearRate := float64(n) / time.Since(start).Seconds()
	b.ReportMetric(setRate, "set/s")
	b.ReportMetric(clearRate, "clear/s")
	b.ReportMetric(float64(n)/pub.Seconds(), "publish/s")
	reportLoad(b)
}

// BenchmarkExpiryStorm schedules N timeouts due at Rate per second and
// measures, for every expiry event, its JetStream timestamp (the PubAck)
// minus its deadline.
func BenchmarkExpiryStorm(b *testing.B) {
	const n, rate = 100_000, 20_000
	e := newEnv(b)
	var logTo *os.File
	if p := os.Getenv("TIMEOUTD_BENCH_LOG"); p != "" {
		logTo, _ = os.Create(p)
	}
	d := e.start(b, func(c *daemon.Config) {
		if logTo != nil {
			c.Logger = slog.New(slog.NewJSONHandler(logTo, &slog.HandlerOptions{Level: slog.LevelDebug}))
		}
	})
	first := time.Now().Add(20 * time.Second)
	cmds := make([]events.Command, n)
	for i := range cmds {
		cmds[i] = setCmd("st-"+strconv.Itoa(i), 1, first.Add(time.Duration(i)*time.Second/rate))
	}
	e.publishAll(b, cmds)
	eventually(b, time.Minute, "applied", func() bool { return d.Service().Stats().Scheduled == n })
	if time.Now().After(first) {
		b.Fatalf("ingest of %d took past the first deadline", n)
	}
	eventually(b, 2*time.Minute, "applied", func() bool { return e.unpublished(b) == 0 && d.Service().Stats().Fired == n })

	_, metrics := get(b, "http://"+d.Addr()+"/metrics")
	for _, l := range strings.Split(metrics, "\n") {
		if strings.HasPrefix(l, "timeoutd_batch_size_sum") || strings.HasPrefix(l, "timeoutd_batch_size_count") || strings.HasPrefix(l, "timeoutd_fire_lateness_seconds_sum") {
			b.Log(l)
		}
	}
	reportLateness(b, e.latenesses(b, n))
	reportLoad(b)
}

// latenesses reads the first n events of the expiry stream and returns each
// one's JetStream timestamp (its PubAck) minus its deadline.
func (e *env) latenesses(b *testing.B, n int) []time.Duration {
	cons, err := e.js.OrderedConsumer(context.Background(), events.StreamExpiries, jetstream.OrderedConsumerConfig{})
	if err != nil {
		b.Fatal(err)
	}
	late := make([]time.Duration, 0, n)
	for len(late) < n {
		batch, err := cons.Fetch(5000, jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			b.Fatal(err)
		}
		got := 0
		for m := range batch.Messages() {
			got++
			md, _ := m.Metadata()
			ex, err := events.DecodeExpiry(m.Data())
			if err != nil {
				b.Fatal(err)
			}
			late = append(late, md.Timestamp.Sub(ex.Deadline))
		}
		if got == 0 {
			b.Fatalf("only %d of %d events in the stream", len(late), n)
		}
	}
	return late
}

// reportLateness reports the p50, p99 and max of late in milliseconds, the
// number of early events and the load average.
func reportLateness(b *testing.B, late []time.Duration) {
	early := 0
	for _, l := range late {
		if l < 0 {
			early++
		}
	}
	slices.Sort(late)
	q := func(p float64) float64 { return float64(late[int(p*float64(len(late)-1))]) / 1e6 }
	b.ReportMetric(q(0.5), "p50_ms")
	b.ReportMetric(q(0.99), "p99_ms")
	b.ReportMetric(float64(late[len(late)-1])/1e6, "max_ms")
	b.ReportMetric(float64(early), "early")
	reportLoad(b)
}

// BenchmarkFireLatenessIdleStreams measures the fire lateness (PubAck minus
// deadline) of 10,000 timeouts due at 1,000 a second, with 0 and with 500
// live-stream clients that never read (raw connections with a 4 KiB
// receive buffer), all admitted (MaxStreams 600) or bounded by the default
// MaxStreams, issue 14 item 2.6.
func BenchmarkFireLatenessIdleStreams(b *testing.B) {
	const n, rate = 10_000, 1_000
	for _, c := range []struct{ clients, maxStreams int }{{0, 0}, {500, 600}, {500, 0}} {
		b.Run(fmt.Sprintf("clients=%d/max_streams=%d", c.clients, cmp.Or(c.maxStreams, thttp.MaxStreamsDefault)), func(b *testing.B) {
			clients := c.clients
			e := newEnv(b)
			d := e.start(b, func(cfg *daemon.Config) { cfg.MaxStreams = c.maxStreams })
			for range clients {
				conn, err := net.Dial("tcp", d.Addr())
				if err != nil {
					b.Fatal(err)
				}
				defer conn.Close()
				_ = conn.(*net.TCPConn).SetReadBuffer(4096)
				if _, err := fmt.Fprintf(conn, "GET /api/v1/stream?soonest=100 HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
					b.Fatal(err)
				}
			}
			first := time.Now().Add(10 * time.Second)
			cmds := make([]events.Command, n)
			for i := range cmds {
				cmds[i] = setCmd("is-"+strconv.Itoa(i), 1, first.Add(time.Duration(i)*time.Second/rate))
			}
			e.publishAll(b, cmds)
			eventually(b, time.Minute, "applied", func() bool { return d.Service().Stats().Scheduled == n })
			if time.Now().After(first) {
				b.Fatalf("ingest of %d took past the first deadline", n)
			}
			eventually(b, 2*time.Minute, "fired", func() bool { return e.unpublished(b) == 0 && d.Service().Stats().Fired == n })
			_, metrics := get(b, "http://"+d.Addr()+"/metrics")
			for _, l := range strings.Split(metrics, "\n") {
				if strings.HasPrefix(l, "timeoutd_http_streams") {
					b.Log(l)
				}
			}
			reportLateness(b, e.latenesses(b, n))
		})
	}
}

// BenchmarkRecovery1M inserts 1M pending rows with SQL, then measures a
// daemon's start to ready (migrations, streams, load), the
// Postgres bytes per pending row and the Go heap per pending timeout.
func BenchmarkRecovery1M(b *testing.B) {
	const n = 1_000_000
	e := newEnv(b)
	ctx := context.Background()
	now := time.Now()
	if _, err := e.pool.Exec(ctx, `INSERT INTO timeouts (version, deadline_ns, part, state, key)
		SELECT 1, $1::bigint + i::bigint * 1000000, i % 16, 0, timeout_key('ord-' || lpad(i::text, 10, '0')) FROM generate_series(1, $2) i`,
		now.Add(time.Hour).UnixNano(), n); err != nil {
		b.Fatal(err)
	}
	if _, err := e.pool.Exec(ctx, `VACUUM ANALYZE timeouts`); err != nil {
		b.Fatal(err)
	}
	var bytes int64
	if err := e.pool.QueryRow(ctx, `SELECT pg_total_relation_size('timeouts')`).Scan(&bytes); err != nil {
		b.Fatal(err)
	}
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	start := time.Now()
	d := e.start(b, nil)
	took := time.Since(start)
	if p := d.Service().Pending(); p != n {
		b.Fatalf("pending = %d, want %d", p, n)
	}
	runtime.GC()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	b.ReportMetric(took.Seconds(), "start_to_ready_s")
	b.ReportMetric(float64(bytes)/n, "pg_B/pending")
	b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/n, "heap_B/pending")
	reportLoad(b)
	fmt.Printf("recovery of %d: %v; postgres %d B (%.0f B/row); heap +%d MB\n", n, took, bytes, float64(bytes)/n, (after.HeapAlloc-before.HeapAlloc)>>20)
}

// reportLoad reports the machine's 1-minute load average: the two cores are
// shared, and the figures mean little without it.
func reportLoad(b *testing.B) {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return
	}
	if f := strings.Fields(string(data)); len(f) > 0 {
		if l, err := strconv.ParseFloat(f[0], 64); err == nil {
			b.ReportMetric(l, "loadavg")
		}
	}
}
