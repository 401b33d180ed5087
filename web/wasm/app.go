//go:build js && wasm

package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"syscall/js"
	"time"

	"github.com/ordertimeout/ordertimeout/services/timeoutd/api"
	"github.com/ordertimeout/ordertimeout/web/wasm/view"
)

// Timing of the page.
const (
	// tickMs is the countdowns' refresh period.
	tickMs = 1000
	// searchDelayMs debounces typing in the search box.
	searchDelayMs = 250
	// refreshEvery bounds how often a browsed page is reloaded as
	// snapshots arrive.
	refreshEvery = 2 * time.Second
	// retryMin and retryMax bound the delay before reopening a stream the
	// browser gave up on (EventSource retries by itself otherwise).
	retryMin, retryMax = time.Second, 15 * time.Second
	// firstDataMark is the performance mark set when the first snapshot
	// is on screen; the browser test reads it.
	firstDataMark = "dashboard:first-data"
)

// eventSourceClosed is EventSource.CLOSED: the browser will not retry.
const eventSourceClosed = 2

// app is the page: its DOM handles, the view state and the event sources.
type app struct {
	win, doc js.Value
	now      func() time.Time
	state    view.State

	root                                       js.Value
	conn                                       text
	connAttr                                   attr
	pending, scheduled, fired, cleared, outbox text
	form, search, prev, next, live             js.Value
	pager                                      text
	tbody                                      js.Value
	rows                                       []*row
	opHead, opStatus                           js.Value // the actions column's header, the operator status line
	opText                                     text
	tokenForm, tokenInput, tokenCancel         js.Value // asks for the operator token (a password field)
	tokenWait                                  func(token string)
	opOK                                       attr
	footer                                     text
	hist, lat                                  js.Value
	latMax                                     text
	feed                                       js.Value
	feedRows                                   []*feedRow
	members                                    js.Value
	memberRows                                 []*memberRow
	clusterSummary                             text
	snapAttr                                   attr

	es          js.Value
	esFuncs     []js.Func // es's listeners
	funcs       []js.Func // released by stop
	interval    js.Value
	searchTimer js.Value
	searchFn    js.Func
	lastRefresh time.Time
	retry       time.Duration
	stopped     bool
}

// row is one line of the pending table.
type row struct {
	tr                            js.Value
	key                           keyCell
	version, deadline, countdown  text
	dataKey, class, deadlineTitle attr
	ops                           js.Value // the operator actions' cell
	opKeys, opLabels              []attr   // per button: data-key, aria-label
}

// actions are the operator actions, in the order of their buttons.
var actions = []view.Action{view.Extend, view.Cancel}

// memberRow is one line of the cluster table.
type memberRow struct {
	tr                                            js.Value
	id, parts, ranges, pending, rate, p50, latMax text
	self                                          attr
}

// feedRow is one line of the recent-expiries table.
type feedRow struct {
	tr                               js.Value
	key                              keyCell
	version, firedAt, lateness, outc text
	class                            attr
}

// newApp builds the page inside the element #app of win's document.
func newApp(win js.Value, now func() time.Time) (*app, error) {
	doc := win.Get("document")
	root := doc.Call("getElementById", "app")
	if root.IsNull() || root.IsUndefined() {
		return nil, errors.New("no element #app")
	}
	a := &app{win: win, doc: doc, now: now, root: root, retry: retryMin}
	a.mount()
	return a, nil
}

