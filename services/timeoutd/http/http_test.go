package http

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ordertimeout/ordertimeout/pkg/events"
	"github.com/ordertimeout/ordertimeout/services/timeoutd"
	"github.com/ordertimeout/ordertimeout/services/timeoutd/api"
	"github.com/ordertimeout/ordertimeout/services/timeoutd/internal/lease"
)

// fakeService serves a fixed, sorted set of pending timeouts.
type fakeService struct {
	ready   bool
	pending []timeoutd.Timeout
	failDB  error
	lastQ   timeoutd.Query
}

func (f *fakeService) IsReady() bool               { return f.ready }
func (f *fakeService) Check(context.Context) error { return f.failDB }
func (f *fakeService) Generation() uint64          { return 1 }
func (f *fakeService) Cluster() []timeoutd.Member {
	return []timeoutd.Member{{ID: "timeoutd-1", Self: true, Partitions: []int{0, 1},
		Info: timeoutd.InstanceInfo{Pending: int64(len(f.pending)), Fired: 3, LatenessP50: 2 * time.Millisecond}}}
}
func (f *fakeService) Ownership() []timeoutd.PartitionOwnership {
	return []timeoutd.PartitionOwnership{{Partition: 0, Owner: "timeoutd-1", Epoch: 3, Lease: lease.LeaseHeld},
		{Partition: 1, Owner: "timeoutd-1", Epoch: 2, Lease: lease.LeaseHeld, Why: lease.Opening}, {Partition: 2, Lease: lease.LeaseFree, Why: lease.Unowned}}
}
func (f *fakeService) Recent(n int) []events.Expiry {
	return []events.Expiry{{Key: "r", Version: 1, Outcome: events.OutcomeFired, LatenessNs: 2e6}}[:min(n, 1)]
}
func (f *fakeService) Stats() timeoutd.Stats {
	return timeoutd.Stats{Ready: f.ready, Pending: int64(len(f.pending)), Fired: 3}
}
func (f *fakeService) Deadlines(now time.Time) timeoutd.Deadlines {
	return timeoutd.Deadlines{From: now.Truncate(time.Second), Width: 5 * time.Second, Due: 1, Counts: []int64{2, 0, 1},
		Pending: int64(len(f.pending)), Upcoming: []timeoutd.Bucket{{Label: "next minute", Within: time.Minute, Count: 1}}}
}

func (f *fakeService) ListPending(_ context.Context, q timeoutd.Query) ([]timeoutd.Timeout, error) {
	f.lastQ = q
	if f.failDB != nil {
		return nil, f.failDB
	}
	var out []timeoutd.Timeout
	for _, t := range f.pending {
		after := t.Deadline.After(q.After.Deadline) || (t.Deadline.Equal(q.After.Deadline) && t.Key > q.After.Key)
		if after && strings.HasPrefix(t.Key, q.KeyPrefix) && len(out) < q.Limit {
			out = append(out, t)
		}
	}
	return out, nil
}

func (f *fakeService) GetPending(_ context.Context, key string) (timeoutd.Timeout, error) {
	for _, t := range f.pending {
		if t.Key == key {
			return t, nil
		}
	}
	return timeoutd.Timeout{}, timeoutd.ErrNotFound
}

func newFake() *fakeService {
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	f := &fakeService{ready: true}
	for i, k := range []string{"a-1", "a-2", "b-1", "a-3"} {
		f.pending = append(f.pending, timeoutd.Timeout{Key: k, Version: 1, Deadline: base.Add(time.Duration(i) * time.Second), FireSubject: "orders.cancel." + k})
	}
	return f
}

