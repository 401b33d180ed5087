package e2e

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/ordertimeout/ordertimeout/internal/machine"
	"github.com/ordertimeout/ordertimeout/pkg/events"
	"github.com/ordertimeout/ordertimeout/pkg/ordersclient"
	"github.com/ordertimeout/ordertimeout/web/wasm/browsertest"
	"github.com/ordertimeout/ordertimeout/web/wasm/view"
)

// Shape of the dashboard measurement.
const (
	// dashboardPendingDefault is how many pending timeouts it loads;
	// DASHBOARD_PENDING overrides it.
	dashboardPendingDefault = 1_000_000
	// dashboardWindow is the length of each CPU window.
	dashboardWindow = 30 * time.Second
	// dashboardPages is how many pages the last window keeps open.
	dashboardPages = 4
	// dashboardLoadPerSec is the rate of the orders created during the
	// loaded windows, each due 5 s later, so snapshots change all the time
	// and the feed moves.
	dashboardLoadPerSec = 10
)

// TestMeasureDashboardWith1MPending is a measurement, not a test of make
// test: it runs only with DASHBOARD_1M=1 (about 6 minutes; the command and
// its last figures are in web/wasm/README.md). On a stack of its own, it
// writes 1,000,000 pending timeouts into timeoutd's table (COPY) and starts
// timeoutd, which recovers them. Then it opens the dashboard in Chromium
// and reports the time to first data, asserts that the header, the
// histogram and the table show the million, that the countdowns tick and
// that an order expiring meanwhile reaches the feed. Last, it reads the
// CPU time of the timeoutd and Postgres containers (docker stats) and
// timeoutd's transactions on Postgres over windows of dashboardWindow,
// without a page and with one, alternately, idle and under a load of
// orders, then with dashboardPages pages: each connected dashboard's cost
// is the difference.
func TestMeasureDashboardWith1MPending(t *testing.T) {
	if os.Getenv("DASHBOARD_1M") == "" {
		t.Skip("measurement: runs only with DASHBOARD_1M=1 (see web/wasm/README.md)")
	}
	n := dashboardPendingDefault
	if v := os.Getenv("DASHBOARD_PENDING"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 1 {
			t.Fatalf("DASHBOARD_PENDING=%q: want a positive count", v)
		}
	}
	s := startStack(t, stackOptions{})
	s.Stop(t, svcTimeoutd)
	dsn := "postgres://postgres:postgres@" + s.hostPort(svcPostgres) + "/timeouts?sslmode=disable"
	began := time.Now()
	loadPending(t, dsn, n, began)
	report := []string{fmt.Sprintf("%d pending, CPU %s, %s", n, machine.CPUModel(), time.Now().UTC().Format(time.DateOnly)),
		fmt.Sprintf("%d pending timeouts written to Postgres (COPY, INSERT, ANALYZE) in %s", n, time.Since(began).Round(time.Millisecond))}
	began = s.Start(t, svcTimeoutd)
	ready := waitReady(t, s.TimeoutdURL+"/readyz", 5*time.Minute)
	if st := stats(t, s); st.Pending != int64(n) {
		t.Fatalf("timeoutd holds %d pending after recovery, want %d", st.Pending, n)
	}
	report = append(report, fmt.Sprintf("timeoutd recovered them and was ready %s after its start", ready.Sub(began).Round(time.Millisecond)))

	// The pages, each in a browser of its own: a second tab of one
	// headless Chromium stayed in the background and never answered.
	var firstData []time.Duration
	pages := make([]context.Context, dashboardPages)
	for i := range pages {
		pages[i] = browsertest.Chrome(t, browsertest.Desktop)
	}
	open := func(k int) {
		for i, page := range pages {
			url := "about:blank"
			if i < k {
				url = s.TimeoutdURL + "/"
			}
			if got := browsertest.Eval[string](t, page, "location.href"); got == url {
				continue
			}
			browsertest.Do(t, page, 30*time.Second, "navigate to "+url, chromedp.Navigate(url))
			if i < k {
				browsertest.Poll(t, page, 30*time.Second, "the first snapshot", `Number(document.getElementById("app")?.dataset.snapshots) >= 1`)
				firstData = append(firstData, browsertest.FirstData(t, page).Round(time.Millisecond))
			}
		}
	}
	open(1)
	checkMillion(t, pages[0], n)
	checkLive(t, pages[0], s)

	pg, err := pgx.Connect(context.Background(), dsn)
	if err != nil {
		t.Fatalf("connect to timeoutd's database: %v", err)
	}
	defer pg.Close(context.Background())
	type window struct {
		loaded bool
		pages  int
	}
	var results []cpuWindow
	for _, w := range []window{{false, 0}, {false, 1}, {false, 0}, {false, 1}, {true, 0}, {true, 1}, {true, 0}, {true, 1}, {true, dashboardPages}} {
		open(w.pages)
		r := measureCPU(t, s, pg, w.loaded, w.pages)
		results = append(results, r)
		report = append(report, r.String())
	}
	checkLive(t, pages[0], s)
	slices.Sort(firstData)
	report = append(report, fmt.Sprintf("time to first data (navigation start to the first snapshot on screen), %d page loads: min %s, median %s, max %s",
		len(firstData), firstData[0], firstData[len(firstData)/2], firstData[len(firstData)-1]))
	for _, loaded := range []bool{false, true} {
		for _, k := range []int{1, dashboardPages} {
			if d, ok := pageCost(results, loaded, k); ok {
				report = append(report, d)
			}
		}
	}
	t.Log("dashboard measurement:\n\t" + strings.Join(report, "\n\t"))
}