// mount replaces #app's content by the dashboard's skeleton.
func (ap *app) mount() {
	d := ap.doc
	stat := func(label, id string, t *text) js.Value {
		v := h(d, "dd", a("id", id), "–")
		t.el = v
		return h(d, "div", a("class", "stat"), h(d, "dt", nil, label), v)
	}
	connEl := h(d, "span", a("id", "conn", "class", "conn", "role", "status", "aria-live", "polite", "data-state", "connecting"), "connecting")
	ap.conn.el, ap.connAttr = connEl, attr{el: connEl, name: "data-state"}
	header := h(d, "header", a("class", "top"),
		h(d, "div", a("class", "brand"), h(d, "h1", nil, "ordertimeout"), connEl),
		h(d, "dl", a("class", "stats", "aria-label", "Timeout statistics"),
			stat("Pending", "stat-pending", &ap.pending),
			stat("Scheduled", "stat-scheduled", &ap.scheduled),
			stat("Fired", "stat-fired", &ap.fired),
			stat("Cleared", "stat-cleared", &ap.cleared),
			stat("Oldest unpublished", "stat-outbox", &ap.outbox)))

	ap.search = h(d, "input", a("id", "search", "type", "search", "placeholder", "order id prefix",
		"autocomplete", "off", "spellcheck", "false", "aria-describedby", "pager-text"))
	ap.prev = h(d, "button", a("id", "prev", "type", "button", "aria-label", "Previous page"), "‹ Prev")
	ap.next = h(d, "button", a("id", "next", "type", "button", "aria-label", "Next page"), "Next ›")
	ap.live = h(d, "button", a("id", "live", "type", "button", "aria-label", "Back to the live list"), "Live")
	pagerEl := h(d, "span", a("id", "pager-text", "class", "pager-text", "aria-live", "polite"))
	ap.pager.el = pagerEl
	ap.tbody = h(d, "tbody", a("id", "pending-rows"))
	ap.opHead = h(d, "th", a("scope", "col", "class", "ops"), "Actions")
	ap.opStatus = h(d, "p", a("id", "op-status", "class", "op-status", "role", "status", "aria-live", "polite"))
	ap.opText.el, ap.opOK = ap.opStatus, attr{el: ap.opStatus, name: "data-ok"}
	ap.tokenInput = h(d, "input", a("id", "token-input", "type", "password", "autocomplete", "off",
		"spellcheck", "false", "required", ""))
	ap.tokenCancel = h(d, "button", a("id", "token-cancel", "type", "button"), "Cancel")
	ap.tokenForm = h(d, "form", a("id", "token-form", "class", "token-form", "aria-label", "Operator token"),
		h(d, "label", a("for", "token-input"), view.TokenPrompt), ap.tokenInput,
		h(d, "button", a("type", "submit"), "Use token"), ap.tokenCancel)
	ap.tokenForm.Set("hidden", true)
	ap.form = h(d, "form", a("class", "search", "role", "search"),
		h(d, "label", a("for", "search"), "Search by order id"), ap.search)
	pending := h(d, "section", a("class", "card pending", "aria-labelledby", "pending-h"),
		h(d, "h2", a("id", "pending-h"), "Pending timeouts"),
		ap.form,
		h(d, "div", a("class", "scroll"),
			h(d, "table", a("id", "pending", "aria-labelledby", "pending-h"),
				h(d, "thead", nil, h(d, "tr", nil,
					h(d, "th", a("scope", "col"), "Order id"),
					h(d, "th", a("scope", "col", "class", "num opt"), "Version"),
					h(d, "th", a("scope", "col"), "Deadline (UTC)"),
					h(d, "th", a("scope", "col", "class", "num"), "Expires in"),
					ap.opHead)),
				ap.tbody)),
		ap.opStatus,
		ap.tokenForm,
		h(d, "nav", a("class", "pager", "aria-label", "Pages of pending timeouts"), ap.prev, pagerEl, ap.next, ap.live))

	ap.hist = s(d, "svg", a("id", "hist", "role", "img", "aria-labelledby", "hist-h",
		"viewBox", fmt.Sprintf("0 0 %g %g", view.HistWidth, view.HistHeight), "preserveAspectRatio", "xMinYMid meet"))
	histMax := h(d, "span", a("class", "muted"), "(pending, cumulative)")
	upcoming := h(d, "section", a("class", "card", "aria-labelledby", "hist-h"),
		h(d, "h2", a("id", "hist-h"), "Upcoming expiries ", histMax), ap.hist)

	ap.lat = s(d, "svg", a("id", "lateness", "role", "img", "aria-labelledby", "lat-h",
		"viewBox", fmt.Sprintf("0 0 %g %g", view.LatWidth, view.LatHeight), "preserveAspectRatio", "none"))
	latMax := h(d, "span", a("class", "muted"))
	ap.latMax.el = latMax
	ap.feed = h(d, "tbody", a("id", "feed-rows"))
	recent := h(d, "section", a("class", "card", "aria-labelledby", "recent-h"),
		h(d, "h2", a("id", "recent-h"), "Recent expiries"),
		h(d, "figure", a("class", "lat"),
			ap.lat,
			h(d, "figcaption", a("id", "lat-h"), "Lateness, oldest to newest; ", latMax)),
		h(d, "div", a("class", "scroll"),
			h(d, "table", a("id", "feed", "aria-labelledby", "recent-h"),
				h(d, "thead", nil, h(d, "tr", nil,
					h(d, "th", a("scope", "col"), "Order id"),
					h(d, "th", a("scope", "col", "class", "num opt"), "Version"),
					h(d, "th", a("scope", "col"), "Fired at (UTC)"),
					h(d, "th", a("scope", "col", "class", "num"), "Lateness"),
					h(d, "th", a("scope", "col"), "Outcome"))),
				ap.feed)))

	ap.members = h(d, "tbody", a("id", "cluster-rows"))
	clusterCaption := h(d, "span", a("id", "cluster-summary", "class", "muted"))
	ap.clusterSummary.el = clusterCaption
	cluster := h(d, "section", a("class", "card", "aria-labelledby", "cluster-h"),
		h(d, "h2", a("id", "cluster-h"), "Cluster ", clusterCaption),
		h(d, "div", a("class", "scroll"),
			h(d, "table", a("id", "cluster", "aria-labelledby", "cluster-h"),
				h(d, "thead", nil, h(d, "tr", nil,
					h(d, "th", a("scope", "col"), "Instance"),
					h(d, "th", a("scope", "col", "class", "num"), "Partitions"),
					h(d, "th", a("scope", "col", "class", "opt"), "Owns"),
					h(d, "th", a("scope", "col", "class", "num"), "Pending"),
					h(d, "th", a("scope", "col", "class", "num opt"), "Fired"),
					h(d, "th", a("scope", "col", "class", "num"), "Lateness p50"),
					h(d, "th", a("scope", "col", "class", "num opt"), "max"))),
				ap.members)))

	main := h(d, "main", a("class", "grid"), pending, h(d, "div", a("class", "side"), cluster, upcoming, recent))
	footer := h(d, "footer", a("id", "footer"))
	ap.footer.el = footer
	ap.root.Call("replaceChildren", header, main, footer)
	ap.root.Call("setAttribute", "aria-busy", "false")
	ap.snapAttr = attr{el: ap.root, name: "data-snapshots"}
	ap.snapAttr.Set("0")
	ap.render()
}

