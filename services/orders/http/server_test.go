package http_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ordertimeout/ordertimeout/services/orders"
	ordershttp "github.com/ordertimeout/ordertimeout/services/orders/http"
)

const token = "test-token"

var now = time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)

const createBody = `{"customer_id":"c-1","currency":"EUR","items":[{"sku":"A-1","quantity":2,"unit_price_minor":1250}],"pay_within":"15m"}`

type env struct {
	h     http.Handler
	store *fakeStore
}

func newEnv(t *testing.T, ready func(context.Context) error) env {
	t.Helper()
	store := newFakeStore()
	svc, err := orders.NewService(store, orders.ServiceConfig{Now: func() time.Time { return now },
		Limits: orders.Limits{PayWithinMin: time.Second, PayWithinMax: 24 * time.Hour}})
	if err != nil {
		t.Fatal(err)
	}
	h, err := ordershttp.NewHandler(ordershttp.Config{Service: svc, Tokens: []string{"other", token}, Registry: prometheus.NewRegistry(),
		Ready: ready, MaxBodyBytes: 4096, Logger: slog.New(slog.DiscardHandler),
		Stats: func(ctx context.Context) (ordershttp.Stats, error) {
			by, err := store.CountByStatus(ctx)
			return ordershttp.Stats{ByStatus: by, OutboxRows: 3, OutboxOldestAge: time.Second}, err
		}})
	if err != nil {
		t.Fatal(err)
	}
	return env{h: h, store: store}
}

// do sends a request; auth adds the bearer token.
func (e env) do(t *testing.T, method, path, body string, auth bool, hdr ...string) *httptest.ResponseRecorder {
	t.Helper()
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if auth {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	rec := httptest.NewRecorder()
	e.h.ServeHTTP(rec, req)
	return rec
}

// create creates an order through the API and returns it.
func (e env) create(t *testing.T) orders.Order {
	t.Helper()
	rec := e.do(t, "POST", "/v1/orders", createBody, true)
	if rec.Code != http.StatusCreated {
		t.Fatalf("create: %d %s", rec.Code, rec.Body)
	}
	return decode[orders.Order](t, rec)
}

func decode[T any](t *testing.T, rec *httptest.ResponseRecorder) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(rec.Body.Bytes(), &v); err != nil {
		t.Fatalf("decode %s: %v", rec.Body, err)
	}
	return v
}

type problemBody struct {
	Type        string `json:"type"`
	Title       string `json:"title"`
	Status      int    `json:"status"`
	OrderStatus string `json:"order_status"`
	Detail      string `json:"detail"`
	Errors      []struct {
		Field  string `json:"field"`
		Reason string `json:"reason"`
	} `json:"errors"`
	RequestID string `json:"request_id"`
}

