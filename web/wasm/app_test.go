//go:build js && wasm

package main

import (
	_ "embed"
	"encoding/json"
	"strings"
	"sync"
	"syscall/js"
	"testing"
	"time"

	"github.com/ordertimeout/ordertimeout/services/timeoutd/api"
	"github.com/ordertimeout/ordertimeout/web/wasm/view"
)

// These tests drive the syscall/js layer against testdata/fakedom.js, a
// minimal DOM, EventSource and fetch, under Node. They share the one JS
// global scope, so they do not run in parallel.

//go:embed testdata/fakedom.js
var fakeDOM string

var t0 = time.Date(2026, 11, 23, 6, 0, 0, 0, time.UTC)

// clock is a settable clock for the app.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }

func (c *clock) Add(d time.Duration) { c.mu.Lock(); c.now = c.now.Add(d); c.mu.Unlock() }

// newTestApp resets the fake page and starts the dashboard on it.
func newTestApp(t *testing.T) (*app, *clock) {
	t.Helper()
	js.Global().Call("eval", fakeDOM)
	js.Global().Get("performance").Call("clearMarks")
	clk := &clock{now: t0}
	ap, err := newApp(js.Global(), clk.Now)
	if err != nil {
		t.Fatalf("newApp: %v", err)
	}
	ap.start()
	t.Cleanup(ap.stop)
	return ap, clk
}

func byID(t *testing.T, id string) js.Value {
	t.Helper()
	el := js.Global().Get("document").Call("getElementById", id)
	if el.IsNull() {
		t.Fatalf("no element #%s", id)
	}
	return el
}

func textOf(t *testing.T, id string) string {
	t.Helper()
	return byID(t, id).Get("textContent").String()
}

// stream returns the n-th EventSource the page opened.
func stream(t *testing.T, n int) js.Value {
	t.Helper()
	all := js.Global().Get("__eventSources")
	if all.Length() <= n {
		t.Fatalf("%d event sources opened, want more than %d", all.Length(), n)
	}
	return all.Index(n)
}

func emit(t *testing.T, es js.Value, snap api.Snapshot) {
	t.Helper()
	data, err := json.Marshal(snap)
	if err != nil {
		t.Fatal(err)
	}
	es.Call("emit", "snapshot", string(data))
}

// rows returns "key version deadline countdown class" for each table row.
func rows(t *testing.T, tbodyID string) []string {
	t.Helper()
	var out []string
	trs := byID(t, tbodyID).Get("children")
	for i := range trs.Length() {
		tr := trs.Index(i)
		var cells []string
		for j := range tr.Get("children").Length() {
			cell := tr.Get("children").Index(j)
			if cell.Call("getAttribute", "class").String() == "ops" {
				continue // the operator actions (TestOperatorActions)
			}
			cells = append(cells, cell.Get("textContent").String())
		}
		if c := tr.Call("getAttribute", "class"); !c.IsNull() && c.String() != "" {
			cells = append(cells, "."+c.String())
		}
		if k := tr.Call("getAttribute", "data-key").String(); k != cells[0] {
			t.Errorf("row %d: data-key %q, text %q", i, k, cells[0])
		}
		out = append(out, strings.Join(cells, " "))
	}
	return out
}

// eventually polls cond until it holds or a deadline passes; the JS event
// loop (promises, timers) runs while the test waits.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Second)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		<-tick.C
	}
}

func snap(pending int64, keys ...string) api.Snapshot {
	s := api.Snapshot{Stats: api.Stats{
		Now: t0, Ready: true, Pending: pending,
		Rates:  api.Rates{ScheduledPerSec: 250, FiredPerSec: 1.5},
		Outbox: api.Outbox{Rows: 1, OldestAgeMs: 12},
		// The soonest in the first bucket, the rest beyond the last.
		Deadlines: api.Deadlines{From: t0, WidthMs: 10000, Counts: []int64{int64(len(keys)), 0}, Later: pending - int64(len(keys))},
	}}
	for i, k := range keys {
		s.Soonest = append(s.Soonest, api.Timeout{Key: k, Version: int64(i + 1), Deadline: t0.Add(time.Duration(i+1) * 10 * time.Second)})
	}
	return s
}