// start opens the stream, ticks the countdowns and wires the controls.
func (ap *app) start() {
	ap.searchFn = js.FuncOf(func(js.Value, []js.Value) any {
		ap.doSearch()
		return nil
	})
	ap.funcs = append(ap.funcs,
		listen(ap.search, "input", func(js.Value) {
			ap.win.Call("clearTimeout", ap.searchTimer)
			ap.searchTimer = ap.win.Call("setTimeout", ap.searchFn, searchDelayMs)
		}),
		listen(ap.form, "submit", func(ev js.Value) {
			ev.Call("preventDefault")
			ap.win.Call("clearTimeout", ap.searchTimer)
			ap.doSearch()
		}),
		listen(ap.prev, "click", func(js.Value) { ap.load(ap.state.Browse.Prev()) }),
		listen(ap.next, "click", func(js.Value) { ap.load(ap.state.Browse.Next()) }),
		listen(ap.tbody, "click", ap.onRowClick),
		listen(ap.tokenForm, "submit", func(ev js.Value) {
			ev.Call("preventDefault")
			ap.tokenGiven(ap.tokenInput.Get("value").String())
		}),
		listen(ap.tokenCancel, "click", func(js.Value) { ap.tokenGiven("") }),
		listen(ap.live, "click", func(js.Value) {
			ap.search.Set("value", "")
			ap.state.Browse.Live()
			ap.render()
		}),
		ap.searchFn)
	tick := js.FuncOf(func(js.Value, []js.Value) any {
		ap.renderRows()
		return nil
	})
	ap.funcs = append(ap.funcs, tick)
	ap.interval = ap.win.Call("setInterval", tick, tickMs)
	ap.connect()
}

