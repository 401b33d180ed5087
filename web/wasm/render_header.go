//go:build js && wasm

package main

import "github.com/ordertimeout/ordertimeout/web/wasm/view"

// renderHeader updates the connection state, the figures and the footer.
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