// loadPending writes n pending timeouts into timeoutd's table at dsn, with
// UUIDv7 keys like the orders service's and deadlines spread evenly from
// now+10 min to now+30 h (so a few hours lie beyond the histogram's day):
// COPY into a staging table, then one INSERT through timeoutd's own key
// encoding (the SQL function timeout_key of its migrations).
func loadPending(t *testing.T, dsn string, n int, now time.Time) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatalf("connect to timeoutd's database: %v", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `CREATE TEMP TABLE staging (k text, part smallint, deadline_ns bigint)`); err != nil {
		t.Fatalf("create the staging table: %v", err)
	}
	first, step := now.Add(10*time.Minute), (30*time.Hour-10*time.Minute)/time.Duration(n)
	i := 0
	copied, err := conn.CopyFrom(ctx, pgx.Identifier{"staging"}, []string{"k", "part", "deadline_ns"},
		pgx.CopyFromFunc(func() ([]any, error) {
			if i == n {
				return nil, nil
			}
			key := uuid.Must(uuid.NewV7()).String()
			row := []any{key, int16(events.PartitionOf(key)), first.Add(time.Duration(i) * step).UnixNano()}
			i++
			return row, nil
		}))
	if err != nil || copied != int64(n) {
		t.Fatalf("copy %d rows: copied %d, %v", n, copied, err)
	}
	if _, err := conn.Exec(ctx, `INSERT INTO timeouts (key, version, deadline_ns, part, state)
		SELECT timeout_key(k), 1, deadline_ns, part, 0 FROM staging`); err != nil {
		t.Fatalf("insert the pending timeouts: %v", err)
	}
	if _, err := conn.Exec(ctx, `ANALYZE timeouts`); err != nil {
		t.Fatalf("analyze: %v", err)
	}
}

// checkMillion asserts that the page shows the n pending timeouts: the
// header's count, a histogram of hour-wide bars whose counts add up to n
// with the deadlines beyond a day apart, and a full table.
func checkMillion(t *testing.T, ctx context.Context, n int) {
	t.Helper()
	count := view.FormatCount(int64(n))
	browsertest.Poll(t, ctx, 5*time.Second, "the pending count", `document.getElementById("stat-pending").textContent === "`+count+`"`)
	summary := browsertest.Eval[string](t, ctx, `document.getElementById("hist").getAttribute("aria-label")`)
	if !strings.HasPrefix(summary, "Upcoming expiries of "+count+" pending, bars of 1h: ") || !strings.Contains(summary, "; after 1d ") {
		t.Errorf("histogram summary %q, want %s pending in bars of 1h and some after a day", summary, count)
	}
	sum := browsertest.Eval[int](t, ctx, `[...document.querySelectorAll("#hist rect title")].map(e => Number(e.textContent.split(": ")[1].replaceAll(",", ""))).reduce((a, b) => a + b, 0)`)
	if sum != n {
		t.Errorf("the histogram's bars add up to %d, want %d", sum, n)
	}
	if rows := browsertest.Eval[int](t, ctx, `document.querySelectorAll("#pending-rows tr").length`); rows != 20 {
		t.Errorf("%d rows in the pending table, want 20", rows)
	}
}