func TestRoutes(t *testing.T) {
	t.Parallel()
	long := `{"customer_id":"` + strings.Repeat("x", 5000) + `"}`
	tests := []struct {
		name   string
		method string
		// path may contain {pending} or {paid}, replaced by seeded order ids.
		path   string
		body   string
		auth   bool
		hdr    []string
		status int
		// field is the first errors[].field of a problem ("" = none expected).
		field string
		// state is the "order_status" member of a 409 problem.
		state string
		check func(t *testing.T, rec *httptest.ResponseRecorder)
	}{
		{name: "create", method: "POST", path: "/v1/orders", body: createBody, auth: true, status: 201, check: func(t *testing.T, rec *httptest.ResponseRecorder) {
			o := decode[orders.Order](t, rec)
			if o.Status != orders.StatusPendingPayment || o.Version != 1 || o.AmountMinor != 2500 || !o.PayBy.Equal(now.Add(15*time.Minute)) {
				t.Errorf("order = %+v", o)
			}
			if rec.Header().Get("Location") != "/v1/orders/"+o.ID {
				t.Errorf("Location = %q", rec.Header().Get("Location"))
			}
		}},
		{name: "create with pay_by", method: "POST", path: "/v1/orders", auth: true, status: 201,
			body: `{"customer_id":"c","currency":"USD","items":[{"sku":"s","quantity":1,"unit_price_minor":0}],"pay_by":"2026-11-23T12:00:00+01:00"}`},
		{name: "create without token", method: "POST", path: "/v1/orders", body: createBody, status: 401},
		{name: "create with a wrong token", method: "POST", path: "/v1/orders", body: createBody, hdr: []string{"Authorization", "Bearer nope"}, status: 401},
		{name: "create with basic auth", method: "POST", path: "/v1/orders", body: createBody, hdr: []string{"Authorization", "Basic " + token}, status: 401},
		{name: "create malformed json", method: "POST", path: "/v1/orders", body: `{"customer_id":`, auth: true, status: 400, field: "body"},
		{name: "create empty body", method: "POST", path: "/v1/orders", auth: true, status: 400, field: "body"},
		{name: "create trailing data", method: "POST", path: "/v1/orders", body: createBody + `{}`, auth: true, status: 400, field: "body"},
		{name: "create unknown field", method: "POST", path: "/v1/orders", body: `{"colour":"red"}`, auth: true, status: 400, field: "colour"},
		{name: "create wrong type", method: "POST", path: "/v1/orders", body: `{"items":[{"quantity":"2"}]}`, auth: true, status: 400, field: "items[0].quantity"},
		{name: "create both deadlines", method: "POST", path: "/v1/orders", auth: true, status: 400, field: "pay_by",
			body: `{"customer_id":"c","currency":"EUR","items":[{"sku":"s","quantity":1,"unit_price_minor":1}],"pay_within":"1m","pay_by":"2026-11-23T11:00:00Z"}`},
		{name: "create no deadline", method: "POST", path: "/v1/orders", auth: true, status: 400, field: "pay_within",
			body: `{"customer_id":"c","currency":"EUR","items":[{"sku":"s","quantity":1,"unit_price_minor":1}]}`},
		{name: "create deadline too soon", method: "POST", path: "/v1/orders", auth: true, status: 400, field: "pay_within",
			body: `{"customer_id":"c","currency":"EUR","items":[{"sku":"s","quantity":1,"unit_price_minor":1}],"pay_within":"500ms"}`},
		{name: "create deadline too far", method: "POST", path: "/v1/orders", auth: true, status: 400, field: "pay_within",
			body: `{"customer_id":"c","currency":"EUR","items":[{"sku":"s","quantity":1,"unit_price_minor":1}],"pay_within":"25h"}`},
		{name: "create pay_by in the past", method: "POST", path: "/v1/orders", auth: true, status: 400, field: "pay_by",
			body: `{"customer_id":"c","currency":"EUR","items":[{"sku":"s","quantity":1,"unit_price_minor":1}],"pay_by":"2026-11-23T09:00:00Z"}`},
		{name: "create pay_by not rfc3339", method: "POST", path: "/v1/orders", auth: true, status: 400, field: "pay_by",
			body: `{"customer_id":"c","currency":"EUR","items":[{"sku":"s","quantity":1,"unit_price_minor":1}],"pay_by":"tomorrow"}`},
		{name: "create bad duration", method: "POST", path: "/v1/orders", auth: true, status: 400, field: "pay_within",
			body: `{"customer_id":"c","currency":"EUR","items":[{"sku":"s","quantity":1,"unit_price_minor":1}],"pay_within":"soon"}`},
		{name: "create bad currency", method: "POST", path: "/v1/orders", auth: true, status: 400, field: "currency",
			body: `{"customer_id":"c","currency":"eur","items":[{"sku":"s","quantity":1,"unit_price_minor":1}],"pay_within":"1m"}`},
		{name: "create missing customer", method: "POST", path: "/v1/orders", auth: true, status: 400, field: "customer_id",
			body: `{"currency":"EUR","items":[{"sku":"s","quantity":1,"unit_price_minor":1}],"pay_within":"1m"}`},
		{name: "create no items", method: "POST", path: "/v1/orders", auth: true, status: 400, field: "items",
			body: `{"customer_id":"c","currency":"EUR","items":[],"pay_within":"1m"}`},
		{name: "create zero quantity", method: "POST", path: "/v1/orders", auth: true, status: 400, field: "items[1].quantity",
			body: `{"customer_id":"c","currency":"EUR","items":[{"sku":"s","quantity":1,"unit_price_minor":1},{"sku":"t","quantity":0,"unit_price_minor":1}],"pay_within":"1m"}`},
		{name: "create negative price", method: "POST", path: "/v1/orders", auth: true, status: 400, field: "items[0].unit_price_minor",
			body: `{"customer_id":"c","currency":"EUR","items":[{"sku":"s","quantity":1,"unit_price_minor":-1}],"pay_within":"1m"}`},
		{name: "create amount overflow", method: "POST", path: "/v1/orders", auth: true, status: 400, field: "items[0].unit_price_minor",
			body: `{"customer_id":"c","currency":"EUR","items":[{"sku":"s","quantity":1000000,"unit_price_minor":9223372036854775}],"pay_within":"1m"}`},
		{name: "create missing sku", method: "POST", path: "/v1/orders", auth: true, status: 400, field: "items[0].sku",
			body: `{"customer_id":"c","currency":"EUR","items":[{"quantity":1,"unit_price_minor":1}],"pay_within":"1m"}`},
		{name: "create NUL in customer_id", method: "POST", path: "/v1/orders", auth: true, status: 400, field: "customer_id",
			body: `{"customer_id":"a\u0000b","currency":"EUR","items":[{"sku":"s","quantity":1,"unit_price_minor":1}],"pay_within":"1m"}`},
		{name: "create NUL in sku", method: "POST", path: "/v1/orders", auth: true, status: 400, field: "items[0].sku",
			body: `{"customer_id":"c","currency":"EUR","items":[{"sku":"\u0000","quantity":1,"unit_price_minor":1}],"pay_within":"1m"}`},
		// Hostile inputs (issue 14, section 4): a type error names the
		// element's index, no Go type names appear in field paths, and
		// identifiers refuse invalid UTF-8, control characters and
		// bidirectional overrides.
		{name: "create quantity as a string in the second item", method: "POST", path: "/v1/orders", auth: true, status: 400, field: "items[1].quantity",
			body: `{"customer_id":"c","currency":"EUR","items":[{"sku":"s","quantity":1,"unit_price_minor":1},{"sku":"t","quantity":"2","unit_price_minor":1}],"pay_within":"1m"}`},
		{name: "create fractional quantity in the second item", method: "POST", path: "/v1/orders", auth: true, status: 400, field: "items[1].quantity",
			body: `{"customer_id":"c","currency":"EUR","items":[{"sku":"s","quantity":1,"unit_price_minor":1},{"sku":"t","quantity":1.5,"unit_price_minor":1}],"pay_within":"1m"}`},
		{name: "create price of 2^63", method: "POST", path: "/v1/orders", auth: true, status: 400, field: "items[1].unit_price_minor",
			body: `{"customer_id":"c","currency":"EUR","items":[{"sku":"s","quantity":1,"unit_price_minor":1},{"sku":"t","quantity":1,"unit_price_minor":9223372036854775808}],"pay_within":"1m"}`},
		{name: "create items not an array", method: "POST", path: "/v1/orders", auth: true, status: 400, field: "items",
			body: `{"customer_id":"c","currency":"EUR","items":{"sku":"s"},"pay_within":"1m"}`},
		{name: "create pay_within as a number", method: "POST", path: "/v1/orders", auth: true, status: 400, field: "pay_within",
			body: `{"customer_id":"c","currency":"EUR","items":[{"sku":"s","quantity":1,"unit_price_minor":1}],"pay_within":30}`},
		{name: "create invalid utf-8 in customer_id", method: "POST", path: "/v1/orders", auth: true, status: 400, field: "customer_id",
			body: "{\"customer_id\":\"c\xff\xfe\",\"currency\":\"EUR\",\"items\":[{\"sku\":\"s\",\"quantity\":1,\"unit_price_minor\":1}],\"pay_within\":\"1m\"}"},
		{name: "create lone surrogate in customer_id", method: "POST", path: "/v1/orders", auth: true, status: 400, field: "customer_id",
			body: `{"customer_id":"c\udc00","currency":"EUR","items":[{"sku":"s","quantity":1,"unit_price_minor":1}],"pay_within":"1m"}`},
		{name: "create C0 control in customer_id", method: "POST", path: "/v1/orders", auth: true, status: 400, field: "customer_id",
			body: `{"customer_id":"c\u001b[31m","currency":"EUR","items":[{"sku":"s","quantity":1,"unit_price_minor":1}],"pay_within":"1m"}`},
		{name: "create C1 control in customer_id", method: "POST", path: "/v1/orders", auth: true, status: 400, field: "customer_id",
			body: `{"customer_id":"c\u009b31m","currency":"EUR","items":[{"sku":"s","quantity":1,"unit_price_minor":1}],"pay_within":"1m"}`},
		{name: "create bidi override in customer_id", method: "POST", path: "/v1/orders", auth: true, status: 400, field: "customer_id",
			body: `{"customer_id":"admin\u202egpj.exe","currency":"EUR","items":[{"sku":"s","quantity":1,"unit_price_minor":1}],"pay_within":"1m"}`},
		{name: "create bidi isolate in sku", method: "POST", path: "/v1/orders", auth: true, status: 400, field: "items[0].sku",
			body: `{"customer_id":"c","currency":"EUR","items":[{"sku":"A\u2067B","quantity":1,"unit_price_minor":1}],"pay_within":"1m"}`},
		{name: "create newline in sku", method: "POST", path: "/v1/orders", auth: true, status: 400, field: "items[0].sku",
			body: `{"customer_id":"c","currency":"EUR","items":[{"sku":"A\nB","quantity":1,"unit_price_minor":1}],"pay_within":"1m"}`},
		{name: "create bidi override in Idempotency-Key", method: "POST", path: "/v1/orders", body: createBody, auth: true,
			hdr: []string{"Idempotency-Key", "cart-\u202e42"}, status: 400, field: "Idempotency-Key"},
		{name: "create C1 control in Idempotency-Key", method: "POST", path: "/v1/orders", body: createBody, auth: true,
			hdr: []string{"Idempotency-Key", "cart-\u008542"}, status: 400, field: "Idempotency-Key"},
		{name: "create unicode identifiers", method: "POST", path: "/v1/orders", auth: true, status: 201,
			body: `{"customer_id":"клиент-😀","currency":"EUR","items":[{"sku":"Ünïcödé-א","quantity":1,"unit_price_minor":1}],"pay_within":"1m"}`},
		{name: "list bidi override customer", method: "GET", path: "/v1/orders?customer_id=a%E2%80%AEb", status: 400, field: "customer_id"},
		{name: "create body too large", method: "POST", path: "/v1/orders", body: long, auth: true, status: 413},
		{name: "create not json", method: "POST", path: "/v1/orders", body: createBody, auth: true, hdr: []string{"Content-Type", "text/plain"}, status: 415, field: "Content-Type"},
		{name: "create long idempotency key", method: "POST", path: "/v1/orders", body: createBody, auth: true,
			hdr: []string{"Idempotency-Key", strings.Repeat("k", 256)}, status: 400, field: "Idempotency-Key"},
		{name: "get", method: "GET", path: "/v1/orders/{pending}", status: 200},
		{name: "get unknown", method: "GET", path: "/v1/orders/nope", status: 404},
		{name: "get invalid id", method: "GET", path: "/v1/orders/a.b", status: 404},
		{name: "list", method: "GET", path: "/v1/orders?status=paid&customer_id=c-1", status: 200, check: func(t *testing.T, rec *httptest.ResponseRecorder) {
			p := decode[struct {
				Items      []orders.Order `json:"items"`
				NextCursor *string        `json:"next_cursor"`
			}](t, rec)
			if len(p.Items) != 1 || p.Items[0].Status != orders.StatusPaid || p.NextCursor == nil || *p.NextCursor != "" {
				t.Errorf("page = %s", rec.Body)
			}
		}},
		{name: "list empty", method: "GET", path: "/v1/orders?customer_id=nobody", status: 200, check: func(t *testing.T, rec *httptest.ResponseRecorder) {
			if !strings.Contains(rec.Body.String(), `"items":[]`) {
				t.Errorf("body = %s", rec.Body)
			}
		}},
		{name: "list NUL customer", method: "GET", path: "/v1/orders?customer_id=a%00b", status: 400, field: "customer_id"},
		{name: "list invalid utf-8 customer", method: "GET", path: "/v1/orders?customer_id=%FF", status: 400, field: "customer_id"},
		{name: "list bad status", method: "GET", path: "/v1/orders?status=lost", status: 400, field: "status"},
		{name: "list bad limit", method: "GET", path: "/v1/orders?limit=ten", status: 400, field: "limit"},
		{name: "list zero limit", method: "GET", path: "/v1/orders?limit=0", status: 400, field: "limit"},
		{name: "list limit too large", method: "GET", path: "/v1/orders?limit=501", status: 400, field: "limit"},
		{name: "list bad cursor", method: "GET", path: "/v1/orders?cursor=!!!", status: 400, field: "cursor"},
		{name: "pay", method: "POST", path: "/v1/orders/{pending}/pay", auth: true, status: 200, check: func(t *testing.T, rec *httptest.ResponseRecorder) {
			if o := decode[orders.Order](t, rec); o.Status != orders.StatusPaid || o.Version != 2 {
				t.Errorf("order = %+v", o)
			}
		}},
		{name: "pay paid", method: "POST", path: "/v1/orders/{paid}/pay", auth: true, status: 409, state: "paid"},
		{name: "pay unknown", method: "POST", path: "/v1/orders/nope/pay", auth: true, status: 404},
		{name: "pay without token", method: "POST", path: "/v1/orders/{pending}/pay", status: 401},
		{name: "cancel", method: "POST", path: "/v1/orders/{pending}/cancel", auth: true, status: 200, check: func(t *testing.T, rec *httptest.ResponseRecorder) {
			if o := decode[orders.Order](t, rec); o.Status != orders.StatusCancelled || o.CancelReason != orders.CancelByCustomer {
				t.Errorf("order = %+v", o)
			}
		}},
		{name: "cancel paid", method: "POST", path: "/v1/orders/{paid}/cancel", auth: true, status: 409, state: "paid"},
		{name: "cancel unknown", method: "POST", path: "/v1/orders/nope/cancel", auth: true, status: 404},
		{name: "cancel without token", method: "POST", path: "/v1/orders/{pending}/cancel", status: 401},
		{name: "extend", method: "POST", path: "/v1/orders/{pending}/extend", body: `{"pay_within":"1h"}`, auth: true, status: 200, check: func(t *testing.T, rec *httptest.ResponseRecorder) {
			if o := decode[orders.Order](t, rec); !o.PayBy.Equal(now.Add(time.Hour)) || o.Version != 2 || o.Status != orders.StatusPendingPayment {
				t.Errorf("order = %+v", o)
			}
		}},
		{name: "extend paid", method: "POST", path: "/v1/orders/{paid}/extend", body: `{"pay_within":"1h"}`, auth: true, status: 409, state: "paid"},
		{name: "extend bad deadline", method: "POST", path: "/v1/orders/{pending}/extend", body: `{"pay_by":"yesterday"}`, auth: true, status: 400, field: "pay_by"},
		{name: "extend unknown field", method: "POST", path: "/v1/orders/{pending}/extend", body: `{"pay_in":"1h"}`, auth: true, status: 400, field: "pay_in"},
		{name: "extend unknown", method: "POST", path: "/v1/orders/nope/extend", body: `{"pay_within":"1h"}`, auth: true, status: 404},
		{name: "extend without token", method: "POST", path: "/v1/orders/{pending}/extend", body: `{"pay_within":"1h"}`, status: 401},
		{name: "unknown route", method: "GET", path: "/v2/orders", status: 404},
		{name: "method not allowed", method: "DELETE", path: "/v1/orders/{pending}", status: 405},
		{name: "healthz", method: "GET", path: "/healthz", status: 200},
		{name: "readyz", method: "GET", path: "/readyz", status: 200},
		{name: "openapi", method: "GET", path: "/openapi.json", status: 200, check: func(t *testing.T, rec *httptest.ResponseRecorder) {
			if !json.Valid(rec.Body.Bytes()) || !strings.Contains(rec.Body.String(), `"openapi": "3.1.0"`) {
				t.Errorf("openapi.json is not the document: %.100s", rec.Body)
			}
		}},
		{name: "metrics", method: "GET", path: "/metrics", status: 200, check: func(t *testing.T, rec *httptest.ResponseRecorder) {
			for _, want := range []string{
				`orders_http_requests_total{code="201",method="POST",route="/v1/orders"}`,
				`orders_http_request_duration_seconds_bucket{method="POST",route="/v1/orders/{id}/pay"`,
				`orders_by_status{status="paid"} 1`, `orders_by_status{status="pending_payment"} 1`,
				`orders_outbox_rows 3`, `orders_outbox_lag_seconds 1`,
			} {
				if !strings.Contains(rec.Body.String(), want) {
					t.Errorf("metrics lack %s", want)
				}
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, nil)
			pending, paid := e.create(t), e.create(t)
			if rec := e.do(t, "POST", "/v1/orders/"+paid.ID+"/pay", "", true); rec.Code != 200 {
				t.Fatalf("pay: %d %s", rec.Code, rec.Body)
			}
			path := strings.NewReplacer("{pending}", pending.ID, "{paid}", paid.ID).Replace(tt.path)
			rec := e.do(t, tt.method, path, tt.body, tt.auth, tt.hdr...)
			if rec.Code != tt.status {
				t.Fatalf("%s %s = %d, want %d: %s", tt.method, path, rec.Code, tt.status, rec.Body)
			}
			if rec.Header().Get("X-Request-Id") == "" {
				t.Error("no X-Request-Id")
			}
			if tt.status >= 400 {
				checkProblem(t, rec, tt.field, tt.state)
			}
			if tt.check != nil {
				tt.check(t, rec)
			}
		})
	}
}