// stop closes the stream and releases the callbacks (tests call it).
func (ap *app) stop() {
	ap.stopped = true
	ap.win.Call("clearInterval", ap.interval)
	ap.win.Call("clearTimeout", ap.searchTimer)
	if !ap.es.IsUndefined() {
		ap.es.Call("close")
	}
	for _, f := range append(ap.funcs, ap.esFuncs...) {
		f.Release()
	}
	ap.funcs, ap.esFuncs = nil, nil
}

// connect opens the event stream.
func (ap *app) connect() {
	if ap.stopped {
		return
	}
	for _, f := range ap.esFuncs {
		f.Release() // the previous stream's, closed
	}
	es := ap.win.Get("EventSource").New(view.StreamPath)
	ap.es = es
	ap.esFuncs = []js.Func{
		listen(es, "snapshot", func(ev js.Value) { ap.onSnapshot(ev.Get("data").String()) }),
		listen(es, "error", func(js.Value) { ap.onStreamError(es) }),
	}
}

// onSnapshot applies one snapshot event's data.
func (ap *app) onSnapshot(data string) {
	var snap api.Snapshot
	if err := json.Unmarshal([]byte(data), &snap); err != nil {
		ap.win.Get("console").Call("error", "dashboard: bad snapshot: "+err.Error())
		return
	}
	first, now := !ap.state.HasData(), ap.now()
	ap.state.ApplySnapshot(snap, now)
	ap.retry = retryMin
	if ap.state.Browse.Active() && now.Sub(ap.lastRefresh) >= refreshEvery {
		ap.lastRefresh = now
		ap.load(ap.state.Browse.Refresh()) // renders
	} else {
		ap.render()
	}
	if first {
		if p := ap.win.Get("performance"); !p.IsUndefined() {
			p.Call("mark", firstDataMark)
		}
	}
}

// onStreamError marks the page as reconnecting; when the browser gave up
// on es (an HTTP error, say), it reopens the stream after a backoff.
func (ap *app) onStreamError(es js.Value) {
	ap.state.Disconnected()
	ap.renderHeader()
	if es.Get("readyState").Int() != eventSourceClosed || ap.stopped || !es.Equal(ap.es) {
		return
	}
	es.Call("close")
	delay := ap.retry
	ap.retry = min(2*ap.retry, retryMax)
	timeout(ap.win, int(delay/time.Millisecond), ap.connect)
}

// doSearch starts a search with the box's content.
func (ap *app) doSearch() {
	req, ok := ap.state.Browse.Search(ap.search.Get("value").String())
	ap.load(req, ok)
}

