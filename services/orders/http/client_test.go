package http_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/ordertimeout/ordertimeout/pkg/events"
	"github.com/ordertimeout/ordertimeout/pkg/ordersclient"
)

// TestGeneratedClientAgreesWithServer drives the handler through
// pkg/ordersclient, the client generated from openapi.json: every request
// the client builds is one the handler accepts, and every answer decodes
// into the client's types. With TestOpenAPIMatchesRoutes (the document has
// the router's routes) this keeps the server, the document and the client
// in step.
func TestGeneratedClientAgreesWithServer(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	srv := httptest.NewServer(e.h)
	t.Cleanup(srv.Close)
	cl, err := ordersclient.NewClientWithResponses(srv.URL, ordersclient.WithBearerToken(token))
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	items := []ordersclient.Item{{SKU: "A-1", Quantity: 2, UnitPriceMinor: 1250}, {SKU: "B-2", Quantity: 1, UnitPriceMinor: 99}}
	key := "idem-1"
	create := ordersclient.CreateOrder{CustomerID: "c-1", Currency: "EUR", Items: items, PayWithin: "15m"}

	r, err := ordersclient.Check(cl.CreateOrderWithResponse(ctx, &ordersclient.CreateOrderParams{IdempotencyKey: &key}, create))
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	o := *r.JSON201
	if !events.ValidKey(o.ID) || o.CustomerID != "c-1" || o.Currency != "EUR" || len(o.Items) != 2 || o.Items[1] != items[1] ||
		o.AmountMinor != 2599 || o.Status != ordersclient.StatusPendingPayment || o.Version != 1 ||
		!o.PayBy.Equal(now.Add(15*time.Minute)) || !o.CreatedAt.Equal(now) || o.CancelReason != "" {
		t.Fatalf("created %+v", o)
	}
	if h := r.Headers201; h == nil || h.Location != "/v1/orders/"+o.ID || h.IdempotentReplayed != "" {
		t.Fatalf("create headers %+v", r.Headers201)
	}
	replay, err := ordersclient.Check(cl.CreateOrderWithResponse(ctx, &ordersclient.CreateOrderParams{IdempotencyKey: &key}, create))
	if err != nil || replay.JSON201.ID != o.ID || replay.Headers201.IdempotentReplayed != "true" {
		t.Fatalf("replayed create: %+v, %v; want the same order, replayed", replay, err)
	}

	payBy := now.Add(time.Hour + 123456*time.Microsecond) // the service keeps microseconds
	o2, err := ordersclient.OrderOf(cl.CreateOrderWithResponse(ctx, nil, ordersclient.CreateOrder{CustomerID: "c-2", Currency: "USD", Items: items[:1], PayBy: payBy}))
	if err != nil || !o2.PayBy.Equal(payBy) {
		t.Fatalf("create with pay_by: %+v, %v; want pay_by %s", o2, err, payBy)
	}
	if got, err := ordersclient.OrderOf(cl.GetOrderWithResponse(ctx, o.ID)); err != nil || got.ID != o.ID || got.Version != 1 {
		t.Fatalf("get: %+v, %v", got, err)
	}

	limit, pending := 1, ordersclient.StatusPendingPayment
	page, err := ordersclient.Check(cl.ListOrdersWithResponse(ctx, &ordersclient.ListOrdersParams{Status: &pending, Limit: &limit}))
	if err != nil || len(page.JSON200.Items) != 1 || page.JSON200.NextCursor == "" {
		t.Fatalf("list page 1: %+v, %v; want one order and a cursor", page, err)
	}
	page2, err := ordersclient.Check(cl.ListOrdersWithResponse(ctx, &ordersclient.ListOrdersParams{Status: &pending, Limit: &limit, Cursor: &page.JSON200.NextCursor}))
	if err != nil || len(page2.JSON200.Items) != 1 || page2.JSON200.Items[0].ID == page.JSON200.Items[0].ID {
		t.Fatalf("list page 2: %+v, %v; want the other order", page2, err)
	}

	ext, err := ordersclient.OrderOf(cl.ExtendOrderWithResponse(ctx, o.ID, ordersclient.Deadline{PayWithin: "30m"}))
	if err != nil || ext.Version != 2 || !ext.PayBy.Equal(now.Add(30*time.Minute)) {
		t.Fatalf("extend: %+v, %v", ext, err)
	}
	paid, err := ordersclient.OrderOf(cl.PayOrderWithResponse(ctx, o.ID))
	if err != nil || paid.Status != ordersclient.StatusPaid {
		t.Fatalf("pay: %+v, %v", paid, err)
	}
	cancelled, err := ordersclient.OrderOf(cl.CancelOrderWithResponse(ctx, o2.ID))
	if err != nil || cancelled.Status != ordersclient.StatusCancelled || cancelled.CancelReason != ordersclient.CancelReasonCustomer {
		t.Fatalf("cancel: %+v, %v", cancelled, err)
	}

	anon, err := ordersclient.NewClientWithResponses(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	problems := []struct {
		name   string
		call   func() (ordersclient.Order, error)
		status int
		typ    string
		check  func(p *ordersclient.Problem) bool
	}{
		{"pay a paid order", func() (ordersclient.Order, error) { return ordersclient.OrderOf(cl.PayOrderWithResponse(ctx, o.ID)) },
			http.StatusConflict, "/problems/conflict", func(p *ordersclient.Problem) bool { return p.OrderStatus == ordersclient.StatusPaid }},
		{"get an unknown order", func() (ordersclient.Order, error) {
			return ordersclient.OrderOf(cl.GetOrderWithResponse(ctx, "no-such-order"))
		},
			http.StatusNotFound, "/problems/not_found", nil},
		{"create without a token", func() (ordersclient.Order, error) {
			return ordersclient.OrderOf(anon.CreateOrderWithResponse(ctx, nil, create))
		}, http.StatusUnauthorized, "/problems/unauthorized", nil},
		{"both pay_within and pay_by", func() (ordersclient.Order, error) {
			both := create
			both.PayBy = payBy
			return ordersclient.OrderOf(cl.CreateOrderWithResponse(ctx, nil, both))
		}, http.StatusBadRequest, "/problems/validation", func(p *ordersclient.Problem) bool {
			return len(p.Errors) == 1 && p.Errors[0].Field == "pay_by" && p.Errors[0].Reason != ""
		}},
	}
	for _, tt := range problems {
		_, err := tt.call()
		var p *ordersclient.Problem
		if !errors.As(err, &p) || p.Status != tt.status || p.Type != tt.typ || p.RequestID == "" || (tt.check != nil && !tt.check(p)) {
			t.Errorf("%s: %+v (%v), want a %d %s problem", tt.name, p, err, tt.status, tt.typ)
		}
	}
}
