package e2e

import (
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/ordertimeout/ordertimeout/e2e/ordersapi"
	"github.com/ordertimeout/ordertimeout/web/wasm/browsertest"
)

// dashboardAppearBound is how soon after its creation an order must show
// in the dashboard's pending list (issue 6).
const dashboardAppearBound = 2 * time.Second

// Scenario: the dashboard in a real Chromium against the running stack.
// Orders created through the orders API appear in the pending list within
// 2 s, their countdowns decrease on the client, and after their deadline
// they leave the pending list and show in the expiry feed. The test runs
// on a stack of its own, so the pending list holds only its orders, and
// saves a screenshot (build/screenshots/dashboard-e2e.png).
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
		watched []ordersapi.Order
		created []time.Time
	)
	for i := range 30 {
		d := 7*time.Second + time.Duration(i)*time.Second
		if i >= 4 {
			d = 20*time.Second + time.Duration((i-4)*(i-4))*4*time.Second
		}
		o := createOrder(t, cl, within(d))
		if i < 4 {
			watched = append(watched, o)
			created = append(created, time.Now())
		}
	}
	for i, o := range watched {
		left := dashboardAppearBound - time.Since(created[i])
		browsertest.Poll(t, ctx, max(left, 50*time.Millisecond), o.ID+" in the pending list within 2 s", rowOf("pending-rows", o.ID)+" !== null")
	}
	t.Logf("all watched orders in the dashboard %s after the first one's creation", time.Since(created[0]).Round(time.Millisecond))
	browsertest.Poll(t, ctx, dashboardAppearBound, "the pending count of 30", `document.getElementById("stat-pending").textContent === "30"`)

	for _, o := range watched {
		cells := browsertest.Eval[[]string](t, ctx, cellsOf("pending-rows", o.ID))
		// order id, version, deadline (UTC), countdown
		if len(cells) != 4 || cells[1] != strconv.FormatInt(o.Version, 10) || cells[2] != o.PayBy.UTC().Format("15:04:05.000") {
			t.Errorf("row of %s = %q, want version %d and deadline %s", o.ID, cells, o.Version, o.PayBy.UTC().Format("15:04:05.000"))
		}
	}

	first := watched[0]
	countdown := cellsOf("pending-rows", first.ID) + "[3]"
	before := browsertest.Eval[string](t, ctx, countdown)
	browsertest.Poll(t, ctx, 3*time.Second, "the countdown to tick", countdown+" !== "+strconv.Quote(before))
	after := browsertest.Eval[string](t, ctx, countdown)
	b, a := browsertest.CountdownSeconds(t, before), browsertest.CountdownSeconds(t, after)
	if a >= b || time.Duration(b)*time.Second > time.Until(first.PayBy)+2*time.Second {
		t.Errorf("countdown of %s went from %q to %q with %s left", first.ID, before, after, time.Until(first.PayBy).Round(time.Millisecond))
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
	if got := browsertest.Eval[string](t, ctx, `document.getElementById("conn").dataset.state`); got != "live" {
		t.Errorf("connection state %q at the end, want live", got)
	}
	browsertest.Screenshot(t, ctx, "dashboard-e2e.png")
}

// rowOf is a JS expression of the row of order id in the table body tbody.
func rowOf(tbody, id string) string {
	return fmt.Sprintf(`document.querySelector("#%s tr[data-key='%s']")`, tbody, id)
}

// cellsOf is a JS expression of the texts of the cells of rowOf.
func cellsOf(tbody, id string) string {
	return fmt.Sprintf(`[...(%s?.children ?? [])].map(c => c.textContent)`, rowOf(tbody, id))
}
