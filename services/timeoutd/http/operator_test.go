package http

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/ordertimeout/ordertimeout/services/timeoutd/api"
)

// answer is what the fake orders API answers.
type answer struct {
	status int
	ctype  string
	body   string
}

// fakeOrders records the calls it gets and answers with a fixed answer.
type fakeOrders struct {
	answer
	mu    sync.Mutex
	calls []string // "METHOD path auth body"
}

func (f *fakeOrders) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	f.mu.Lock()
	f.calls = append(f.calls, r.Method+" "+r.URL.Path+" "+r.Header.Get("Authorization")+" "+string(b))
	f.mu.Unlock()
	w.Header().Set("Content-Type", f.ctype)
	w.WriteHeader(f.status)
	_, _ = io.WriteString(w, f.body)
}

// newOperatorServer returns timeoutd's handler with op forwarding to a
// fake orders API (or to ordersURL when set), and the logs it writes.
func newOperatorServer(t *testing.T, op Operator) (http.Handler, *bytes.Buffer) {
	t.Helper()
	logs := &bytes.Buffer{}
	h, err := NewHandler(Config{Service: newFake(), Operator: op, Logger: slog.New(slog.NewJSONHandler(logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	return h, logs
}

func TestOperatorActions(t *testing.T) {
	t.Parallel()
	const order = `{"id":"o-1","status":"pending_payment","version":2}`
	const conflict = `{"type":"/problems/conflict","title":"Illegal transition","status":409,"detail":"order is paid"}`
	tests := []struct {
		name             string
		disabled         bool // no operator token
		unreachable      bool
		ordersPath       string // appended to the fake orders API's URL in OrdersURL
		path, auth, body string
		orders           answer
		status           int
		ctype            string
		wantBody         string // substring of the answer
		wantCall         string // the call orders gets; empty: none
	}{
		{name: "cancel forwarded with the orders token", path: "/api/v1/orders/o-1/cancel", auth: "Bearer op-secret",
			orders: answer{status: 200, ctype: "application/json", body: order}, status: 200, ctype: "application/json",
			wantBody: order, wantCall: "POST /v1/orders/o-1/cancel Bearer orders-secret "},
		{name: "extend passes the body through", path: "/api/v1/orders/o-1/extend", auth: "Bearer op-secret", body: `{"pay_within":"10m"}`,
			orders: answer{status: 200, ctype: "application/json", body: order}, status: 200, ctype: "application/json",
			wantBody: order, wantCall: `POST /v1/orders/o-1/extend Bearer orders-secret {"pay_within":"10m"}`},
		{name: "orders URL with a trailing slash", ordersPath: "/", path: "/api/v1/orders/o-1/cancel", auth: "Bearer op-secret",
			orders: answer{status: 200, ctype: "application/json", body: order}, status: 200, ctype: "application/json",
			wantBody: order, wantCall: "POST /v1/orders/o-1/cancel Bearer orders-secret "},
		{name: "conflict relayed", path: "/api/v1/orders/o-1/cancel", auth: "Bearer op-secret",
			orders: answer{status: 409, ctype: "application/problem+json", body: conflict}, status: 409, ctype: "application/problem+json",
			wantBody: "order is paid", wantCall: "POST /v1/orders/o-1/cancel Bearer orders-secret "},
		{name: "validation error relayed", path: "/api/v1/orders/o-1/extend", auth: "Bearer op-secret", body: `{"pay_within":"x"}`,
			orders: answer{status: 400, ctype: "application/problem+json", body: `{"status":400,"errors":[{"field":"pay_within"}]}`},
			status: 400, ctype: "application/problem+json", wantBody: "pay_within", wantCall: `POST /v1/orders/o-1/extend Bearer orders-secret {"pay_within":"x"}`},
		{name: "orders refusing timeoutd's token is a 502", path: "/api/v1/orders/o-1/cancel", auth: "Bearer op-secret",
			orders: answer{status: 401, ctype: "application/problem+json", body: `{"status":401}`}, status: 502, ctype: "application/problem+json",
			wantBody: "TIMEOUTD_ORDERS_TOKEN", wantCall: "POST /v1/orders/o-1/cancel Bearer orders-secret "},
		{name: "no token", path: "/api/v1/orders/o-1/cancel", status: 401, ctype: "application/problem+json", wantBody: "operator bearer token"},
		{name: "wrong token", path: "/api/v1/orders/o-1/cancel", auth: "Bearer op-secreT", status: 401, ctype: "application/problem+json", wantBody: "operator bearer token"},
		{name: "not a bearer token", path: "/api/v1/orders/o-1/cancel", auth: "op-secret", status: 401, ctype: "application/problem+json", wantBody: "operator bearer token"},
		{name: "bad id", path: "/api/v1/orders/o.1/cancel", auth: "Bearer op-secret", status: 400, ctype: "application/problem+json", wantBody: `"field":"id"`},
		{name: "body too large", path: "/api/v1/orders/o-1/extend", auth: "Bearer op-secret", body: strings.Repeat("x", operatorBodyMax+1),
			status: 413, ctype: "application/problem+json", wantBody: "64 KiB"},
		{name: "orders unreachable", unreachable: true, path: "/api/v1/orders/o-1/cancel", auth: "Bearer op-secret",
			status: 502, ctype: "application/problem+json", wantBody: `"type":"/problems/orders_unreachable"`},
		{name: "disabled", disabled: true, path: "/api/v1/orders/o-1/cancel", auth: "Bearer op-secret",
			status: 404, ctype: "application/problem+json", wantBody: "disabled"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			orders := &fakeOrders{answer: tt.orders}
			ts := httptest.NewServer(orders)
			t.Cleanup(ts.Close)
			op := Operator{Token: "op-secret", OrdersURL: ts.URL + tt.ordersPath, OrdersToken: "orders-secret"}
			if tt.unreachable {
				dead := httptest.NewServer(http.NotFoundHandler())
				op.OrdersURL = dead.URL
				dead.Close() // connection refused from now on
			}
			if tt.disabled {
				op = Operator{}
			}
			h, logs := newOperatorServer(t, op)
			req := httptest.NewRequest(http.MethodPost, tt.path, strings.NewReader(tt.body))
			if tt.auth != "" {
				req.Header.Set("Authorization", tt.auth)
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code != tt.status {
				t.Fatalf("status = %d, want %d; body %s", rec.Code, tt.status, rec.Body)
			}
			if ct := rec.Header().Get("Content-Type"); ct != tt.ctype {
				t.Errorf("Content-Type = %q, want %q", ct, tt.ctype)
			}
			if !strings.Contains(rec.Body.String(), tt.wantBody) {
				t.Errorf("body = %s, want it to contain %s", rec.Body, tt.wantBody)
			}
			orders.mu.Lock()
			defer orders.mu.Unlock()
			switch {
			case tt.wantCall == "" && len(orders.calls) > 0:
				t.Errorf("orders got %q, want no call", orders.calls)
			case tt.wantCall != "" && (len(orders.calls) != 1 || orders.calls[0] != tt.wantCall):
				t.Errorf("orders got %q, want [%q]", orders.calls, tt.wantCall)
			}
			for _, secret := range []string{"op-secret", "orders-secret"} {
				if strings.Contains(logs.String(), secret) {
					t.Errorf("logs contain the token %q: %s", secret, logs)
				}
			}
		})
	}
}

func TestStatsTellOperatorActions(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		op   Operator
		want bool
	}{
		{"read-only by default", Operator{}, false},
		{"enabled with a token", Operator{Token: "t", OrdersURL: "http://orders:8081", OrdersToken: "o"}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h, _ := newOperatorServer(t, tt.op)
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/api/v1/stats", nil))
			var st api.Stats
			if err := json.Unmarshal(rec.Body.Bytes(), &st); err != nil {
				t.Fatal(err)
			}
			if st.OperatorActions != tt.want {
				t.Fatalf("operator_actions = %v, want %v", st.OperatorActions, tt.want)
			}
		})
	}
}

func TestOperatorNeedsOrdersURL(t *testing.T) {
	t.Parallel()
	if _, err := NewHandler(Config{Service: newFake(), Operator: Operator{Token: "t"}}); err == nil || !strings.Contains(err.Error(), "OrdersURL") {
		t.Fatalf("err = %v, want one naming OrdersURL", err)
	}
}
