//go:build js && wasm

package main

import (
	"errors"
	"strconv"
	"syscall/js"
	"time"

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

// app is the page: its DOM handles (built by mount, page.go), the view
// state, and the callbacks of the stream (stream.go), the pending list's
// pages (browse.go) and the operator actions (operator.go). The render_*
// files bring each part of the page up to date.
type app struct {
	win, doc js.Value
	now      func() time.Time
	state    view.State

	root     js.Value
	snapAttr attr // data-snapshots of #app

	// The header.
	conn                                       text
	connAttr                                   attr
	pending, scheduled, fired, cleared, outbox text
	footer                                     text

	// The pending table, its search and pager.
	form, search, prev, next, live js.Value
	pager                          text
	tbody                          js.Value
	rows                           []*pendingRow

	// The operator actions.
	opHead, opStatus                   js.Value // the actions column's header, the operator status line
	opText                             text
	opOK                               attr
	tokenForm, tokenInput, tokenCancel js.Value // asks for the operator token (a password field)
	tokenWait                          func(token string)

	// The charts, the recent expiries and the cluster.
	hist, lat      js.Value
	histCaption    text
	latMax         text
	feed           js.Value
	feedRows       []*feedRow
	members        js.Value
	memberRows     []*memberRow
	clusterSummary text

	// The callbacks and the stream.
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