// load fetches a page when ok, and renders.
func (ap *app) load(req view.Request, ok bool) {
	ap.render()
	if !ok {
		return
	}
	fail := func(msg string) {
		ap.state.Browse.Failed(req.Seq, msg)
		ap.render()
	}
	opts := js.Global().Get("Object").New()
	headers := js.Global().Get("Object").New()
	headers.Set("Accept", "application/json")
	opts.Set("headers", headers)
	then(ap.win.Call("fetch", req.URL, opts), func(resp js.Value) {
		status := resp.Get("status").Int()
		then(resp.Call("text"), func(body js.Value) {
			if status != 200 {
				fail(view.Problem(status, body.String()))
				return
			}
			var page api.Page
			if err := json.Unmarshal([]byte(body.String()), &page); err != nil {
				fail("bad answer from timeoutd: " + err.Error())
				return
			}
			ap.load(ap.state.Browse.Loaded(req.Seq, page))
		}, func(js.Value) { fail("timeoutd answered " + strconv.Itoa(status)) })
	}, func(err js.Value) { fail("timeoutd is unreachable") })
}

// onRowClick runs the operator action of the button clicked in the
// pending table (one listener for all rows).
func (ap *app) onRowClick(ev js.Value) {
	target := ev.Get("target")
	if target.IsUndefined() || target.IsNull() || target.Get("getAttribute").IsUndefined() {
		return
	}
	act, key := target.Call("getAttribute", "data-action"), target.Call("getAttribute", "data-key")
	if act.IsNull() || key.IsNull() || !ap.state.OperatorEnabled() {
		return
	}
	ap.operate(view.Action(act.String()), key.String())
}

// operate confirms act on the order key with the operator, asks for the
// operator token unless this tab has it, sends the request and shows the
// outcome in the status line.
func (ap *app) operate(act view.Action, key string) {
	var payWithin string
	if act == view.Extend {
		ans := ap.win.Call("prompt", act.Question(key), view.ExtendDefault)
		if ans.IsNull() || ans.IsUndefined() {
			ap.opStatusSet(act.NotSent(key, "not confirmed"), false)
			return
		}
		payWithin = ans.String()
	} else if !ap.win.Call("confirm", act.Question(key)).Truthy() {
		ap.opStatusSet(act.NotSent(key, "not confirmed"), false)
		return
	}
	req, err := view.BuildAction(act, key, payWithin)
	if err != nil {
		ap.opStatusSet(act.NotSent(key, err.Error()), false)
		return
	}
	ap.withToken(act, key, func(token string) {
		if token == "" {
			ap.opStatusSet(act.NotSent(key, "no operator token"), false)
			return
		}
		ap.send(act, key, req, token)
	})
}

// send sends the operator action's request with the operator token and
// shows the outcome in the status line.
func (ap *app) send(act view.Action, key string, req view.ActionRequest, token string) {
	headers := js.Global().Get("Object").New()
	headers.Set("Accept", "application/json, application/problem+json")
	headers.Set("Authorization", "Bearer "+token)
	opts := js.Global().Get("Object").New()
	opts.Set("method", "POST")
	opts.Set("headers", headers)
	if req.Body != "" {
		headers.Set("Content-Type", "application/json")
		opts.Set("body", req.Body)
	}
	ap.opStatusSet(act.Sending(key), false)
	done := func(status int, body string) {
		res := view.ActionResult(act, key, status, body)
		if res.ForgetToken {
			ap.win.Get("sessionStorage").Call("removeItem", view.TokenStorageKey)
		}
		ap.opStatusSet(res.Text, res.OK)
	}
	then(ap.win.Call("fetch", req.URL, opts), func(resp js.Value) {
		status := resp.Get("status").Int()
		then(resp.Call("text"), func(body js.Value) { done(status, body.String()) },
			func(js.Value) { done(status, "") })
	}, func(js.Value) { done(0, "") })
}

// withToken calls then with the operator token kept in sessionStorage, or
// asks for it (once per tab) in the token form, a password field, and
// calls then with the answer ("" when the operator gives none). A later
// action asking while the form is open takes the form over.
func (ap *app) withToken(act view.Action, key string, then func(token string)) {
	if v := ap.win.Get("sessionStorage").Call("getItem", view.TokenStorageKey); !v.IsNull() && v.String() != "" {
		then(v.String())
		return
	}
	ap.tokenWait = then
	ap.opStatusSet(act.NeedsToken(key), false)
	ap.tokenForm.Set("hidden", false)
	if focus := ap.tokenInput.Get("focus"); focus.Type() == js.TypeFunction {
		ap.tokenInput.Call("focus")
	}
}

