//go:build js && wasm

package main

import (
	"strconv"
	"syscall/js"
)

// feedRow is one line of the recent-expiries table.
type feedRow struct {
	tr                               js.Value
	key                              keyCell
	version, firedAt, lateness, outc text
	class                            attr
}

// renderFeed updates the recent-expiries table in place.
func (ap *app) renderFeed() {
	items := ap.state.Feed(ap.now())
	ap.feedRows = fit(ap.feed, ap.feedRows, len(items), ap.newFeedRow, func(r *feedRow) js.Value { return r.tr })
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

func (ap *app) newFeedRow() *feedRow {
	d := ap.doc
	r := &feedRow{}
	r.key = newKeyCell(d)
	ver := elem(d, "td", attrs("class", "num opt"))
	at, lat, out := elem(d, "td", nil), elem(d, "td", attrs("class", "num")), elem(d, "td", nil)
	r.tr = elem(d, "tr", nil, r.key.th, ver, at, lat, out)
	r.version.el, r.firedAt.el, r.lateness.el, r.outc.el = ver, at, lat, out
	r.class = attr{el: r.tr, name: "class"}
	return r
}
