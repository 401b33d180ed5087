//go:build js && wasm

package main

import (
	"encoding/json"
	"strconv"
	"syscall/js"

	"github.com/ordertimeout/ordertimeout/services/timeoutd/api"
	"github.com/ordertimeout/ordertimeout/web/wasm/view"
)

// doSearch starts a search with the box's content.
func (ap *app) doSearch() {
	req, ok := ap.state.Browse.Search(ap.search.Get("value").String())
	ap.load(req, ok)
}

// load fetches a page of /api/v1/timeouts when ok, and renders.
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
	}, func(js.Value) { fail("timeoutd is unreachable") })
}