func TestMountIsAccessible(t *testing.T) {
	newTestApp(t)
	tests := []struct {
		name, id, attr, want string
	}{
		{"connection is a live status", "conn", "role", "status"},
		{"connection state starts connecting", "conn", "data-state", "connecting"},
		{"search is a search landmark's input", "search", "type", "search"},
		{"pending table is labelled", "pending", "aria-labelledby", "pending-h"},
		{"histogram is an image", "hist", "role", "img"},
		{"lateness chart is labelled", "lateness", "aria-labelledby", "lat-h"},
		{"pager announces changes", "pager-text", "aria-live", "polite"},
		{"no snapshot yet", "app", "data-snapshots", "0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := byID(t, tt.id).Call("getAttribute", tt.attr); got.IsNull() || got.String() != tt.want {
				t.Errorf("#%s[%s] = %v, want %q", tt.id, tt.attr, got, tt.want)
			}
		})
	}
	if got := textOf(t, "stat-pending"); got != "–" {
		t.Errorf("pending before data = %q", got)
	}
	if got := stream(t, 0).Get("url").String(); got != "/api/v1/stream?recent=20&soonest=20" {
		t.Errorf("stream url = %q", got)
	}
}

func TestSnapshotRendersAndCountsDown(t *testing.T) {
	ap, clk := newTestApp(t)
	s := snap(1234, "o-1", "o-2")
	s.Recent = []api.Expiry{
		{Key: "o-0", Version: 2, Deadline: t0.Add(-time.Second), FiredAt: t0.Add(-time.Second + 3*time.Millisecond), LatenessMs: 3, Outcome: "fired"},
		{Key: "o-x", Version: 1, Deadline: t0.Add(-time.Hour), FiredAt: t0.Add(-time.Minute), LatenessMs: 3540000, Outcome: "missed"},
	}
	emit(t, stream(t, 0), s)

	header := map[string]string{"conn": "live", "stat-pending": "1,234", "stat-scheduled": "250/s", "stat-fired": "1.5/s", "stat-cleared": "0/s", "stat-outbox": "12 ms"}
	for id, want := range header {
		if got := textOf(t, id); got != want {
			t.Errorf("#%s = %q, want %q", id, got, want)
		}
	}
	want := []string{"o-1 1 06:00:10.000 10s", "o-2 2 06:00:20.000 20s"}
	if got := rows(t, "pending-rows"); strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("rows on arrival = %q, want %q", got, want)
	}
	clk.Add(3 * time.Second)
	ap.renderRows() // the tick's body, called directly for determinism
	want = []string{"o-1 1 06:00:10.000 7s .soon", "o-2 2 06:00:20.000 17s"}
	if got := rows(t, "pending-rows"); strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("rows 3 s later = %q, want %q", got, want)
	}
	clk.Add(10 * time.Second)
	ap.renderRows()
	if got := rows(t, "pending-rows")[0]; got != "o-1 1 06:00:10.000 due .due" {
		t.Errorf("row past its deadline = %q", got)
	}
	wantFeed := []string{"o-0 2 05:59:59.003 3.0 ms fired", "o-x 1 05:59:00.000 59m00s missed .missed"}
	if got := rows(t, "feed-rows"); strings.Join(got, "|") != strings.Join(wantFeed, "|") {
		t.Errorf("feed = %q, want %q", got, wantFeed)
	}
	bars := byID(t, "hist").Call("all", js.FuncOf(func(_ js.Value, a []js.Value) any { return a[0].Get("tagName").String() == "RECT" }))
	if bars.Length() != 3 || bars.Index(0).Get("textContent").String() != "in 0s–10s: 2" || bars.Index(2).Get("textContent").String() != "after 20s: 1,232" {
		t.Errorf("histogram has %d bars, first titled %q", bars.Length(), bars.Index(0).Get("textContent"))
	}
	if got, want := byID(t, "hist").Call("getAttribute", "aria-label").String(),
		"Upcoming expiries of 1,234 pending, bars of 10s: in 0s–10s 2; in 10s–20s 0; after 20s 1,232."; got != want {
		t.Errorf("histogram's label = %q, want %q", got, want)
	}
	if got := textOf(t, "hist-caption"); got != "(bars of 10s, tallest 1,232)" {
		t.Errorf("histogram's caption = %q", got)
	}
	if got := byID(t, "app").Call("getAttribute", "data-snapshots").String(); got != "1" {
		t.Errorf("data-snapshots = %q", got)
	}
	if n := js.Global().Get("performance").Call("getEntriesByName", firstDataMark).Length(); n != 1 {
		t.Errorf("%d %q marks, want 1", n, firstDataMark)
	}
}