func TestAPI(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		path       string
		svc        func(*fakeService)
		status     int
		ctype      string
		bodyHas    []string
		problemFor string // field named in a validation problem
	}{
		{"list first page", "/api/v1/timeouts?limit=2", nil, 200, "application/json", []string{`"key":"a-1"`, `"key":"a-2"`, `"next_cursor":"`}, ""},
		{"list by prefix", "/api/v1/timeouts?key=b-", nil, 200, "application/json", []string{`"key":"b-1"`}, ""},
		{"limit too large", "/api/v1/timeouts?limit=501", nil, 400, "application/problem+json", []string{`"status":400`}, "limit"},
		{"limit not a number", "/api/v1/timeouts?limit=x", nil, 400, "application/problem+json", nil, "limit"},
		{"bad cursor", "/api/v1/timeouts?cursor=@@@", nil, 400, "application/problem+json", nil, "cursor"},
		{"bad key prefix", "/api/v1/timeouts?key=a.b.c", nil, 400, "application/problem+json", nil, "key"},
		{"get one", "/api/v1/timeouts/a-2", nil, 200, "application/json", []string{`"key":"a-2"`, `"fire_subject":"orders.cancel.a-2"`}, ""},
		{"get missing", "/api/v1/timeouts/zz", nil, 404, "application/problem+json", []string{`"status":404`}, ""},
		{"get invalid key", "/api/v1/timeouts/a.b.c", nil, 400, "application/problem+json", nil, "key"},
		{"store failure is a generic 500", "/api/v1/timeouts", func(f *fakeService) { f.failDB = errors.New("secret dsn in error") }, 500, "application/problem+json", []string{"request id"}, ""},
		{"stats", "/api/v1/stats", nil, 200, "application/json", []string{`"pending":4`, `"fired":3`, `"width_ms":5000,"due":1,"counts":[2,0,1],"later":0`, `"within_ms":60000`}, ""},
		{"cluster", "/api/v1/cluster", nil, 200, "application/json", []string{`"partitions":64`, `"id":"timeoutd-1"`, `"self":true`, `"partitions":[0,1]`, `"pending":4`, `"lateness_p50_ms":2`,
			`"may_fire":1`, `{"partition":0,"owner":"timeoutd-1","epoch":3,"lease":"held","may_fire":true}`,
			`{"partition":1,"owner":"timeoutd-1","epoch":2,"lease":"held","may_fire":false,"why":"opening"}`,
			`{"partition":2,"epoch":0,"lease":"free","may_fire":false,"why":"unowned"}`}, ""},
		{"expiries", "/api/v1/expiries?limit=5", nil, 200, "application/json", []string{`"key":"r"`, `"lateness_ms":2`}, ""},
		{"unknown endpoint", "/api/v1/nope", nil, 404, "application/problem+json", nil, ""},
		{"healthz", "/healthz", func(f *fakeService) { f.ready = false }, 200, "text/plain; charset=utf-8", []string{"ok"}, ""},
		{"readyz ready", "/readyz", nil, 200, "text/plain; charset=utf-8", nil, ""},
		{"readyz recovering", "/readyz", func(f *fakeService) { f.ready = false }, 503, "application/problem+json", []string{"recovery"}, ""},
		{"readyz db down", "/readyz", func(f *fakeService) { f.failDB = errors.New("refused") }, 503, "application/problem+json", []string{"postgres: refused"}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := newFake()
			if tt.svc != nil {
				tt.svc(f)
			}
			h, err := NewHandler(Config{Service: f, Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				t.Fatal(err)
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest("GET", tt.path, nil))
			body := rec.Body.String()
			if rec.Code != tt.status || rec.Header().Get("Content-Type") != tt.ctype {
				t.Fatalf("%s = %d %s %s; want %d %s", tt.path, rec.Code, rec.Header().Get("Content-Type"), body, tt.status, tt.ctype)
			}
			for _, s := range tt.bodyHas {
				if !strings.Contains(body, s) {
					t.Errorf("body %s lacks %s", body, s)
				}
			}
			if strings.Contains(body, "secret") {
				t.Errorf("internal error leaked: %s", body)
			}
			if tt.problemFor != "" && !strings.Contains(body, `"field":"`+tt.problemFor+`"`) {
				t.Errorf("problem %s does not name field %s", body, tt.problemFor)
			}
		})
	}
}