// checkProblem checks a problem+json body: its members, the numeric status,
// the named field and, for a conflict, the current state in "order_status".
func checkProblem(t *testing.T, rec *httptest.ResponseRecorder, field, state string) {
	t.Helper()
	if ct := rec.Header().Get("Content-Type"); ct != "application/problem+json" {
		t.Errorf("Content-Type = %q", ct)
	}
	p := decode[problemBody](t, rec)
	if p.Type == "" || p.Title == "" || p.Detail == "" || p.RequestID == "" {
		t.Errorf("incomplete problem %s", rec.Body)
	}
	if p.Status != rec.Code || p.OrderStatus != state {
		t.Errorf("problem status, order_status = %d, %q; want %d, %q", p.Status, p.OrderStatus, rec.Code, state)
	}
	if field != "" && (len(p.Errors) == 0 || p.Errors[0].Field != field || p.Errors[0].Reason == "") {
		t.Errorf("problem errors = %+v, want field %q", p.Errors, field)
	}
	if strings.Contains(rec.Body.String(), token) {
		t.Error("the token leaked into the body")
	}
}

func TestReadyzReportsDependencyFailure(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(context.Context) error { return errors.New("postgres: down") })
	rec := e.do(t, "GET", "/readyz", "", false)
	if rec.Code != http.StatusServiceUnavailable || !strings.Contains(rec.Body.String(), "postgres: down") {
		t.Fatalf("readyz = %d %s", rec.Code, rec.Body)
	}
}