// tokenGiven closes the token form with the operator's answer, keeps a
// non-empty token in sessionStorage and resumes the waiting action.
func (ap *app) tokenGiven(answer string) {
	ap.tokenInput.Set("value", "")
	ap.tokenForm.Set("hidden", true)
	then := ap.tokenWait
	ap.tokenWait = nil
	if then == nil {
		return
	}
	token := strings.TrimSpace(answer)
	if token != "" {
		ap.win.Get("sessionStorage").Call("setItem", view.TokenStorageKey, token)
	}
	then(token)
}

// opStatusSet shows msg in the operator status line.
func (ap *app) opStatusSet(msg string, ok bool) {
	ap.opText.Set(msg)
	ap.opOK.Set(strconv.FormatBool(ok))
}

// render brings the whole page up to date.
func (ap *app) render() {
	ap.renderHeader()
	ap.renderRows()
	ap.renderPager()
	ap.renderCharts()
	ap.renderFeed()
	ap.renderCluster()
	ap.snapAttr.Set(strconv.Itoa(ap.state.Snapshots))
}

func (ap *app) renderHeader() {
	if ap.state.OperatorEnabled() {
		ap.footer.Set("Operator actions enabled: Extend and Cancel go to the orders API. Countdowns use the server's clock.")
	} else {
		ap.footer.Set("Read-only view of timeoutd. Countdowns use the server's clock.")
	}
	hd := ap.state.Header()
	ap.conn.Set(hd.Conn)
	ap.connAttr.Set(ap.state.Conn.String())
	if ap.state.Conn == view.Reconnecting {
		ap.root.Call("setAttribute", "data-stale", "")
	} else {
		ap.root.Call("removeAttribute", "data-stale")
	}
	ap.pending.Set(hd.Pending)
	ap.scheduled.Set(hd.Scheduled)
	ap.fired.Set(hd.Fired)
	ap.cleared.Set(hd.Cleared)
	ap.outbox.Set(hd.OutboxAge)
}

// renderRows updates the pending table in place, reusing its rows.
func (ap *app) renderRows() {
	rows := ap.state.Rows(ap.now())
	ap.rows = fit(ap.tbody, ap.rows, len(rows), ap.newRow, func(r *row) js.Value { return r.tr })
	items := ap.state.Pending()
	ops := ap.state.OperatorEnabled()
	ap.opHead.Set("hidden", !ops)
	ap.opStatus.Set("hidden", !ops)
	for i, r := range rows {
		el := ap.rows[i]
		el.ops.Set("hidden", !ops)
		for j, act := range actions {
			el.opKeys[j].Set(r.Key)
			el.opLabels[j].Set(act.AriaLabel(r.Key))
		}
		el.dataKey.Set(r.Key)
		el.key.Set(r.Key)
		el.version.Set(strconv.FormatInt(r.Version, 10))
		el.deadline.Set(r.Deadline)
		el.deadlineTitle.Set(items[i].Deadline.UTC().Format(time.RFC3339Nano))
		el.countdown.Set(r.Countdown)
		cls := ""
		switch {
		case r.Due:
			cls = "due"
		case r.Soon:
			cls = "soon"
		}
		el.class.Set(cls)
	}
}

