package ordersclient_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/ordertimeout/ordertimeout/pkg/ordersclient"
)

// fakeOrders answers two calls as the orders service does: a create, and
// a payment that comes after the deadline.
func fakeOrders() *httptest.Server {
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.Header.Get("Authorization") != "Bearer secret":
			w.Header().Set("Content-Type", "application/problem+json")
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = io.WriteString(w, `{"type":"/problems/unauthorized","title":"Unauthorized","status":401,"detail":"a valid bearer token is required"}`)
		case r.Method == http.MethodPost && r.URL.Path == "/v1/orders":
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Location", "/v1/orders/ord-1")
			w.WriteHeader(http.StatusCreated)
			_, _ = io.WriteString(w, `{"id":"ord-1","customer_id":"c-42","currency":"EUR","items":[{"sku":"A-1","quantity":2,"unit_price_minor":1250}],`+
				`"amount_minor":2500,"status":"pending_payment","version":1,"pay_by":"2030-01-02T03:19:05Z","created_at":"2030-01-02T03:04:05Z","updated_at":"2030-01-02T03:04:05Z"}`)
		case r.Method == http.MethodPost && r.URL.Path == "/v1/orders/ord-1/pay":
			w.Header().Set("Content-Type", "application/problem+json")
			w.WriteHeader(http.StatusConflict)
			_, _ = io.WriteString(w, `{"type":"/problems/payment_deadline_passed","title":"Payment deadline passed","status":409,`+
				`"order_status":"pending_payment","pay_by":"2030-01-02T03:19:05Z","detail":"the payment deadline has passed"}`)
		default:
			http.NotFound(w, r)
		}
	}))
}

// Create an order with 15 minutes to pay, then pay it: here the payment
// comes too late and the service refuses it with a problem document.
func Example() {
	srv := fakeOrders() // the orders service, e.g. http://orders:8081
	defer srv.Close()
	ctx := context.Background()

	c, err := ordersclient.NewClientWithResponses(srv.URL,
		ordersclient.WithBearerToken("secret"),
		ordersclient.WithHTTPClient(&http.Client{Timeout: 10 * time.Second}))
	if err != nil {
		panic(err)
	}
	o, err := ordersclient.OrderOf(c.CreateOrderWithResponse(ctx, nil, ordersclient.CreateOrder{
		CustomerID: "c-42",
		Currency:   "EUR",
		Items:      []ordersclient.Item{{SKU: "A-1", Quantity: 2, UnitPriceMinor: 1250}},
		PayWithin:  "15m",
	}))
	if err != nil {
		panic(err)
	}
	fmt.Println(o.ID, o.Status, o.AmountMinor, o.PayBy.Format(time.RFC3339))

	_, err = ordersclient.OrderOf(c.PayOrderWithResponse(ctx, o.ID))
	var p *ordersclient.Problem
	if errors.As(err, &p) && p.Status == http.StatusConflict {
		fmt.Println(p.Type, p.OrderStatus)
	}
	fmt.Println(err)
	// Output:
	// ord-1 pending_payment 2500 2030-01-02T03:19:05Z
	// /problems/payment_deadline_passed pending_payment
	// ordersclient: 409 Payment deadline passed: the payment deadline has passed
}

// Without a bearer token the service refuses a create; Check turns the
// answer into a *Problem.
func ExampleCheck() {
	srv := fakeOrders()
	defer srv.Close()

	anon, _ := ordersclient.NewClientWithResponses(srv.URL)
	_, err := ordersclient.Check(anon.CreateOrderWithResponse(context.Background(), nil, ordersclient.CreateOrder{}))
	var p *ordersclient.Problem
	fmt.Println(errors.As(err, &p), p.Status, p.Type)
	// Output:
	// true 401 /problems/unauthorized
}
