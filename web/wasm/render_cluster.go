//go:build js && wasm

package main

import "syscall/js"

// memberRow is one line of the cluster table.
type memberRow struct {
	tr                                            js.Value
	id, parts, ranges, pending, rate, p50, latMax text
	self                                          attr
}

// renderCluster updates the cluster table in place: one row per live
// timeoutd instance, the one serving the page marked.
func (ap *app) renderCluster() {
	ms := ap.state.Members()
	ap.clusterSummary.Set(ap.state.ClusterSummary())
	ap.memberRows = fit(ap.members, ap.memberRows, len(ms), ap.newMemberRow, func(r *memberRow) js.Value { return r.tr })
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

func (ap *app) newMemberRow() *memberRow {
	d := ap.doc
	r := &memberRow{}
	id := elem(d, "th", attrs("scope", "row"))
	cells := []js.Value{elem(d, "td", attrs("class", "num")), elem(d, "td", attrs("class", "opt")), elem(d, "td", attrs("class", "num")),
		elem(d, "td", attrs("class", "num opt")), elem(d, "td", attrs("class", "num")), elem(d, "td", attrs("class", "num opt"))}
	r.tr = elem(d, "tr", nil, id, cells[0], cells[1], cells[2], cells[3], cells[4], cells[5])
	r.id.el, r.parts.el, r.ranges.el, r.pending.el, r.rate.el, r.p50.el, r.latMax.el = id, cells[0], cells[1], cells[2], cells[3], cells[4], cells[5]
	r.self = attr{el: r.tr, name: "class"}
	return r
}