func (ap *app) newRow() *row {
	d := ap.doc
	r := &row{}
	r.key = newKeyCell(d)
	ver := h(d, "td", a("class", "num opt"))
	dl, cd := h(d, "td", a("class", "deadline")), h(d, "td", a("class", "num countdown"))
	r.ops = h(d, "td", a("class", "ops"))
	for _, act := range actions {
		b := h(d, "button", a("type", "button", "class", "op "+string(act), "data-action", string(act)), act.Label())
		r.ops.Call("appendChild", b)
		r.opKeys = append(r.opKeys, attr{el: b, name: "data-key"})
		r.opLabels = append(r.opLabels, attr{el: b, name: "aria-label"})
	}
	r.tr = h(d, "tr", nil, r.key.th, ver, dl, cd, r.ops)
	r.version.el, r.deadline.el, r.countdown.el = ver, dl, cd
	r.class = attr{el: r.tr, name: "class"}
	r.dataKey = attr{el: r.tr, name: "data-key"}
	r.deadlineTitle = attr{el: dl, name: "title"}
	return r
}

func (ap *app) renderPager() {
	b := &ap.state.Browse
	ap.pager.Set(ap.state.PagerText())
	ap.prev.Set("disabled", !b.CanPrev())
	ap.next.Set("disabled", !ap.state.CanNext())
	ap.live.Set("hidden", !b.Active() && b.Query == "")
}

// renderCharts redraws both SVG charts.
func (ap *app) renderCharts() {
	d := ap.doc
	hc := view.Histogram(ap.state.Stats.Upcoming)
	var kids []any
	label := "Upcoming expiries:"
	for _, b := range hc.Bars {
		cy := fmt.Sprintf("%g", b.Y+b.H/2)
		kids = append(kids,
			s(d, "text", a("x", fmt.Sprintf("%g", view.HistLabelWidth-6), "y", cy, "class", "label", "text-anchor", "end", "dominant-baseline", "middle"), b.Label),
			s(d, "rect", a("x", fmt.Sprintf("%g", b.X), "y", fmt.Sprintf("%g", b.Y), "width", fmt.Sprintf("%g", b.W), "height", fmt.Sprintf("%g", b.H), "rx", "2", "class", "bar"),
				s(d, "title", nil, b.Label+": "+b.Value)),
			s(d, "text", a("x", fmt.Sprintf("%g", b.X+b.W+6), "y", cy, "class", "value", "dominant-baseline", "middle"), b.Value))
		label += " " + b.Label + " " + b.Value + ";"
	}
	ap.hist.Call("setAttribute", "aria-label", label)
	replace(ap.hist, kids)

	lc := view.Lateness(ap.state.Recent)
	ap.latMax.Set("tallest " + lc.Max)
	kids = kids[:0]
	kids = append(kids, s(d, "line", a("x1", "0", "x2", fmt.Sprintf("%g", lc.Width), "y1", fmt.Sprintf("%g", lc.Height), "y2", fmt.Sprintf("%g", lc.Height), "class", "axis")))
	for _, b := range lc.Bars {
		cls := "bar"
		if b.Alert {
			cls = "bar alert"
		}
		kids = append(kids, s(d, "rect", a("x", fmt.Sprintf("%g", b.X), "y", fmt.Sprintf("%g", b.Y), "width", fmt.Sprintf("%g", b.W), "height", fmt.Sprintf("%g", b.H), "class", cls),
			s(d, "title", nil, b.Label+": "+b.Value)))
	}
	replace(ap.lat, kids)
}

// fit grows or shrinks a table body's rows to n, appending the rows newRow
// builds and removing the last ones (tr is a row's element), so the table
// is updated in place.
func fit[R any](body js.Value, rows []R, n int, newRow func() R, tr func(R) js.Value) []R {
	for len(rows) < n {
		r := newRow()
		body.Call("appendChild", tr(r))
		rows = append(rows, r)
	}
	for len(rows) > n {
		body.Call("removeChild", tr(rows[len(rows)-1]))
		rows = rows[:len(rows)-1]
	}
	return rows
}

func replace(el js.Value, kids []any) {
	args := make([]any, len(kids))
	copy(args, kids)
	el.Call("replaceChildren", args...)
}

