package daemon_test

import (
	"context"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ordertimeout/ordertimeout/internal/testinfra"
)

// outageApp is the daemon connected to its database through a dbProxy.
type outageApp struct {
	*app
	proxy *dbProxy
	// db is the database's URL without the proxy.
	db string
}

// startBehindProxy starts the daemon with its database behind a dbProxy and
// a connect_timeout of 1 s: a request that meets the proxy down waits that
// long for a connection.
func startBehindProxy(t *testing.T) *outageApp {
	t.Helper()
	db := testinfra.Postgres(t)
	u, err := url.Parse(db)
	if err != nil {
		t.Fatal(err)
	}
	p := newDBProxy(t, u.Host)
	u.Host = p.Addr()
	q := u.Query()
	q.Set("connect_timeout", "1")
	u.RawQuery = q.Encode()
	a := start(t, func(env map[string]string) { env["ORDERS_DATABASE_URL"] = u.String() })
	return &outageApp{app: a, proxy: p, db: db}
}

// timed is a.call that also returns how long the answer took.
func (a *app) timed(t *testing.T, method, path, body string, hdr ...string) (int, http.Header, time.Duration) {
	t.Helper()
	begin := time.Now()
	code, h, _ := a.call(t, method, path, body, hdr...)
	return code, h, time.Since(begin)
}

// metric returns the value of the sample name (without labels) on /metrics.
func (a *app) metric(t *testing.T, name string) float64 {
	t.Helper()
	_, _, body := a.call(t, "GET", "/metrics", "")
	for line := range strings.Lines(string(body)) {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil {
				t.Fatal(err)
			}
			return f
		}
	}
	t.Fatalf("no %s on /metrics", name)
	return 0
}

// ordersOf counts the orders of customer in the database, without the proxy.
func (a *outageApp) ordersOf(t *testing.T, customer string) (n int, ids []string) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, a.db)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `SELECT id FROM orders WHERE customer_id = $1`, customer)
	if err != nil {
		t.Fatal(err)
	}
	ids, err = pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return len(ids), ids
}

func body(customer string) string {
	return strings.Replace(createBody, `"c-1"`, `"`+customer+`"`, 1)
}

// TestDatabaseDownFailsFast: once an operation found the database down,
// create, pay, cancel, extend and get answer 503 with Retry-After at once,
// /readyz says so, orders_database_available is 0 and
// orders_database_refused_total counts the refusals; when the database is
// back, the next probe (within ProbeInterval) reopens the gate.
func TestDatabaseDownFailsFast(t *testing.T) {
	t.Parallel()
	a := startBehindProxy(t)
	o := a.order(t, "POST", "/v1/orders", createBody, http.StatusCreated)

	a.proxy.setDown(true)
	code, _, first := a.timed(t, "POST", "/v1/orders", createBody)
	if code != http.StatusServiceUnavailable {
		t.Fatalf("create with the database down = %d, want 503", code)
	}
	requests := []struct{ method, path, body string }{
		{"POST", "/v1/orders", createBody},
		{"POST", "/v1/orders/" + o.ID + "/pay", ""},
		{"POST", "/v1/orders/" + o.ID + "/cancel", ""},
		{"POST", "/v1/orders/" + o.ID + "/extend", `{"pay_within":"1h"}`},
		{"GET", "/v1/orders/" + o.ID, ""},
	}
	var took []time.Duration
	for range 4 {
		for _, r := range requests {
			code, h, d := a.timed(t, r.method, r.path, r.body)
			if code != http.StatusServiceUnavailable || h.Get("Retry-After") != "1" {
				t.Fatalf("%s %s with the database known down = %d, Retry-After %q; want 503, 1", r.method, r.path, code, h.Get("Retry-After"))
			}
			took = append(took, d)
		}
	}
	slices.Sort(took)
	t.Logf("database down: the first request took %s; the %d next ones: median %s, max %s",
		first, len(took), took[len(took)/2], took[len(took)-1])
	// The probe of an interval may take a request's turn and wait for the
	// connect_timeout (1 s); every other request is refused without trying.
	if fast := took[len(took)-2]; fast > 100*time.Millisecond {
		t.Errorf("refusals took up to %s, want well under a second", fast)
	}
	if code, _, _ := a.call(t, "GET", "/readyz", ""); code != http.StatusServiceUnavailable {
		t.Errorf("/readyz with the database down = %d, want 503", code)
	}
	if v := a.metric(t, "orders_database_available"); v != 0 {
		t.Errorf("orders_database_available = %v while down, want 0", v)
	}
	if v := a.metric(t, "orders_database_refused_total"); v < float64(len(took)-1) {
		t.Errorf("orders_database_refused_total = %v, want at least %d", v, len(took)-1)
	}

	a.proxy.setDown(false)
	back := time.Now()
	waitFor(t, "a create once the database is back", func() (bool, error) {
		code, _, _ := a.call(t, "POST", "/v1/orders", createBody)
		return code == http.StatusCreated, nil
	})
	t.Logf("database back: the first create succeeded %s later", time.Since(back).Round(time.Millisecond))
	if v := a.metric(t, "orders_database_available"); v != 1 {
		t.Errorf("orders_database_available = %v once back, want 1", v)
	}
}