func TestPagingWalksEveryTimeoutOnce(t *testing.T) {
	t.Parallel()
	f := newFake()
	h, _ := NewHandler(Config{Service: f, Logger: slog.New(slog.DiscardHandler)})
	var keys []string
	cursor := ""
	for range 10 {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", "/api/v1/timeouts?limit=1&cursor="+cursor, nil))
		var p api.Page
		if err := json.Unmarshal(rec.Body.Bytes(), &p); err != nil {
			t.Fatal(err)
		}
		for _, it := range p.Items {
			keys = append(keys, it.Key)
		}
		if cursor = p.NextCursor; cursor == "" {
			break
		}
	}
	if got := strings.Join(keys, ","); got != "a-1,a-2,b-1,a-3" {
		t.Fatalf("walked %s", got)
	}
}

func TestStreamSendsSnapshotFirst(t *testing.T) {
	t.Parallel()
	h, _ := NewHandler(Config{Service: newFake()})
	srv := httptest.NewServer(h)
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+"/api/v1/stream?soonest=2&recent=1", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("Content-Type = %s", ct)
	}
	r := bufio.NewReader(resp.Body)
	ev, _ := r.ReadString('\n')
	data, _ := r.ReadString('\n')
	if ev != "event: snapshot\n" || !strings.HasPrefix(data, "data: ") {
		t.Fatalf("first lines = %q %q", ev, data)
	}
	var snap api.Snapshot
	if err := json.Unmarshal([]byte(strings.TrimPrefix(data, "data: ")), &snap); err != nil {
		t.Fatal(err)
	}
	if len(snap.Soonest) != 2 || snap.Soonest[0].Key != "a-1" || len(snap.Recent) != 1 || snap.Stats.Pending != 4 {
		t.Fatalf("snapshot = %+v", snap)
	}
}

func TestDashboard(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for name, body := range map[string]string{"index.html": "<html>", "main.wasm": "raw-wasm", "main.wasm.gz": "gz-wasm", "app.js": "js"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	h, err := NewHandler(Config{Service: newFake(), DashboardDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, path, acceptEnc string
		status                int
		body, ctype, encoding string
	}{
		{"index", "/", "", 200, "<html>", "text/html; charset=utf-8", ""},
		{"wasm gzip", "/main.wasm", "br, gzip", 200, "gz-wasm", "application/wasm", "gzip"},
		{"wasm identity", "/main.wasm", "", 200, "raw-wasm", "application/wasm", ""},
		{"gzip refused", "/main.wasm", "gzip;q=0", 200, "raw-wasm", "application/wasm", ""},
		{"no gz sibling", "/app.js", "gzip", 200, "js", "text/javascript; charset=utf-8", ""},
		{"missing", "/nope.css", "", 404, "", "", ""},
		{"traversal", "/../../etc/passwd", "", 404, "", "", ""},
		{"api still routed", "/api/v1/stats", "", 200, `"pending"`, "application/json", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			req := httptest.NewRequest("GET", tt.path, nil)
			if tt.acceptEnc != "" {
				req.Header.Set("Accept-Encoding", tt.acceptEnc)
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code != tt.status || !strings.Contains(rec.Body.String(), tt.body) {
				t.Fatalf("%s = %d %q", tt.path, rec.Code, rec.Body.String())
			}
			if tt.status != 200 {
				return
			}
			if ct := rec.Header().Get("Content-Type"); ct != tt.ctype {
				t.Errorf("Content-Type = %q, want %q", ct, tt.ctype)
			}
			if enc := rec.Header().Get("Content-Encoding"); enc != tt.encoding {
				t.Errorf("Content-Encoding = %q, want %q", enc, tt.encoding)
			}
			if !strings.HasPrefix(tt.path, "/api/") {
				if csp := rec.Header().Get("Content-Security-Policy"); !strings.Contains(csp, "'wasm-unsafe-eval'") || strings.Contains(csp, "unsafe-inline") {
					t.Errorf("CSP = %q", csp)
				}
			}
		})
	}
}
