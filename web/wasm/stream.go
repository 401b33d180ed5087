//go:build js && wasm

package main

import (
	"encoding/json"
	"syscall/js"
	"time"

	"github.com/ordertimeout/ordertimeout/services/timeoutd/api"
	"github.com/ordertimeout/ordertimeout/web/wasm/view"
)

// eventSourceClosed is EventSource.CLOSED: the browser will not retry.
const eventSourceClosed = 2

// connect opens the event stream of snapshots.
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