// TestIdempotentCreateAcrossAnOutage: a create refused with 503 while the
// database is down, retried with its Idempotency-Key until it succeeds,
// creates one order; a create whose commit happened but whose answer was
// lost (the client timed out), retried with its key, returns that order
// (Idempotent-Replayed) instead of creating a second one.
func TestIdempotentCreateAcrossAnOutage(t *testing.T) {
	t.Parallel()
	a := startBehindProxy(t)

	t.Run("refused while down", func(t *testing.T) {
		a.proxy.setDown(true)
		for range 3 {
			if code, _, _ := a.call(t, "POST", "/v1/orders", body("c-down"), "Idempotency-Key", "k-down"); code != http.StatusServiceUnavailable {
				t.Fatalf("create with the database down = %d, want 503", code)
			}
		}
		a.proxy.setDown(false)
		var id string
		waitFor(t, "the retried create", func() (bool, error) {
			code, h, _ := a.call(t, "POST", "/v1/orders", body("c-down"), "Idempotency-Key", "k-down")
			id = strings.TrimPrefix(h.Get("Location"), "/v1/orders/")
			return code == http.StatusCreated, nil
		})
		code, h, _ := a.call(t, "POST", "/v1/orders", body("c-down"), "Idempotency-Key", "k-down")
		if code != http.StatusCreated || h.Get("Idempotent-Replayed") != "true" || h.Get("Location") != "/v1/orders/"+id {
			t.Errorf("a further retry = %d, replayed %q, %s; want 201, true, /v1/orders/%s", code, h.Get("Idempotent-Replayed"), h.Get("Location"), id)
		}
		if n, ids := a.ordersOf(t, "c-down"); n != 1 || ids[0] != id {
			t.Errorf("orders of c-down: %v, want [%s]", ids, id)
		}
	})

	t.Run("answer lost after the commit", func(t *testing.T) {
		// The key travels in the Bind of the claim, every time.
		a.proxy.loseCommitAfter("k-lost")
		req, err := http.NewRequest("POST", a.base+"/v1/orders", strings.NewReader(body("c-lost")))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", "k-lost")
		client := &http.Client{Timeout: time.Second}
		if resp, err := client.Do(req); err == nil {
			resp.Body.Close()
			t.Fatalf("create whose commit answer is lost = %d, want a client timeout", resp.StatusCode)
		}
		n, ids := a.ordersOf(t, "c-lost")
		if n != 1 {
			t.Fatalf("orders of c-lost after the lost answer: %v, want the one committed", ids)
		}
		code, h, _ := a.call(t, "POST", "/v1/orders", body("c-lost"), "Idempotency-Key", "k-lost")
		if code != http.StatusCreated || h.Get("Idempotent-Replayed") != "true" || h.Get("Location") != "/v1/orders/"+ids[0] {
			t.Errorf("the retry = %d, replayed %q, %s; want 201, true, /v1/orders/%s", code, h.Get("Idempotent-Replayed"), h.Get("Location"), ids[0])
		}
		if n, ids := a.ordersOf(t, "c-lost"); n != 1 {
			t.Errorf("orders of c-lost after the retry: %v, want one", ids)
		}
	})
}
