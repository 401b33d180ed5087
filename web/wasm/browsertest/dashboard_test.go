//go:build !js

package browsertest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/ordertimeout/ordertimeout/services/timeoutd/api"
)

// fakeAPI is a scripted timeoutd: the dashboard's files with the CSP and
// precompressed main.wasm timeoutd uses, a stream whose snapshots the test
// sets, and pages of a fixed set of pending timeouts.
type fakeAPI struct {
	dist string

	mu      sync.Mutex
	snap    api.Snapshot
	changed chan struct{} // closed and replaced on every change
	drop    chan struct{} // closed and replaced to end every open stream
	pending []api.Timeout
}

func newFakeAPI(t *testing.T, dist string) (*fakeAPI, *httptest.Server) {
	t.Helper()
	f := &fakeAPI{dist: dist, changed: make(chan struct{}), drop: make(chan struct{})}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/v1/stream", f.stream)
	mux.HandleFunc("GET /api/v1/timeouts", f.timeouts)
	mux.HandleFunc("GET /", f.static)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	t.Cleanup(f.dropStreams) // let the server close
	return f, srv
}

// set replaces the stream's snapshot and the pages' timeouts.
func (f *fakeAPI) set(snap api.Snapshot, pending []api.Timeout) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.snap, f.pending = snap, pending
	close(f.changed)
	f.changed = make(chan struct{})
}

// dropStreams ends every open stream, as a timeoutd restart would.
func (f *fakeAPI) dropStreams() {
	f.mu.Lock()
	defer f.mu.Unlock()
	close(f.drop)
	f.drop = make(chan struct{})
}

func (f *fakeAPI) static(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Security-Policy", "default-src 'self'; script-src 'self' 'wasm-unsafe-eval'")
	if r.URL.Path == "/main.wasm" && strings.Contains(r.Header.Get("Accept-Encoding"), "gzip") {
		w.Header().Set("Content-Type", "application/wasm")
		w.Header().Set("Content-Encoding", "gzip")
		http.ServeFile(w, r, filepath.Join(f.dist, "main.wasm.gz"))
		return
	}
	http.FileServer(http.Dir(f.dist)).ServeHTTP(w, r)
}

func (f *fakeAPI) stream(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	fmt.Fprint(w, "retry: 200\n\n")
	for {
		f.mu.Lock()
		data, _ := json.Marshal(f.snap)
		changed, drop := f.changed, f.drop
		f.mu.Unlock()
		fmt.Fprintf(w, "event: snapshot\ndata: %s\n\n", data)
		w.(http.Flusher).Flush()
		select {
		case <-changed:
		case <-drop:
			return
		case <-r.Context().Done():
			return
		}
	}
}