// checkLive asserts that the page stays live with a million pending: the
// first countdown ticks, and an order due in 3 s reaches the feed.
func checkLive(t *testing.T, ctx context.Context, s *stack) {
	t.Helper()
	countdown := `document.querySelector("#pending-rows tr .countdown").textContent`
	before := browsertest.Eval[string](t, ctx, countdown)
	browsertest.Poll(t, ctx, 3*time.Second, "the countdown to tick", countdown+" !== "+strconv.Quote(before))
	o := createOrder(t, s.orders(), within(3*time.Second))
	browsertest.Poll(t, ctx, time.Until(o.PayBy)+10*time.Second, o.ID+" in the feed", rowOf("feed-rows", o.ID)+" !== null")
	t.Logf("live: the countdown ticked; %s reached the feed %s after its deadline", o.ID, time.Since(o.PayBy).Round(time.Millisecond))
}

// cpuWindow is what the timeoutd and Postgres containers used in one
// window: CPU-milliseconds per second, and timeoutd's transactions on
// Postgres per second.
type cpuWindow struct {
	loaded             bool
	pages              int
	timeoutd, postgres float64
	xacts              float64
}

func (w cpuWindow) String() string {
	return fmt.Sprintf("%s, %d page(s): timeoutd %.1f CPU-ms/s, postgres %.1f CPU-ms/s, %.1f transactions/s on timeoutd's database",
		w.regime(), w.pages, w.timeoutd, w.postgres, w.xacts)
}

func (w cpuWindow) regime() string {
	if w.loaded {
		return fmt.Sprintf("load (%d orders/s, due 5 s later)", dashboardLoadPerSec)
	}
	return "idle"
}

// pageCost is the cost of k pages in a regime: the mean of its windows
// with k pages minus the mean of those without, divided by k.
func pageCost(results []cpuWindow, loaded bool, k int) (string, bool) {
	mean := func(pages int) (cpuWindow, bool) {
		var m cpuWindow
		n := 0.0
		for _, r := range results {
			if r.loaded == loaded && r.pages == pages {
				m.timeoutd, m.postgres, m.xacts = m.timeoutd+r.timeoutd, m.postgres+r.postgres, m.xacts+r.xacts
				n++
			}
		}
		return cpuWindow{timeoutd: m.timeoutd / n, postgres: m.postgres / n, xacts: m.xacts / n}, n > 0
	}
	with, ok1 := mean(k)
	without, ok0 := mean(0)
	if !ok1 || !ok0 {
		return "", false
	}
	kf := float64(k)
	return fmt.Sprintf("%s: each of %d page(s) costs timeoutd %+.1f CPU-ms/s, postgres %+.1f CPU-ms/s, %+.2f transactions/s",
		cpuWindow{loaded: loaded}.regime(), k, (with.timeoutd-without.timeoutd)/kf, (with.postgres-without.postgres)/kf, (with.xacts-without.xacts)/kf), true
}

// measureCPU reads the CPU time of the timeoutd and Postgres containers
// and the transactions of timeoutd's database (through pg, whose own two
// reads are subtracted) over dashboardWindow, while orders are created at
// dashboardLoadPerSec (each due 5 s later) when loaded.
func measureCPU(t *testing.T, s *stack, pg *pgx.Conn, loaded bool, pages int) cpuWindow {
	t.Helper()
	// Each reading takes about a second (docker stats); each container's
	// rate is over the time between its own readings.
	read := func(name string) (time.Duration, time.Time) { return s.cpuTime(t, name), time.Now() }
	xacts := func() (float64, time.Time) {
		var n float64
		if err := pg.QueryRow(context.Background(),
			`SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = current_database()`).Scan(&n); err != nil {
			t.Fatalf("read pg_stat_database: %v", err)
		}
		return n, time.Now()
	}
	perSec := func(v float64, from, to time.Time) float64 { return v / to.Sub(from).Seconds() }
	x0, xAt0 := xacts()
	td0, tdAt0 := read(svcTimeoutd)
	pg0, pgAt0 := read(svcPostgres)
	if loaded {
		n := int(dashboardWindow.Seconds()) * dashboardLoadPerSec
		load{N: n, Over: dashboardWindow, Workers: 2,
			Deadline: func(time.Time) ordersclient.Deadline { return within(5 * time.Second) }}.run(t, s.orders())
	} else {
		time.Sleep(dashboardWindow)
	}
	td1, tdAt1 := read(svcTimeoutd)
	pg1, pgAt1 := read(svcPostgres)
	// pg_stat_database lags by up to its flush interval (about a second);
	// the windows are long enough for that to be noise.
	x1, xAt1 := xacts()
	w := cpuWindow{loaded: loaded, pages: pages,
		timeoutd: perSec(float64((td1-td0).Microseconds())/1000, tdAt0, tdAt1),
		postgres: perSec(float64((pg1-pg0).Microseconds())/1000, pgAt0, pgAt1),
		xacts:    perSec(x1-x0-2, xAt0, xAt1)}
	t.Log(w)
	return w
}
