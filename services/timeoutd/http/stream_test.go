package http

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ordertimeout/ordertimeout/services/timeoutd"
	"github.com/ordertimeout/ordertimeout/services/timeoutd/api"
)

// busyService is a fakeService safe for concurrent streams whose
// generation changes at every look, so every tick sends a snapshot.
type busyService struct {
	*fakeService
	mu  sync.Mutex
	gen atomic.Uint64
}

func (b *busyService) Generation() uint64 { return b.gen.Add(1) }

func (b *busyService) ListPending(ctx context.Context, q timeoutd.Query) ([]timeoutd.Timeout, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.fakeService.ListPending(ctx, q)
}

// newBusy returns a busyService with n pending timeouts carrying payloads
// of payloadBytes.
func newBusy(n, payloadBytes int) *busyService {
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	f := &fakeService{ready: true}
	payload := json.RawMessage(`"` + strings.Repeat("x", payloadBytes) + `"`)
	for i := range n {
		k := fmt.Sprintf("k-%04d", i)
		f.pending = append(f.pending, timeoutd.Timeout{Key: k, Version: 1, Deadline: base.Add(time.Duration(i) * time.Second),
			FireSubject: "orders.cancel." + k, Payload: payload})
	}
	return &busyService{fakeService: f}
}

// metric returns the value of the counter or gauge name in reg.
func metric(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		m := mf.GetMetric()[0]
		if c := m.GetCounter(); c != nil {
			return c.GetValue()
		}
		return m.GetGauge().GetValue()
	}
	t.Fatalf("no metric %s", name)
	return 0
}

// eventually polls cond every 10ms until it holds or timeout passes.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// openStream opens /api/v1/stream and reads its first event; the stream
// stays open until the test ends.
func openStream(t *testing.T, url string) { t.Helper(); openStreamQuery(t, url, "") }

// openStreamQuery is openStream with a query string ("?soonest=5").
func openStreamQuery(t *testing.T, url, query string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	req, _ := http.NewRequestWithContext(ctx, "GET", url+"/api/v1/stream"+query, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("stream: status %d", resp.StatusCode)
	}
	if ev, _ := bufio.NewReader(resp.Body).ReadString('\n'); ev != "event: snapshot\n" {
		t.Fatalf("stream: first line %q", ev)
	}
}