// timeouts pages through the pending timeouts; the cursor is an offset.
func (f *fakeAPI) timeouts(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	limit, _ := strconv.Atoi(q.Get("limit"))
	from, _ := strconv.Atoi(q.Get("cursor"))
	f.mu.Lock()
	var match []api.Timeout
	for _, p := range f.pending {
		if strings.HasPrefix(p.Key, q.Get("key")) {
			match = append(match, p)
		}
	}
	f.mu.Unlock()
	page := api.Page{Items: []api.Timeout{}}
	if from < len(match) {
		page.Items = match[from:min(from+limit, len(match))]
	}
	if from+limit < len(match) {
		page.NextCursor = strconv.Itoa(from + limit)
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(page)
}

// world builds n pending timeouts due every 7 s from now, and the snapshot
// of them with their recent expiries.
func world(now time.Time, n int, prefix string) (api.Snapshot, []api.Timeout) {
	var pending []api.Timeout
	for i := range n {
		pending = append(pending, api.Timeout{
			Key: fmt.Sprintf("%s-%04d", prefix, i), Version: int64(1 + i%3),
			Deadline: now.Add(time.Duration(i+1)*7*time.Second + 400*time.Millisecond), FireSubject: "orders.cancel.x",
		})
	}
	sort.Slice(pending, func(i, j int) bool { return pending[i].Deadline.Before(pending[j].Deadline) })
	snap := api.Snapshot{
		Stats: api.Stats{
			Now: now, Ready: true, Pending: int64(n),
			Totals:    api.Counters{Scheduled: uint64(n) + 40, Fired: 30, Cleared: 10},
			Rates:     api.Rates{ScheduledPerSec: 182.4, FiredPerSec: 12.5, ClearedPerSec: 3.2},
			Outbox:    api.Outbox{Rows: 2, OldestAgeMs: 4.2},
			Deadlines: byMinute(now, pending),
		},
		Soonest: pending[:min(20, n)],
	}
	for i := range 20 {
		lat := 0.8 + float64(i%7)*1.7
		out := "fired"
		if i == 6 {
			lat, out = 61000, "missed"
		}
		dl := now.Add(-time.Duration(i+1) * 900 * time.Millisecond)
		snap.Recent = append(snap.Recent, api.Expiry{
			Key: fmt.Sprintf("%s-done-%02d", prefix, i), Version: 2, Deadline: dl,
			FiredAt: dl.Add(time.Duration(lat * float64(time.Millisecond))), LatenessMs: lat, Outcome: out,
		})
	}
	return snap, pending
}

// byMinute is the histogram timeoutd sends of pending at now, in buckets
// of a minute.
func byMinute(now time.Time, pending []api.Timeout) api.Deadlines {
	d := api.Deadlines{From: now.Truncate(time.Second), WidthMs: time.Minute.Milliseconds(), Counts: []int64{}}
	for _, p := range pending {
		i := int(p.Deadline.Unix()-d.From.Unix()) / 60
		for len(d.Counts) <= i {
			d.Counts = append(d.Counts, 0)
		}
		d.Counts[i]++
	}
	return d
}

// buildDist builds web/wasm/dist (make wasm; quick when up to date).
func buildDist(t *testing.T) string {
	t.Helper()
	root := moduleRoot(t)
	if out, err := exec.Command("make", "-s", "-C", root, "wasm").CombinedOutput(); err != nil {
		t.Fatalf("make wasm: %v\n%s", err, out)
	}
	dist := filepath.Join(root, "web", "wasm", "dist")
	for _, f := range []string{"index.html", "app.css", "boot.js", "wasm_exec.js", "main.wasm", "main.wasm.gz"} {
		if _, err := os.Stat(filepath.Join(dist, f)); err != nil {
			t.Fatalf("dist: %v", err)
		}
	}
	return dist
}

const (
	rowSel  = "#pending-rows tr"
	connSel = `document.getElementById("conn")`
)

// firstRow is a JS expression of the first pending row's order id.
const firstRow = `(document.querySelector("#pending-rows tr")?.dataset.key ?? "")`

func TestDashboardInChromium(t *testing.T) {
	ctx := Chrome(t, Desktop)
	f, srv := newFakeAPI(t, buildDist(t))
	snap, pending := world(time.Now().UTC(), 120, "ord")
	f.set(snap, pending)

	Do(t, ctx, 15*time.Second, "open the dashboard", chromedp.Navigate(srv.URL+"/"))
	Poll(t, ctx, 10*time.Second, "the first snapshot", `document.getElementById("app")?.dataset.snapshots === "1"`)
	t.Logf("time to first data (navigation start → first snapshot rendered): %s", FirstData(t, ctx).Round(time.Millisecond))
	if enc, dec := WasmTransfer(t, ctx); enc <= 0 || enc > dec/2 {
		t.Errorf("main.wasm transferred as %d bytes for %d decoded, want it gzip-compressed", enc, dec)
	} else {
		t.Logf("main.wasm: %d bytes transferred (gzip), %d decoded", enc, dec)
	}

	if got := Eval[string](t, ctx, connSel+`.dataset.state`); got != "live" {
		t.Errorf("connection state %q, want live", got)
	}
	if got := Eval[int](t, ctx, `document.querySelectorAll("`+rowSel+`").length`); got != 20 {
		t.Errorf("%d pending rows, want 20", got)
	}
	if got := Eval[string](t, ctx, `document.getElementById("stat-pending").textContent`); got != "120" {
		t.Errorf("pending stat %q, want 120", got)
	}
	// 120 deadlines every 7 s: 15 bars of a minute, adding up to the
	// pending count.
	if got := Eval[int](t, ctx, `document.querySelectorAll("#hist rect").length`); got != 15 {
		t.Errorf("%d histogram bars, want 15", got)
	}
	if got := Eval[string](t, ctx, `document.getElementById("hist").getAttribute("aria-label")`); !strings.HasPrefix(got, "Upcoming expiries of 120 pending, bars of 1m: in 0s–1m 8;") {
		t.Errorf("histogram summary %q", got)
	}
	if got := Eval[string](t, ctx, `(document.querySelector("#feed-rows tr.missed")?.dataset.key ?? "")`); got != "ord-done-06" {
		t.Errorf("missed expiry row %q, want ord-done-06", got)
	}

	// The countdown ticks on the client, without new snapshots.
	countdown := `document.querySelector("#pending-rows tr .countdown").textContent`
	before := Eval[string](t, ctx, countdown)
	Poll(t, ctx, 3*time.Second, "the countdown to tick", countdown+` !== `+strconv.Quote(before))
	after := Eval[string](t, ctx, countdown)
	if b, a := CountdownSeconds(t, before), CountdownSeconds(t, after); a >= b {
		t.Errorf("countdown went from %q to %q", before, after)
	}

	// Search by order id prefix and page through the REST API.
	Do(t, ctx, 5*time.Second, "search", chromedp.SendKeys(chromedp.ID("search"), "ord-005"))
	Poll(t, ctx, 3*time.Second, "search results", firstRow+` === "ord-0050"`)
	if got := Eval[int](t, ctx, `document.querySelectorAll("`+rowSel+`").length`); got != 10 {
		t.Errorf("%d rows for ord-005, want 10", got)
	}
	Do(t, ctx, 5*time.Second, "back to live", chromedp.Click(chromedp.ID("live")))
	Poll(t, ctx, 3*time.Second, "the live list", firstRow+` === "ord-0000"`)
	Do(t, ctx, 5*time.Second, "next page", chromedp.Click(chromedp.ID("next")))
	Poll(t, ctx, 3*time.Second, "page 2", firstRow+` === "ord-0020"`)
	Do(t, ctx, 5*time.Second, "previous page", chromedp.Click(chromedp.ID("prev")))
	Poll(t, ctx, 3*time.Second, "page 1", firstRow+` === "ord-0000"`)
	Do(t, ctx, 5*time.Second, "previous page", chromedp.Click(chromedp.ID("prev")))
	Poll(t, ctx, 3*time.Second, "live mode", `document.getElementById("pager-text").textContent.endsWith("live")`)

	// A dropped stream shows as reconnecting; the next snapshot replaces
	// the state.
	next, nextPending := world(time.Now().UTC(), 3, "new")
	f.mu.Lock()
	f.snap = api.Snapshot{} // the stream is down until set below
	f.mu.Unlock()
	f.dropStreams()
	Poll(t, ctx, 5*time.Second, "the reconnecting state", connSel+`.dataset.state === "reconnecting"`)
	f.set(next, nextPending)
	Poll(t, ctx, 5*time.Second, "the resync", firstRow+` === "new-0000" && `+connSel+`.dataset.state === "live"`)
	if got := Eval[int](t, ctx, `document.querySelectorAll("`+rowSel+`").length`); got != 3 {
		t.Errorf("%d rows after resync, want 3", got)
	}
	f.set(snap, pending)
	Poll(t, ctx, 3*time.Second, "the full list again", firstRow+` === "ord-0000"`)
	Screenshot(t, ctx, "dashboard-desktop.png")
}

func TestDashboardNarrowAndAccessible(t *testing.T) {
	ctx := Chrome(t, Narrow)
	f, srv := newFakeAPI(t, buildDist(t))
	// Order ids as long as the orders service's UUIDs.
	snap, pending := world(time.Now().UTC(), 40, "01a206f7-04ab-77d2-aa89-6952a6a6")
	f.set(snap, pending)
	Do(t, ctx, 15*time.Second, "open the dashboard", chromedp.Navigate(srv.URL+"/"))
	Poll(t, ctx, 10*time.Second, "the first snapshot", `document.getElementById("app")?.dataset.snapshots === "1"`)

	checks := []struct {
		name, expr string
	}{
		{"no horizontal page scroll", `document.documentElement.scrollWidth <= window.innerWidth`},
		{"tables fit without scrolling", `((l) => l.length > 0 && l.every(s => s.scrollWidth <= s.clientWidth))([...document.querySelectorAll(".scroll")])`},
		{"long ids are abbreviated to their tail", `document.querySelector("#pending-rows th .k-short").textContent === "…6a6-0000"`},
		{"abbreviated ids keep the whole id as a title", `document.querySelector("#pending-rows th").title === "01a206f7-04ab-77d2-aa89-6952a6a6-0000"`},
		{"one column", `getComputedStyle(document.querySelector("main")).gridTemplateColumns.split(" ").length === 1`},
		{"search has a label", `document.querySelector("label[for=search]")?.textContent === "Search by order id"`},
		{"every button is named", `((l) => l.length > 0 && l.every(b => b.getAttribute("aria-label") || b.textContent.trim()))([...document.querySelectorAll("button")])`},
		{"charts are labelled images", `((l) => l.length > 0 && l.every(s => s.getAttribute("role") === "img" && (s.getAttribute("aria-labelledby") || s.getAttribute("aria-label"))))([...document.querySelectorAll("svg")])`},
		{"histogram has an accessible summary", `document.getElementById("hist").getAttribute("aria-label").startsWith("Upcoming expiries of 40 pending, bars of 1m: in 0s–1m 8;")`},
		{"status is live region", `document.getElementById("conn").getAttribute("role") === "status"`},
		{"no inline styles needed (CSP)", `document.querySelectorAll("[style]").length === 0`},
	}
	for _, c := range checks {
		t.Run(c.name, func(t *testing.T) {
			if !Eval[bool](t, ctx, c.expr) {
				t.Errorf("false: %s", c.expr)
			}
		})
	}
	Screenshot(t, ctx, "dashboard-narrow.png")
}
