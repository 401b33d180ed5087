package ordersclient_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/ordertimeout/ordertimeout/pkg/ordersclient"
)

func TestCheck(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		status      int
		ctype, body string
		want        *ordersclient.Problem // nil: no error
	}{
		{name: "2xx passes", status: 200, ctype: "application/json",
			body: `{"id":"o-1","status":"paid","version":2}`},
		{name: "problem document", status: 409, ctype: "application/problem+json",
			body: `{"type":"/problems/conflict","title":"Illegal transition","status":409,"detail":"order is paid","order_status":"paid"}`,
			want: &ordersclient.Problem{Type: "/problems/conflict", Title: "Illegal transition", Status: 409, Detail: "order is paid", OrderStatus: ordersclient.StatusPaid}},
		{name: "status is the answer's, not the document's", status: 503, ctype: "application/problem+json",
			body: `{"title":"Service unavailable","status":200,"detail":"x"}`,
			want: &ordersclient.Problem{Title: "Service unavailable", Status: 503, Detail: "x"}},
		{name: "not a problem document", status: 502, ctype: "text/html",
			body: "<html>bad gateway</html>\n",
			want: &ordersclient.Problem{Title: "Bad Gateway", Status: 502, Detail: "<html>bad gateway</html>"}},
		{name: "JSON without a title", status: 500, ctype: "application/json",
			body: `{"oops":true}`,
			want: &ordersclient.Problem{Title: "Internal Server Error", Status: 500, Detail: `{"oops":true}`}},
		{name: "long body cut", status: 502, ctype: "text/plain",
			body: strings.Repeat("x", 600),
			want: &ordersclient.Problem{Title: "Bad Gateway", Status: 502, Detail: strings.Repeat("x", 512)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if got := r.Header.Get("Authorization"); got != "Bearer tok" {
					t.Errorf("Authorization = %q, want Bearer tok", got)
				}
				w.Header().Set("Content-Type", tt.ctype)
				w.WriteHeader(tt.status)
				_, _ = w.Write([]byte(tt.body))
			}))
			t.Cleanup(srv.Close)
			c, err := ordersclient.NewClientWithResponses(srv.URL, ordersclient.WithBearerToken("tok"))
			if err != nil {
				t.Fatal(err)
			}
			r, err := ordersclient.Check(c.PayOrderWithResponse(t.Context(), "o-1"))
			if tt.want == nil {
				if err != nil || r.JSON200 == nil || r.JSON200.Status != ordersclient.StatusPaid {
					t.Fatalf("Check = %+v, %v; want the paid order", r, err)
				}
				return
			}
			var p *ordersclient.Problem
			if !errors.As(err, &p) {
				t.Fatalf("err = %v, want a *Problem", err)
			}
			if p.Type != tt.want.Type || p.Title != tt.want.Title || p.Status != tt.want.Status ||
				p.Detail != tt.want.Detail || p.OrderStatus != tt.want.OrderStatus {
				t.Fatalf("problem = %+v, want %+v", p, tt.want)
			}
			if r == nil || r.StatusCode() != tt.status {
				t.Fatalf("answer = %+v, want it passed through", r)
			}
		})
	}
}

func TestCheckPassesCallErrors(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.NotFoundHandler())
	srv.Close() // connection refused from now on
	c, err := ordersclient.NewClientWithResponses(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err = ordersclient.Check(c.GetOrderWithResponse(ctx, "o-1"))
	var p *ordersclient.Problem
	if err == nil || errors.As(err, &p) {
		t.Fatalf("err = %v, want the call's error, not a problem", err)
	}
}

func TestOrderOf(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		status      int
		ctype, body string
		wantErr     string // substring; empty: the order
	}{
		{name: "201 of a create", status: 201, ctype: "application/json", body: `{"id":"o-1","status":"paid"}`},
		{name: "200 of a payment", status: 200, ctype: "application/json", body: `{"id":"o-1","status":"paid"}`},
		{name: "problem", status: 404, ctype: "application/problem+json", body: `{"title":"Order not found","status":404,"detail":"no order o-1"}`,
			wantErr: "ordersclient: 404 Order not found: no order o-1"},
		{name: "2xx that is not JSON", status: 200, ctype: "text/plain", body: "ok", wantErr: `200 answer without an order (Content-Type "text/plain")`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", tt.ctype)
				w.WriteHeader(tt.status)
				_, _ = w.Write([]byte(tt.body))
			}))
			t.Cleanup(srv.Close)
			c, err := ordersclient.NewClientWithResponses(srv.URL)
			if err != nil {
				t.Fatal(err)
			}
			var o ordersclient.Order
			if tt.status == 201 {
				o, err = ordersclient.OrderOf(c.CreateOrderWithResponse(t.Context(), nil, ordersclient.CreateOrder{}))
			} else {
				o, err = ordersclient.OrderOf(c.PayOrderWithResponse(t.Context(), "o-1"))
			}
			if tt.wantErr == "" {
				if err != nil || o.ID != "o-1" || o.Status != ordersclient.StatusPaid {
					t.Fatalf("OrderOf = %+v, %v; want the paid order o-1", o, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("err = %v, want one containing %q", err, tt.wantErr)
			}
		})
	}
}