// TestLongIdsAndDates: time-ordered ids that begin alike are told apart by
// their tail, the whole id staying the tooltip and the accessible text; a
// deadline or a fire not on the server's today shows its date.
func TestLongIdsAndDates(t *testing.T) {
	newTestApp(t)
	ids := []string{"019abb2c-7d1e-7f00-8b3a-1c2d3e4f5a6b", "019abb2c-7d1e-7f00-9c4b-77aa88bb99cc"}
	s := snap(2)
	s.Soonest = []api.Timeout{
		{Key: ids[0], Version: 1, Deadline: t0.Add(time.Minute)},
		{Key: ids[1], Version: 1, Deadline: t0.Add(20 * time.Hour)},
	}
	s.Recent = []api.Expiry{{Key: ids[0], Version: 1, FiredAt: t0.Add(-7 * time.Hour), Outcome: "fired"}}
	emit(t, stream(t, 0), s)
	cells := func(tbodyID string, row int) js.Value {
		return byID(t, tbodyID).Get("children").Index(row).Get("children")
	}
	tests := []struct {
		name              string
		tbody             string
		row               int
		short, full, when string
	}{
		{"pending, today", "pending-rows", 0, "…3e4f5a6b", ids[0], "06:01:00.000"},
		{"pending, tomorrow", "pending-rows", 1, "…88bb99cc", ids[1], "Nov 24 02:00:00.000"},
		{"feed, yesterday", "feed-rows", 0, "…3e4f5a6b", ids[0], "Nov 22 23:00:00.000"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			th := cells(tt.tbody, tt.row).Index(0)
			parts := th.Get("children")
			if got := parts.Index(1).Get("textContent").String(); got != tt.short {
				t.Errorf("short id %q, want the tail %q", got, tt.short)
			}
			if got := parts.Index(0).Get("textContent").String(); got != tt.full {
				t.Errorf("accessible id %q, want %q", got, tt.full)
			}
			if got := th.Call("getAttribute", "title").String(); got != tt.full {
				t.Errorf("tooltip %q, want %q", got, tt.full)
			}
			if got := cells(tt.tbody, tt.row).Index(2).Get("textContent").String(); got != tt.when {
				t.Errorf("time %q, want %q", got, tt.when)
			}
		})
	}
}

func TestReconnectResyncs(t *testing.T) {
	newTestApp(t)
	es := stream(t, 0)
	emit(t, es, snap(2, "a", "b"))
	es.Call("fail", false) // the browser retries by itself
	if got := byID(t, "conn").Call("getAttribute", "data-state").String(); got != "reconnecting" {
		t.Errorf("state after an error = %q", got)
	}
	if !byID(t, "app").Call("hasAttribute", "data-stale").Bool() {
		t.Error("data not marked stale while reconnecting")
	}
	if got := len(rows(t, "pending-rows")); got != 2 {
		t.Errorf("rows while reconnecting = %d, want the last 2 kept", got)
	}
	emit(t, es, snap(1, "z"))
	if got := rows(t, "pending-rows"); len(got) != 1 || !strings.HasPrefix(got[0], "z ") {
		t.Errorf("rows after resync = %q, want only z", got)
	}
	if textOf(t, "conn") != "live" || byID(t, "app").Call("hasAttribute", "data-stale").Bool() {
		t.Error("not live after the resync snapshot")
	}

	es.Call("fail", true) // the browser gave up: the page reopens the stream
	eventually(t, "a new event source", func() bool { return js.Global().Get("__eventSources").Length() == 2 })
	if es.Get("readyState").Int() != eventSourceClosed {
		t.Error("the given-up stream was not closed")
	}
	emit(t, stream(t, 1), snap(3, "p", "q", "r"))
	if got := len(rows(t, "pending-rows")); got != 3 || textOf(t, "conn") != "live" {
		t.Errorf("after reopening: %d rows, conn %q", got, textOf(t, "conn"))
	}
}

