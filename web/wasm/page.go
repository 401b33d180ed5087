//go:build js && wasm

package main

import (
	"fmt"
	"syscall/js"

	"github.com/ordertimeout/ordertimeout/web/wasm/view"
)

// mount replaces #app's content by the dashboard's skeleton: the header,
// the pending table on the left, the cluster, the upcoming expiries and
// the recent expiries on the right, and the footer.
func (ap *app) mount() {
	d := ap.doc
	side := elem(d, "div", attrs("class", "side"), ap.mountCluster(), ap.mountUpcoming(), ap.mountRecent())
	main := elem(d, "main", attrs("class", "grid"), ap.mountPending(), side)
	footer := elem(d, "footer", attrs("id", "footer"))
	ap.footer.el = footer
	ap.root.Call("replaceChildren", ap.mountHeader(), main, footer)
	ap.root.Call("setAttribute", "aria-busy", "false")
	ap.snapAttr = attr{el: ap.root, name: "data-snapshots"}
	ap.snapAttr.Set("0")
	ap.render()
}

// mountHeader builds the header: the connection state and the figures.
func (ap *app) mountHeader() js.Value {
	d := ap.doc
	stat := func(label, id string, t *text) js.Value {
		v := elem(d, "dd", attrs("id", id), "–")
		t.el = v
		return elem(d, "div", attrs("class", "stat"), elem(d, "dt", nil, label), v)
	}
	connEl := elem(d, "span", attrs("id", "conn", "class", "conn", "role", "status", "aria-live", "polite", "data-state", "connecting"), "connecting")
	ap.conn.el, ap.connAttr = connEl, attr{el: connEl, name: "data-state"}
	return elem(d, "header", attrs("class", "top"),
		elem(d, "div", attrs("class", "brand"), elem(d, "h1", nil, "ordertimeout"), connEl),
		elem(d, "dl", attrs("class", "stats", "aria-label", "Timeout statistics"),
			stat("Pending", "stat-pending", &ap.pending),
			stat("Scheduled", "stat-scheduled", &ap.scheduled),
			stat("Fired", "stat-fired", &ap.fired),
			stat("Cleared", "stat-cleared", &ap.cleared),
			stat("Oldest unpublished", "stat-outbox", &ap.outbox)))
}

// mountPending builds the pending table with its search, the operator's
// status line and token form, and the pager.
func (ap *app) mountPending() js.Value {
	d := ap.doc
	ap.search = elem(d, "input", attrs("id", "search", "type", "search", "placeholder", "order id prefix",
		"autocomplete", "off", "spellcheck", "false", "aria-describedby", "pager-text"))
	ap.prev = elem(d, "button", attrs("id", "prev", "type", "button", "aria-label", "Previous page"), "‹ Prev")
	ap.next = elem(d, "button", attrs("id", "next", "type", "button", "aria-label", "Next page"), "Next ›")
	ap.live = elem(d, "button", attrs("id", "live", "type", "button", "aria-label", "Back to the live list"), "Live")
	pagerEl := elem(d, "span", attrs("id", "pager-text", "class", "pager-text", "aria-live", "polite"))
	ap.pager.el = pagerEl
	ap.tbody = elem(d, "tbody", attrs("id", "pending-rows"))
	ap.opHead = elem(d, "th", attrs("scope", "col", "class", "ops"), "Actions")
	ap.opStatus = elem(d, "p", attrs("id", "op-status", "class", "op-status", "role", "status", "aria-live", "polite"))
	ap.opText.el, ap.opOK = ap.opStatus, attr{el: ap.opStatus, name: "data-ok"}
	ap.tokenInput = elem(d, "input", attrs("id", "token-input", "type", "password", "autocomplete", "off",
		"spellcheck", "false", "required", ""))
	ap.tokenCancel = elem(d, "button", attrs("id", "token-cancel", "type", "button"), "Cancel")
	ap.tokenForm = elem(d, "form", attrs("id", "token-form", "class", "token-form", "aria-label", "Operator token"),
		elem(d, "label", attrs("for", "token-input"), view.TokenPrompt), ap.tokenInput,
		elem(d, "button", attrs("type", "submit"), "Use token"), ap.tokenCancel)
	ap.tokenForm.Set("hidden", true)
	ap.form = elem(d, "form", attrs("class", "search", "role", "search"),
		elem(d, "label", attrs("for", "search"), "Search by order id"), ap.search)
	return elem(d, "section", attrs("class", "card pending", "aria-labelledby", "pending-h"),
		elem(d, "h2", attrs("id", "pending-h"), "Pending timeouts"),
		ap.form,
		elem(d, "div", attrs("class", "scroll"),
			elem(d, "table", attrs("id", "pending", "aria-labelledby", "pending-h"),
				elem(d, "thead", nil, elem(d, "tr", nil,
					elem(d, "th", attrs("scope", "col"), "Order id"),
					elem(d, "th", attrs("scope", "col", "class", "num opt"), "Version"),
					elem(d, "th", attrs("scope", "col"), "Deadline (UTC)"),
					elem(d, "th", attrs("scope", "col", "class", "num"), "Expires in"),
					ap.opHead)),
				ap.tbody)),
		ap.opStatus,
		ap.tokenForm,
		elem(d, "nav", attrs("class", "pager", "aria-label", "Pages of pending timeouts"), ap.prev, pagerEl, ap.next, ap.live))
}