func TestRequestIDIsKeptOrMade(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	tests := []struct{ name, in, want string }{
		{"kept", "abc-123", "abc-123"},
		{"made when unsafe", "a b\n", ""},
		{"made when absent", "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			rec := e.do(t, "GET", "/v1/orders/nope", "", false, "X-Request-Id", tt.in)
			got := rec.Header().Get("X-Request-Id")
			p := decode[problemBody](t, rec)
			if got == "" || p.RequestID != got || (tt.want != "" && got != tt.want) || (tt.want == "" && got == tt.in) {
				t.Fatalf("request id = %q (problem %q), want %q", got, p.RequestID, tt.want)
			}
		})
	}
}

func TestIdempotentCreate(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	first := e.do(t, "POST", "/v1/orders", createBody, true, "Idempotency-Key", "k-1")
	// The same request with other whitespace and field order is the same.
	same := `{"pay_within":"15m", "items":[{"unit_price_minor":1250,"quantity":2,"sku":"A-1"}],"currency":"EUR","customer_id":"c-1"}`
	retry := e.do(t, "POST", "/v1/orders", same, true, "Idempotency-Key", "k-1")
	other := e.do(t, "POST", "/v1/orders", strings.Replace(createBody, "15m", "20m", 1), true, "Idempotency-Key", "k-1")
	if first.Code != 201 || retry.Code != 201 || first.Body.String() != retry.Body.String() || retry.Header().Get("Idempotent-Replayed") != "true" {
		t.Fatalf("retry: %d %s / %d %s", first.Code, first.Body, retry.Code, retry.Body)
	}
	if other.Code != http.StatusUnprocessableEntity {
		t.Fatalf("other body under the same key = %d %s, want 422", other.Code, other.Body)
	}
	checkProblem(t, other, "", "")
	if n := len(e.store.orders); n != 1 {
		t.Fatalf("%d orders stored, want 1", n)
	}
}