func TestBadSnapshotIsIgnored(t *testing.T) {
	newTestApp(t)
	es := stream(t, 0)
	emit(t, es, snap(1, "a"))
	for _, data := range []string{"", "{", `{"stats":{"pending":"many"}}`} {
		es.Call("emit", "snapshot", data)
	}
	if got := rows(t, "pending-rows"); len(got) != 1 || textOf(t, "stat-pending") != "1" {
		t.Errorf("bad snapshots changed the page: rows %q", got)
	}
}

func TestSearchAndPaging(t *testing.T) {
	newTestApp(t)
	emit(t, stream(t, 0), snap(50, "s1", "s2"))
	routes := js.Global().Get("__routes")
	route := func(url string, status int, body any) {
		b, _ := json.Marshal(body)
		r := js.Global().Get("Object").New()
		r.Set("status", status)
		r.Set("body", string(b))
		routes.Set(url, r)
	}
	page := func(next string, keys ...string) api.Page {
		p := api.Page{NextCursor: next}
		for _, k := range keys {
			p.Items = append(p.Items, api.Timeout{Key: k, Version: 7, Deadline: t0.Add(time.Minute)})
		}
		return p
	}
	route("/api/v1/timeouts?key=o-1&limit=20", 200, page("c2", "o-1a", "o-1b"))
	route("/api/v1/timeouts?cursor=c2&key=o-1&limit=20", 200, page("", "o-1c"))
	route("/api/v1/timeouts?key=bad&limit=20", 400, map[string]any{"type": "/problems/validation", "title": "Invalid request", "status": 400, "detail": "cursor: malformed"})

	firstKey := func() string {
		r := rows(t, "pending-rows")
		if len(r) == 0 {
			return ""
		}
		return strings.Fields(r[0])[0]
	}
	search := byID(t, "search")
	search.Set("value", "o-1")
	byID(t, "search").Get("parentNode").Call("dispatch", "submit")
	eventually(t, "the search results", func() bool { return firstKey() == "o-1a" })
	if got := textOf(t, "pager-text"); got != "page 1 of ids starting with “o-1”" {
		t.Errorf("pager = %q", got)
	}
	if byID(t, "next").Get("disabled").Bool() || !byID(t, "prev").Get("disabled").Bool() {
		t.Error("on the first page Next should be enabled and Prev disabled")
	}
	byID(t, "next").Call("click")
	eventually(t, "the second page", func() bool { return firstKey() == "o-1c" })
	if !byID(t, "next").Get("disabled").Bool() {
		t.Error("Next enabled on the last page")
	}
	byID(t, "prev").Call("click")
	eventually(t, "the first page again", func() bool { return firstKey() == "o-1a" })

	search.Set("value", "bad")
	search.Call("dispatch", "input") // debounced
	eventually(t, "the problem detail", func() bool { return textOf(t, "pager-text") == "timeoutd answered 400: cursor: malformed" })

	byID(t, "live").Call("click")
	if firstKey() != "s1" || search.Get("value").String() != "" || !byID(t, "live").Get("hidden").Bool() {
		t.Errorf("Live did not return to the stream's list: first row %q", firstKey())
	}
}

// button returns the operator button of action on the row of key.
func button(t *testing.T, key string, action view.Action) js.Value {
	t.Helper()
	trs := byID(t, "pending-rows").Get("children")
	for i := range trs.Length() {
		tr := trs.Index(i)
		if tr.Call("getAttribute", "data-key").String() != key {
			continue
		}
		bs := tr.Call("all", js.FuncOf(func(_ js.Value, a []js.Value) any {
			return a[0].Call("getAttribute", "data-action").String() == string(action)
		}))
		if bs.Length() != 1 {
			t.Fatalf("row %s has %d %s buttons", key, bs.Length(), action)
		}
		return bs.Index(0)
	}
	t.Fatalf("no row %s", key)
	return js.Value{}
}