func TestStreamsBeyondMaxAreRefused(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	h, err := NewHandler(Config{Service: newBusy(2, 0), Registry: reg, MaxStreams: 2, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close) // after the streams' cleanups end them: Close waits for open connections
	openStream(t, srv.URL)
	openStream(t, srv.URL)

	resp, err := http.Get(srv.URL + "/api/v1/stream")
	if err != nil {
		t.Fatal(err)
	}
	var p struct {
		Status int    `json:"status"`
		Detail string `json:"detail"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&p)
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Content-Type") != "application/problem+json" ||
		resp.Header.Get("Retry-After") == "" || p.Status != 503 || !strings.Contains(p.Detail, "TIMEOUTD_MAX_STREAMS") {
		t.Fatalf("third stream: %d %s Retry-After %q %+v; want 503 problem+json with Retry-After",
			resp.StatusCode, resp.Header.Get("Content-Type"), resp.Header.Get("Retry-After"), p)
	}
	if got := metric(t, reg, "timeoutd_http_streams_refused_total"); got != 1 {
		t.Fatalf("refused = %v, want 1", got)
	}
	if got := metric(t, reg, "timeoutd_http_streams"); got != 2 {
		t.Fatalf("open streams = %v, want 2", got)
	}
}

// TestStreamDropsClientThatDoesNotRead opens a stream that never reads
// (snapshots of about 2 MB, a small receive buffer): once the socket
// buffers are full a write waits StreamWriteTimeout, the stream is dropped
// and counted, its handler returns and frees its slot, and a reading
// client still gets its stream.
func TestStreamDropsClientThatDoesNotRead(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	h, err := NewHandler(Config{Service: newBusy(api.LimitMax, 4000), Registry: reg, MaxStreams: 1,
		SnapshotInterval: 10 * time.Millisecond, StreamWriteTimeout: 200 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.(*net.TCPConn).SetReadBuffer(4096)
	if _, err := fmt.Fprintf(conn, "GET /api/v1/stream?soonest=%d HTTP/1.1\r\nHost: x\r\n\r\n", api.LimitMax); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "stream open", func() bool { return metric(t, reg, "timeoutd_http_streams") == 1 })
	eventually(t, 30*time.Second, "stream dropped", func() bool { return metric(t, reg, "timeoutd_http_streams_dropped_total") == 1 })
	eventually(t, 5*time.Second, "handler returned", func() bool { return metric(t, reg, "timeoutd_http_streams") == 0 })
	openStream(t, srv.URL) // the slot is free again
}

// TestPayloadsNeedReadToken checks who sees the payloads of pending
// timeouts, on every read route.
func TestPayloadsNeedReadToken(t *testing.T) {
	t.Parallel()
	const payload = `{"customer":"c-9"}`
	tests := []struct {
		name, readToken, auth string
		status                int
		visible               bool
	}{
		{"no read token configured: visible to all", "", "", 200, true},
		{"no read token configured: any header ignored", "", "Bearer whatever", 200, true},
		{"read token, no header: withheld", "rt", "", 200, false},
		{"read token presented", "rt", "Bearer rt", 200, true},
		{"operator token presented", "rt", "Bearer op", 200, true},
		{"wrong token: 401", "rt", "Bearer nope", 401, false},
		{"not a bearer token: 401", "rt", "Basic cnQ6", 401, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := newFake()
			f.pending[0].Payload = json.RawMessage(payload)
			h, err := NewHandler(Config{Service: f, ReadToken: tt.readToken, Logger: slog.New(slog.DiscardHandler),
				Operator: Operator{Token: "op", OrdersURL: "http://orders.invalid"}})
			if err != nil {
				t.Fatal(err)
			}
			srv := httptest.NewServer(h)
			defer srv.Close()
			for _, path := range []string{"/api/v1/timeouts", "/api/v1/timeouts/a-1", "/api/v1/stream"} {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+path, nil)
				if tt.auth != "" {
					req.Header.Set("Authorization", tt.auth)
				}
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				body := bufio.NewReader(resp.Body)
				line, _ := body.ReadString('\n')
				if path == "/api/v1/stream" && resp.StatusCode == 200 {
					line, _ = body.ReadString('\n') // data: line
				}
				resp.Body.Close()
				cancel()
				if resp.StatusCode != tt.status {
					t.Fatalf("%s: status %d, want %d: %s", path, resp.StatusCode, tt.status, line)
				}
				if tt.status != 200 {
					if resp.Header.Get("Content-Type") != "application/problem+json" || strings.Contains(line, "c-9") {
						t.Fatalf("%s: %s %s, want a problem without the payload", path, resp.Header.Get("Content-Type"), line)
					}
					continue
				}
				hasPayload, hidden := strings.Contains(line, `"payload":`+payload), strings.Contains(line, `"payload_hidden":true`)
				if hasPayload != tt.visible || hidden == tt.visible || strings.Contains(line, "c-9") != tt.visible {
					t.Fatalf("%s: payload visible %v, marked hidden %v; want visible %v: %s", path, hasPayload, hidden, tt.visible, line)
				}
			}
		})
	}
}

func TestStreamConfigValidated(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		cfg   Config
		field string
	}{
		{"negative max streams", Config{MaxStreams: -1}, "MaxStreams"},
		{"negative write timeout", Config{StreamWriteTimeout: -time.Second}, "StreamWriteTimeout"},
		{"negative snapshot interval", Config{SnapshotInterval: -time.Second}, "SnapshotInterval"},
		{"negative heartbeat", Config{Heartbeat: -time.Second}, "Heartbeat"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tt.cfg.Service = newFake()
			if _, err := NewHandler(tt.cfg); err == nil || !strings.Contains(err.Error(), "Config."+tt.field) {
				t.Fatalf("err = %v, want one naming Config.%s", err, tt.field)
			}
		})
	}
}

// countingService counts the pages read from the store by the Service it
// wraps.
type countingService struct {
	Service
	lists atomic.Int64
}

func (c *countingService) ListPending(ctx context.Context, q timeoutd.Query) ([]timeoutd.Timeout, error) {
	c.lists.Add(1)
	return c.Service.ListPending(ctx, q)
}

// TestStreamsShareOneSnapshot: streams of the same view share the encoded
// snapshot of a generation, so their cost to the read pool does not grow
// with their number (500 idle streams moved the fire lateness p99 from 13
// to 52 ms when each built its own).
func TestStreamsShareOneSnapshot(t *testing.T) {
	t.Parallel()
	svc := &countingService{Service: newFake()}
	h, err := NewHandler(Config{Service: svc, SnapshotInterval: time.Hour, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	for range 20 {
		openStream(t, srv.URL)
	}
	if n := svc.lists.Load(); n != 1 {
		t.Fatalf("20 streams of one generation read %d pages, want 1", n)
	}
	openStreamQuery(t, srv.URL, "?soonest=5")
	if n := svc.lists.Load(); n != 2 {
		t.Fatalf("a stream of another view read no page of its own (%d reads)", n)
	}
}

// TestBusyStreamsShareOneSnapshotPerInterval: while the generation changes
// all the time, streams of one view still share one snapshot per
// SnapshotInterval, so ten open dashboards cost the read pool what one
// does (each built its own under load before, 4 a second each).
func TestBusyStreamsShareOneSnapshotPerInterval(t *testing.T) {
	t.Parallel()
	const interval = 20 * time.Millisecond
	svc := &countingService{Service: newBusy(3, 0)}
	h, err := NewHandler(Config{Service: svc, SnapshotInterval: interval, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	for range 10 {
		openStream(t, srv.URL)
	}
	start, before := time.Now(), svc.lists.Load()
	time.Sleep(25 * interval) // a window to count the builds in
	builds, most := svc.lists.Load()-before, int64(time.Since(start)/interval)+2
	if builds > most || builds < 2 {
		t.Fatalf("10 busy streams built %d snapshots in %s, want 2 to %d (one per %s)", builds, time.Since(start), most, interval)
	}
}