// mountCluster builds the cluster table.
func (ap *app) mountCluster() js.Value {
	d := ap.doc
	ap.members = elem(d, "tbody", attrs("id", "cluster-rows"))
	caption := elem(d, "span", attrs("id", "cluster-summary", "class", "muted"))
	ap.clusterSummary.el = caption
	return elem(d, "section", attrs("class", "card", "aria-labelledby", "cluster-h"),
		elem(d, "h2", attrs("id", "cluster-h"), "Cluster ", caption),
		elem(d, "div", attrs("class", "scroll"),
			elem(d, "table", attrs("id", "cluster", "aria-labelledby", "cluster-h"),
				elem(d, "thead", nil, elem(d, "tr", nil,
					elem(d, "th", attrs("scope", "col"), "Instance"),
					elem(d, "th", attrs("scope", "col", "class", "num"), "Partitions"),
					elem(d, "th", attrs("scope", "col", "class", "opt"), "Owns"),
					elem(d, "th", attrs("scope", "col", "class", "num"), "Pending"),
					elem(d, "th", attrs("scope", "col", "class", "num opt"), "Fired"),
					elem(d, "th", attrs("scope", "col", "class", "num"), "Lateness p50"),
					elem(d, "th", attrs("scope", "col", "class", "num opt"), "max"))),
				ap.members)))
}

// mountUpcoming builds the histogram of pending deadlines.
func (ap *app) mountUpcoming() js.Value {
	d := ap.doc
	ap.hist = svgElem(d, "svg", attrs("id", "hist", "role", "img",
		"viewBox", fmt.Sprintf("0 0 %g %g", view.HistWidth, view.HistHeight), "preserveAspectRatio", "xMidYMid meet"))
	caption := elem(d, "span", attrs("id", "hist-caption", "class", "muted"))
	ap.histCaption.el = caption
	return elem(d, "section", attrs("class", "card", "aria-labelledby", "hist-h"),
		elem(d, "h2", attrs("id", "hist-h"), "Upcoming expiries ", caption), ap.hist)
}

// mountRecent builds the lateness chart and the recent-expiries table.
func (ap *app) mountRecent() js.Value {
	d := ap.doc
	ap.lat = svgElem(d, "svg", attrs("id", "lateness", "role", "img", "aria-labelledby", "lat-h",
		"viewBox", fmt.Sprintf("0 0 %g %g", view.LatWidth, view.LatHeight), "preserveAspectRatio", "none"))
	latMax := elem(d, "span", attrs("class", "muted"))
	ap.latMax.el = latMax
	ap.feed = elem(d, "tbody", attrs("id", "feed-rows"))
	return elem(d, "section", attrs("class", "card", "aria-labelledby", "recent-h"),
		elem(d, "h2", attrs("id", "recent-h"), "Recent expiries"),
		elem(d, "figure", attrs("class", "lat"),
			ap.lat,
			elem(d, "figcaption", attrs("id", "lat-h"), "Lateness, oldest to newest; ", latMax)),
		elem(d, "div", attrs("class", "scroll"),
			elem(d, "table", attrs("id", "feed", "aria-labelledby", "recent-h"),
				elem(d, "thead", nil, elem(d, "tr", nil,
					elem(d, "th", attrs("scope", "col"), "Order id"),
					elem(d, "th", attrs("scope", "col", "class", "num opt"), "Version"),
					elem(d, "th", attrs("scope", "col"), "Fired at (UTC)"),
					elem(d, "th", attrs("scope", "col", "class", "num"), "Lateness"),
					elem(d, "th", attrs("scope", "col"), "Outcome"))),
				ap.feed)))
}
