//go:build js && wasm

package main

import (
	"strconv"
	"syscall/js"
	"time"
)

// pendingRow is one line of the pending table.
type pendingRow struct {
	tr                            js.Value
	key                           keyCell
	version, deadline, countdown  text
	dataKey, class, deadlineTitle attr
	ops                           js.Value // the operator actions' cell
	opKeys, opLabels              []attr   // per button: data-key, aria-label
}

// renderRows updates the pending table in place, reusing its rows; the
// one-second tick calls it for the countdowns.
func (ap *app) renderRows() {
	rows := ap.state.Rows(ap.now())
	ap.rows = fit(ap.tbody, ap.rows, len(rows), ap.newPendingRow, func(r *pendingRow) js.Value { return r.tr })
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

func (ap *app) newPendingRow() *pendingRow {
	d := ap.doc
	r := &pendingRow{}
	r.key = newKeyCell(d)
	ver := elem(d, "td", attrs("class", "num opt"))
	dl, cd := elem(d, "td", attrs("class", "deadline")), elem(d, "td", attrs("class", "num countdown"))
	r.ops = elem(d, "td", attrs("class", "ops"))
	for _, act := range actions {
		b := elem(d, "button", attrs("type", "button", "class", "op "+string(act), "data-action", string(act)), act.Label())
		r.ops.Call("appendChild", b)
		r.opKeys = append(r.opKeys, attr{el: b, name: "data-key"})
		r.opLabels = append(r.opLabels, attr{el: b, name: "aria-label"})
	}
	r.tr = elem(d, "tr", nil, r.key.th, ver, dl, cd, r.ops)
	r.version.el, r.deadline.el, r.countdown.el = ver, dl, cd
	r.class = attr{el: r.tr, name: "class"}
	r.dataKey = attr{el: r.tr, name: "data-key"}
	r.deadlineTitle = attr{el: dl, name: "title"}
	return r
}

// renderPager updates the pager's text and buttons.
func (ap *app) renderPager() {
	b := &ap.state.Browse
	ap.pager.Set(ap.state.PagerText())
	ap.prev.Set("disabled", !b.CanPrev())
	ap.next.Set("disabled", !ap.state.CanNext())
	ap.live.Set("hidden", !b.Active() && b.Query == "")
}
