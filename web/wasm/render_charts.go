//go:build js && wasm

package main

import (
	"strconv"
	"syscall/js"

	"github.com/ordertimeout/ordertimeout/web/wasm/view"
)

// num formats an SVG coordinate.
func num(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }

// renderCharts redraws both SVG charts.
func (ap *app) renderCharts() {
	ap.renderHistogram()
	ap.renderLateness()
}

// renderHistogram draws the pending deadlines as vertical bars over a
// time axis, from the last snapshot (they add up to its pending count).
func (ap *app) renderHistogram() {
	d := ap.doc
	hc := view.Deadlines(ap.state.Stats.Deadlines)
	ap.histCaption.Set("(" + hc.Caption + ")")
	ap.hist.Call("setAttribute", "aria-label", hc.Summary)
	axisY := view.HistHeight - view.HistAxisHeight
	kids := []any{svgElem(d, "line", attrs("x1", "0", "x2", num(view.HistWidth), "y1", num(axisY), "y2", num(axisY), "class", "axis"))}
	for _, b := range hc.Bars {
		kids = append(kids, ap.barRect(b))
	}
	for _, t := range hc.Ticks {
		kids = append(kids, svgElem(d, "text", attrs("x", num(t.X), "y", num(view.HistHeight-3), "class", "label", "text-anchor", t.Anchor), t.Text))
	}
	replaceChildren(ap.hist, kids)
}

// renderLateness draws the lateness of the recent expiries.
func (ap *app) renderLateness() {
	d := ap.doc
	lc := view.Lateness(ap.state.Recent)
	ap.latMax.Set("tallest " + lc.Max)
	kids := []any{svgElem(d, "line", attrs("x1", "0", "x2", num(lc.Width), "y1", num(lc.Height), "y2", num(lc.Height), "class", "axis"))}
	for _, b := range lc.Bars {
		kids = append(kids, ap.barRect(b))
	}
	replaceChildren(ap.lat, kids)
}

// barRect draws one bar of a chart, with its label and value as title.
func (ap *app) barRect(b view.Bar) js.Value {
	cls := "bar"
	if b.Alert {
		cls = "bar alert"
	}
	return svgElem(ap.doc, "rect", attrs("x", num(b.X), "y", num(b.Y), "width", num(b.W), "height", num(b.H), "class", cls),
		svgElem(ap.doc, "title", nil, b.Label+": "+b.Value))
}