func TestListPaginates(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	want := map[string]bool{}
	for range 5 {
		want[e.create(t).ID] = true
	}
	seen := map[string]bool{}
	cursor, last := "", "~"
	for page := 0; ; page++ {
		rec := e.do(t, "GET", "/v1/orders?limit=2&cursor="+cursor, "", false)
		if rec.Code != 200 || page > 3 {
			t.Fatalf("page %d: %d %s", page, rec.Code, rec.Body)
		}
		p := decode[struct {
			Items      []orders.Order `json:"items"`
			NextCursor string         `json:"next_cursor"`
		}](t, rec)
		for _, o := range p.Items {
			if seen[o.ID] || o.ID >= last {
				t.Fatalf("order %s repeated or out of order", o.ID)
			}
			seen[o.ID], last = true, o.ID
		}
		if cursor = p.NextCursor; cursor == "" {
			break
		}
	}
	if len(seen) != len(want) {
		t.Fatalf("listed %d orders, want %d", len(seen), len(want))
	}
}

func TestAccessLogNamesTheRouteAndNeverTheToken(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	svc, err := orders.NewService(newFakeStore(), orders.ServiceConfig{Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	h, err := ordershttp.NewHandler(ordershttp.Config{Service: svc, Tokens: []string{token}, Registry: prometheus.NewRegistry(),
		Logger: slog.New(slog.NewJSONHandler(&buf, nil))})
	if err != nil {
		t.Fatal(err)
	}
	e := env{h: h}
	o := e.create(t)
	e.do(t, "POST", "/v1/orders/"+o.ID+"/pay", "", false, "Authorization", "Bearer wrong-secret")
	var lines []map[string]any
	for _, l := range bytes.Split(bytes.TrimSpace(buf.Bytes()), []byte("\n")) {
		var m map[string]any
		if err := json.Unmarshal(l, &m); err != nil {
			t.Fatalf("log line is not JSON: %s", l)
		}
		lines = append(lines, m)
	}
	if len(lines) != 2 || lines[0]["route"] != "/v1/orders" || lines[1]["route"] != "/v1/orders/{id}/pay" ||
		lines[1]["status"] != float64(401) || lines[0]["request_id"] == "" {
		t.Fatalf("access log = %v", lines)
	}
	if bytes.Contains(buf.Bytes(), []byte(token)) || bytes.Contains(buf.Bytes(), []byte("wrong-secret")) {
		t.Fatal("a token reached the log")
	}
}

func TestUnexpectedFailuresAreGeneric500s(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		fail func() error
	}{
		{"store error", func() error { return errors.New("pq: password authentication failed for user secret") }},
		{"panic", func() error { panic("boom: secret") }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, nil)
			e.store.failGet = tt.fail
			rec := e.do(t, "GET", "/v1/orders/o-1", "", false)
			if rec.Code != http.StatusInternalServerError {
				t.Fatalf("status = %d %s", rec.Code, rec.Body)
			}
			checkProblem(t, rec, "", "")
			if strings.Contains(rec.Body.String(), "secret") {
				t.Fatalf("the cause leaked to the client: %s", rec.Body)
			}
		})
	}
}

