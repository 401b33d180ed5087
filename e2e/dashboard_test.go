package e2e

import (
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/ordertimeout/ordertimeout/pkg/ordersclient"
	"github.com/ordertimeout/ordertimeout/web/wasm/browsertest"
)

// dashboardAppearBound is how soon after its creation an order must show
// in the dashboard's pending list (issue 6).
const dashboardAppearBound = 2 * time.Second

// Scenario: the dashboard in a real Chromium against the running stack.
// Orders created through the orders API appear in the pending list within
// 2 s, their countdowns decrease on the client (never below the time left),
// and after their deadline they leave the pending list and show in the
// expiry feed; paging and search go through timeoutd's cursor and key
// filter; the histogram follows; when timeoutd is killed the page shows
// "reconnecting" and, once timeoutd is back, resyncs; the operator cancels
// an order from the page, typing the token into its password field. The
// test runs on a
// stack of its own, so the lists hold only its orders, and saves a
// screenshot (build/screenshots/dashboard-e2e.png, copied to
// docs/dashboard.png).
func TestDashboardFollowsOrdersToTheirExpiry(t *testing.T) {
	s := startStack(t, stackOptions{})
	ctx := browsertest.Chrome(t, browsertest.Desktop)

	browsertest.Do(t, ctx, 20*time.Second, "open the dashboard", chromedp.Navigate(s.TimeoutdURL+"/"))
	browsertest.Poll(t, ctx, 10*time.Second, "the first snapshot", `Number(document.getElementById("app")?.dataset.snapshots) >= 1`)
	t.Logf("time to first data (navigation start → first snapshot rendered): %s", browsertest.FirstData(t, ctx).Round(time.Millisecond))
	if enc, dec := browsertest.WasmTransfer(t, ctx); enc <= 0 || enc > dec/2 {
		t.Errorf("main.wasm transferred as %d bytes for %d decoded, want it gzip-compressed", enc, dec)
	} else {
		t.Logf("main.wasm: %d bytes transferred (gzip), %d decoded", enc, dec)
	}

	// Four orders expire during the test; 26 more, due within 20 s to 42
	// min, stay pending, so the pending list pages and the histogram and
	// the screenshot show a spread.
	cl := s.orders()
	var (
		watched []ordersclient.Order
		created []time.Time
		last    ordersclient.Order // due in 42 min
	)
	for i := range 4 {
		watched = append(watched, createOrder(t, cl, within(7*time.Second+time.Duration(i)*time.Second)))
		created = append(created, time.Now())
	}
	var slowest time.Duration
	for i, o := range watched {
		left := dashboardAppearBound - time.Since(created[i])
		browsertest.Poll(t, ctx, max(left, 50*time.Millisecond), o.ID+" in the pending list within 2 s", rowOf("pending-rows", o.ID)+" !== null")
		slowest = max(slowest, time.Since(created[i]))
	}
	t.Logf("orders in the dashboard at most %s after their creation", slowest.Round(time.Millisecond))
	for i := range 26 {
		last = createOrder(t, cl, within(20*time.Second+time.Duration(i*i)*4*time.Second))
	}
	browsertest.Poll(t, ctx, dashboardAppearBound, "the pending count of 30", `document.getElementById("stat-pending").textContent === "30"`)
	// The cluster table: the one instance, marked as the one serving the
	// page, owning every partition and holding the 30 pending deadlines.
	browsertest.Poll(t, ctx, 3*time.Second, "the cluster table", `document.querySelector("#cluster-rows tr.self td:nth-of-type(3)")?.textContent === "30"`)
	if cells := browsertest.Eval[[]string](t, ctx, `[...document.querySelectorAll("#cluster-rows tr.self > *")].map(c => c.textContent)`); len(cells) != 7 ||
		cells[0] != svcTimeoutd+" (this one)" || cells[1] != "64" || cells[2] != "0-63" {
		t.Errorf("cluster row %q, want %s (this one) owning 64 partitions, 0-63", cells, svcTimeoutd)
	}
	// Its caption: ownership as it really is, every partition fireable.
	browsertest.Poll(t, ctx, 3*time.Second, "the cluster caption", `document.getElementById("cluster-summary")?.textContent === "1 instance, 64 of 64 partitions may fire"`)

	for _, o := range watched {
		cells := browsertest.Eval[[]string](t, ctx, cellsOf("pending-rows", o.ID))
		// order id, version, deadline (UTC), countdown, and the operator's
		// actions (the e2e stack configures an operator token)
		if len(cells) != 5 || cells[1] != strconv.FormatInt(o.Version, 10) || cells[2] != o.PayBy.UTC().Format("15:04:05.000") || cells[4] != "ExtendCancel" {
			t.Errorf("row of %s = %q, want version %d, deadline %s and the Extend and Cancel actions", o.ID, cells, o.Version, o.PayBy.UTC().Format("15:04:05.000"))
		}
	}

	first := watched[0]
	countdown := cellsOf("pending-rows", first.ID) + "[3]"
	leftBefore := time.Until(first.PayBy)
	before := browsertest.Eval[string](t, ctx, countdown)
	leftAfter := time.Until(first.PayBy)
	// The page shows the time left rounded up, as of its last tick (at
	// most 1 s ago): never less than what is left, at most 2 s more.
	if b := time.Duration(browsertest.CountdownSeconds(t, before)) * time.Second; b < leftAfter || b > leftBefore+2*time.Second {
		t.Errorf("countdown of %s shows %q with %s to %s left", first.ID, before, leftBefore.Round(time.Millisecond), leftAfter.Round(time.Millisecond))
	}
	browsertest.Poll(t, ctx, 3*time.Second, "the countdown to tick", countdown+" !== "+strconv.Quote(before))
	after := browsertest.Eval[string](t, ctx, countdown)
	if a, b := browsertest.CountdownSeconds(t, after), browsertest.CountdownSeconds(t, before); a >= b {
		t.Errorf("countdown of %s went from %q to %q", first.ID, before, after)
	}

	for _, o := range watched {
		browsertest.Poll(t, ctx, time.Until(o.PayBy)+3*time.Second, o.ID+" to leave the pending list for the feed",
			rowOf("pending-rows", o.ID)+" === null && "+rowOf("feed-rows", o.ID)+" !== null")
		if time.Now().Before(o.PayBy) {
			t.Errorf("%s left the pending list before its deadline %s", o.ID, o.PayBy.Format(time.RFC3339Nano))
		}
		cells := browsertest.Eval[[]string](t, ctx, cellsOf("feed-rows", o.ID))
		// order id, version, fired at, lateness, outcome
		if len(cells) != 5 || cells[1] != strconv.FormatInt(o.Version, 10) || cells[4] != "fired" || cells[2] < o.PayBy.UTC().Format("15:04:05.000") {
			t.Errorf("feed row of %s = %q, want version %d, fired at or after %s", o.ID, cells, o.Version, o.PayBy.UTC().Format("15:04:05.000"))
		}
		t.Logf("%s expired: feed says fired at %s, lateness %s", o.ID, cells[2], cells[3])
	}
	// 26 pending: the second page, through timeoutd's cursor, has 6; a
	// search by order id finds one.
	rows := `document.querySelectorAll("#pending-rows tr").length`
	browsertest.Do(t, ctx, 5*time.Second, "next page", chromedp.Click(chromedp.ID("next")))
	browsertest.Poll(t, ctx, 3*time.Second, "page 2 with 6 rows", rows+` === 6 && document.getElementById("pager-text").textContent === "page 2"`)
	if browsertest.Eval[string](t, ctx, rowOf("pending-rows", last.ID)+"?.dataset.key") != last.ID {
		t.Errorf("page 2 lacks the latest order %s", last.ID)
	}
	browsertest.Do(t, ctx, 5*time.Second, "search", chromedp.Click(chromedp.ID("live")), chromedp.SendKeys(chromedp.ID("search"), last.ID))
	browsertest.Poll(t, ctx, 3*time.Second, "the search result", rows+` === 1 && `+rowOf("pending-rows", last.ID)+` !== null`)
	browsertest.Do(t, ctx, 5*time.Second, "back to live", chromedp.Click(chromedp.ID("live")))
	browsertest.Poll(t, ctx, 3*time.Second, "the live list", rows+` === 20`)

	// The histogram follows: it is counted with the pending count, so its
	// bars add up to the 26 pending, all due within the hour, in buckets
	// of 5 minutes or less.
	browsertest.Poll(t, ctx, 3*time.Second, "the histogram of the 26 pending",
		`document.getElementById("stat-pending").textContent === "26" && /^Upcoming expiries of 26 pending, bars of (\d+s|1m|5m): /.test(document.getElementById("hist").getAttribute("aria-label"))`)

	if got := browsertest.Eval[string](t, ctx, `document.getElementById("conn").dataset.state`); got != "live" {
		t.Errorf("connection state %q at the end, want live", got)
	}
	browsertest.Screenshot(t, ctx, "dashboard-e2e.png")

	// timeoutd dies: the page says so and keeps the last data; an order
	// created meanwhile shows once timeoutd is back and the stream resyncs.
	s.Kill(t, svcTimeoutd)
	browsertest.Poll(t, ctx, 5*time.Second, "the reconnecting state", `document.getElementById("conn").dataset.state === "reconnecting"`)
	late := createOrder(t, cl, within(30*time.Minute))
	restarted := s.Start(t, svcTimeoutd)
	browsertest.Poll(t, ctx, 20*time.Second, "the resync after the restart",
		`document.getElementById("conn").dataset.state === "live" && document.getElementById("stat-pending").textContent === "27"`)
	t.Logf("dashboard live again with the new order %s after timeoutd's restart", time.Since(restarted).Round(time.Millisecond))
	browsertest.Do(t, ctx, 5*time.Second, "search the new order", chromedp.SendKeys(chromedp.ID("search"), late.ID))
	browsertest.Poll(t, ctx, 3*time.Second, "the new order", rowOf("pending-rows", late.ID)+" !== null")

	// The operator cancels it from the page: the confirmation (answered
	// here, it is the browser's own dialog), then the token, asked once in
	// a password field, then the request through timeoutd to the orders
	// API; the order leaves the pending list and is cancelled.
	browsertest.Eval[bool](t, ctx, `window.confirm = () => true; sessionStorage.clear(); true`)
	browsertest.Do(t, ctx, 5*time.Second, "click Cancel", chromedp.Click(chromedp.CSS(fmt.Sprintf(`#pending-rows tr[data-key='%s'] button[data-action="cancel"]`, late.ID))))
	browsertest.Poll(t, ctx, 3*time.Second, "the token form", `!document.getElementById("token-form").hidden && document.getElementById("token-input").type === "password"`)
	browsertest.Do(t, ctx, 5*time.Second, "type the operator token",
		chromedp.SendKeys(chromedp.ID("token-input"), operatorToken),
		chromedp.Click(chromedp.CSS(`#token-form button[type="submit"]`)))
	browsertest.Poll(t, ctx, 5*time.Second, "the cancel's outcome",
		`document.getElementById("op-status").textContent === "Order `+late.ID+` cancelled" && document.getElementById("token-form").hidden`)
	browsertest.Poll(t, ctx, 8*time.Second, late.ID+" to leave the pending list", rowOf("pending-rows", late.ID)+" === null")
	if got, err := ordersclient.OrderOf(cl.GetOrderWithResponse(t.Context(), late.ID)); err != nil || got.Status != "cancelled" {
		t.Errorf("order %s after the dashboard's cancel: %+v, %v; want cancelled", late.ID, got, err)
	}
	if stored := browsertest.Eval[string](t, ctx, `sessionStorage.getItem("ordertimeout.operator-token") ?? ""`); stored != operatorToken {
		t.Errorf("sessionStorage token %q, want the one typed", stored)
	}
}

// rowOf is a JS expression of the row of order id in the table body tbody.
func rowOf(tbody, id string) string {
	return fmt.Sprintf(`document.querySelector("#%s tr[data-key='%s']")`, tbody, id)
}

// cellsOf is a JS expression of the texts of the cells of rowOf.
func cellsOf(tbody, id string) string {
	return fmt.Sprintf(`[...(%s?.children ?? [])].map(c => c.textContent)`, rowOf(tbody, id))
}