// answer queues the answers of the next confirm and prompt dialogs.
func answer(vals ...any) {
	q := js.Global().Get("__answers")
	for _, v := range vals {
		q.Call("push", v)
	}
}

// lastRequest returns "METHOD url|Authorization|Content-Type|body" of the
// last fetch, and how many there were.
func lastRequest() (string, int) {
	rs := js.Global().Get("__requests")
	if rs.Length() == 0 {
		return "", 0
	}
	r := rs.Index(rs.Length() - 1)
	str := func(v js.Value) string {
		if v.IsUndefined() {
			return ""
		}
		return v.String()
	}
	h := r.Get("headers")
	return r.Get("method").String() + " " + r.Get("url").String() + "|" + str(h.Get("Authorization")) + "|" +
		str(h.Get("Content-Type")) + "|" + str(r.Get("body")), rs.Length()
}

func TestOperatorActionsReadOnly(t *testing.T) {
	newTestApp(t)
	emit(t, stream(t, 0), snap(2, "o-1", "o-2"))
	if !byID(t, "op-status").Get("hidden").Bool() {
		t.Error("operator status line shown on a read-only dashboard")
	}
	ops := button(t, "o-1", view.Cancel).Get("parentNode")
	if !ops.Get("hidden").Bool() {
		t.Error("operator buttons shown on a read-only dashboard")
	}
	if got := textOf(t, "footer"); !strings.HasPrefix(got, "Read-only view") {
		t.Errorf("footer = %q", got)
	}
	answer(true, "tok")
	button(t, "o-1", view.Cancel).Call("click")
	if _, n := lastRequest(); n != 0 || js.Global().Get("__dialogs").Length() != 0 {
		t.Errorf("a read-only dashboard sent %d requests, opened %d dialogs", n, js.Global().Get("__dialogs").Length())
	}
}