func TestUnavailableDatabaseIs503WithRetryAfter(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	e.store.failGet = func() error {
		return fmt.Errorf("%w: get order: dial tcp 10.0.0.1:5432: connect: connection refused secret", orders.ErrUnavailable)
	}
	rec := e.do(t, "GET", "/v1/orders/o-1", "", false)
	if rec.Code != http.StatusServiceUnavailable {
		t.Fatalf("status = %d %s", rec.Code, rec.Body)
	}
	if got := rec.Header().Get("Retry-After"); got != "1" {
		t.Errorf("Retry-After = %q, want 1", got)
	}
	checkProblem(t, rec, "", "")
	if p := decode[problemBody](t, rec); p.Type != "/problems/unavailable" {
		t.Errorf("type = %q", p.Type)
	}
	if strings.Contains(rec.Body.String(), "secret") {
		t.Fatalf("the cause leaked to the client: %s", rec.Body)
	}
}

// TestPayAfterTheDeadlineIsRefused: a payment once pay_by has passed (the
// default grace is zero) answers 409 /problems/payment_deadline_passed
// naming the deadline, although the order is still pending (its cancel event
// has not arrived), and changes nothing.
func TestPayAfterTheDeadlineIsRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	o := e.create(t)
	o.PayBy = now.Add(-300 * time.Millisecond)
	e.store.mu.Lock()
	e.store.orders[o.ID] = o
	changes := len(e.store.changes)
	e.store.mu.Unlock()
	rec := e.do(t, "POST", "/v1/orders/"+o.ID+"/pay", "", true)
	if rec.Code != http.StatusConflict {
		t.Fatalf("pay after pay_by = %d %s, want 409", rec.Code, rec.Body)
	}
	checkProblem(t, rec, "", string(orders.StatusPendingPayment))
	p := decode[struct {
		problemBody
		PayBy time.Time `json:"pay_by"`
	}](t, rec)
	if p.Type != "/problems/payment_deadline_passed" || !p.PayBy.Equal(o.PayBy) || !strings.Contains(p.Detail, o.PayBy.Format(time.RFC3339Nano)) {
		t.Fatalf("problem = %s, want payment_deadline_passed naming %s", rec.Body, o.PayBy)
	}
	e.store.mu.Lock()
	defer e.store.mu.Unlock()
	if got := e.store.orders[o.ID]; got.Status != orders.StatusPendingPayment || len(e.store.changes) != changes {
		t.Fatalf("the refused payment changed the order: %+v", got)
	}
}