// renderFeed updates the recent-expiries table in place.
func (ap *app) renderFeed() {
	items := ap.state.Feed()
	d := ap.doc
	ap.feedRows = fit(ap.feed, ap.feedRows, len(items), func() *feedRow {
		r := &feedRow{}
		r.key = newKeyCell(d)
		ver := h(d, "td", a("class", "num opt"))
		at, lat, out := h(d, "td", nil), h(d, "td", a("class", "num")), h(d, "td", nil)
		r.tr = h(d, "tr", nil, r.key.th, ver, at, lat, out)
		r.version.el, r.firedAt.el, r.lateness.el, r.outc.el = ver, at, lat, out
		r.class = attr{el: r.tr, name: "class"}
		return r
	}, func(r *feedRow) js.Value { return r.tr })
	for i, it := range items {
		r := ap.feedRows[i]
		r.tr.Call("setAttribute", "data-key", it.Key)
		r.key.Set(it.Key)
		r.version.Set(strconv.FormatInt(it.Version, 10))
		r.firedAt.Set(it.FiredAt)
		r.lateness.Set(it.Lateness)
		outcome, cls := "fired", ""
		if it.Missed {
			outcome, cls = "missed", "missed"
		}
		r.outc.Set(outcome)
		r.class.Set(cls)
	}
}

// renderCluster updates the cluster table in place: one row per live
// timeoutd instance, the one serving the page marked.
func (ap *app) renderCluster() {
	ms := ap.state.Members()
	d := ap.doc
	ap.clusterSummary.Set(ap.state.ClusterSummary())
	ap.memberRows = fit(ap.members, ap.memberRows, len(ms), func() *memberRow {
		r := &memberRow{}
		id := h(d, "th", a("scope", "row"))
		cells := []js.Value{h(d, "td", a("class", "num")), h(d, "td", a("class", "opt")), h(d, "td", a("class", "num")),
			h(d, "td", a("class", "num opt")), h(d, "td", a("class", "num")), h(d, "td", a("class", "num opt"))}
		r.tr = h(d, "tr", nil, id, cells[0], cells[1], cells[2], cells[3], cells[4], cells[5])
		r.id.el, r.parts.el, r.ranges.el, r.pending.el, r.rate.el, r.p50.el, r.latMax.el = id, cells[0], cells[1], cells[2], cells[3], cells[4], cells[5]
		r.self = attr{el: r.tr, name: "class"}
		return r
	}, func(r *memberRow) js.Value { return r.tr })
	for i, m := range ms {
		r := ap.memberRows[i]
		r.tr.Call("setAttribute", "data-instance", m.ID)
		id, cls := m.ID, ""
		if m.Self {
			id, cls = m.ID+" (this one)", "self"
		}
		r.id.Set(id)
		r.self.Set(cls)
		r.parts.Set(m.Partitions)
		r.ranges.Set(m.Ranges)
		r.pending.Set(m.Pending)
		r.rate.Set(m.FiredRate)
		r.p50.Set(m.LatencyP50)
		r.latMax.Set(m.LatencyMax)
	}
}

// keyCell is the row header holding an order id: the whole id, and an
// abbreviation (view.ShortKey) that CSS shows instead where columns are
// narrow, the whole id staying readable by screen readers and as a tooltip.
type keyCell struct {
	th          js.Value
	full, short text
	class       attr
	title       attr
}

func newKeyCell(d js.Value) keyCell {
	full := h(d, "span", a("class", "k-full"))
	short := h(d, "span", a("class", "k-short", "aria-hidden", "true"))
	th := h(d, "th", a("scope", "row"), full, short)
	return keyCell{th: th, full: text{el: full}, short: text{el: short},
		class: attr{el: th, name: "class"}, title: attr{el: th, name: "title"}}
}

// Set shows key.
func (k *keyCell) Set(key string) {
	k.full.Set(key)
	k.title.Set(key)
	if sk := view.ShortKey(key); sk != key {
		k.short.Set(sk)
		k.class.Set("key abbr")
		return
	}
	k.short.Set("")
	k.class.Set("key")
}