func TestOperatorActions(t *testing.T) {
	newTestApp(t)
	s := snap(2, "o-1", "o-2")
	s.Stats.OperatorActions = true
	emit(t, stream(t, 0), s)
	route := func(method, url string, status int, body string) {
		r := js.Global().Get("Object").New()
		r.Set("status", status)
		r.Set("body", body)
		js.Global().Get("__routes").Set(method+" "+url, r)
	}
	route("POST", "/api/v1/orders/o-1/cancel", 200, `{"id":"o-1","status":"cancelled"}`)
	route("POST", "/api/v1/orders/o-2/extend", 409, `{"title":"conflict","status":409,"detail":"order o-2 is paid"}`)
	route("POST", "/api/v1/orders/o-2/cancel", 401, `{"title":"unauthorized","status":401}`)
	session := js.Global().Get("sessionStorage")
	status := func() string { return textOf(t, "op-status") }

	if byID(t, "op-status").Get("hidden").Bool() || button(t, "o-1", view.Extend).Get("parentNode").Get("hidden").Bool() {
		t.Fatal("operator actions hidden although enabled")
	}
	if got := button(t, "o-2", view.Cancel).Call("getAttribute", "aria-label").String(); got != "Cancel order o-2" {
		t.Errorf("aria-label = %q", got)
	}

	steps := []struct {
		name       string
		key        string
		action     view.Action
		answers    []any  // to confirm and prompt
		asked      bool   // the token form is expected
		token      string // typed into it ("" cancels it)
		wantStatus string
		wantReq    string // the last request; empty: none was sent
		wantToken  string // sessionStorage's token afterwards
	}{
		{name: "cancel not confirmed", key: "o-1", action: view.Cancel, answers: []any{false},
			wantStatus: "Cancel o-1 not sent: not confirmed"},
		{name: "cancel confirmed asks for the token", key: "o-1", action: view.Cancel, answers: []any{true}, asked: true, token: " op-secret ",
			wantStatus: "Order o-1 cancelled", wantReq: "POST /api/v1/orders/o-1/cancel|Bearer op-secret||", wantToken: "op-secret"},
		{name: "extend reuses the token and shows the problem", key: "o-2", action: view.Extend, answers: []any{"2h"},
			wantStatus: "Extend o-2 failed: timeoutd answered 409: order o-2 is paid",
			wantReq:    `POST /api/v1/orders/o-2/extend|Bearer op-secret|application/json|{"pay_within":"2h"}`, wantToken: "op-secret"},
		{name: "extend with a bad duration is not sent", key: "o-2", action: view.Extend, answers: []any{"soon"},
			wantStatus: "Extend o-2 not sent: “soon” is not a duration such as 15m or 2h", wantToken: "op-secret"},
		{name: "a refused token is forgotten", key: "o-2", action: view.Cancel, answers: []any{true},
			wantStatus: "Cancel o-2 failed: the operator token was refused; it will be asked again",
			wantReq:    "POST /api/v1/orders/o-2/cancel|Bearer op-secret||"},
		{name: "no token given", key: "o-2", action: view.Cancel, answers: []any{true}, asked: true,
			wantStatus: "Cancel o-2 not sent: no operator token"},
		{name: "unreachable", key: "o-1", action: view.Extend, answers: []any{"15m"}, asked: true, token: "tok-2",
			wantStatus: "Extend o-1 failed: timeoutd is unreachable",
			wantReq:    `POST /api/v1/orders/o-1/extend|Bearer tok-2|application/json|{"pay_within":"15m"}`, wantToken: "tok-2"},
	}
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			_, before := lastRequest()
			answer(st.answers...)
			button(t, st.key, st.action).Call("click")
			form := byID(t, "token-form")
			if shown := !form.Get("hidden").Bool(); shown != st.asked {
				t.Fatalf("token form shown = %v, want %v", shown, st.asked)
			}
			if st.asked {
				if got, want := status(), st.action.NeedsToken(st.key); got != want {
					t.Errorf("status while asking = %q, want %q", got, want)
				}
				if typ := byID(t, "token-input").Call("getAttribute", "type").String(); typ != "password" {
					t.Errorf("token field type = %q, want password", typ)
				}
				if st.token == "" {
					byID(t, "token-cancel").Call("click")
				} else {
					byID(t, "token-input").Set("value", st.token)
					form.Call("dispatch", "submit")
				}
				if !form.Get("hidden").Bool() || byID(t, "token-input").Get("value").String() != "" {
					t.Error("the token form stayed open or kept the token")
				}
			}
			eventually(t, "status "+st.wantStatus, func() bool { return status() == st.wantStatus })
			got, after := lastRequest()
			switch {
			case st.wantReq == "" && after != before:
				t.Errorf("sent %s, want no request", got)
			case st.wantReq != "" && (after != before+1 || got != st.wantReq):
				t.Errorf("last request %q (%d new), want %q", got, after-before, st.wantReq)
			}
			if n := js.Global().Get("__answers").Length(); n != 0 {
				t.Errorf("%d answers left: a dialog was not asked", n)
			}
			tok := session.Call("getItem", view.TokenStorageKey)
			if (tok.IsNull() && st.wantToken != "") || (!tok.IsNull() && tok.String() != st.wantToken) {
				t.Errorf("sessionStorage token = %v, want %q", tok, st.wantToken)
			}
		})
	}
	ok := byID(t, "op-status").Call("getAttribute", "data-ok").String()
	if ok != "false" {
		t.Errorf("data-ok after a failure = %q", ok)
	}
	if n := js.Global().Get("localStorage").Get("length").Int(); n != 0 {
		t.Errorf("localStorage holds %d items, want none", n)
	}
	if urls := js.Global().Get("__fetched").Call("join", " ").String(); strings.Contains(urls, "op-secret") || strings.Contains(urls, "tok-2") {
		t.Errorf("a token is in a URL: %s", urls)
	}
	if got := textOf(t, "footer"); !strings.HasPrefix(got, "Operator actions enabled") {
		t.Errorf("footer = %q", got)
	}
}
