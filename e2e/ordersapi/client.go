package ordersapi

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"
)

// Item is one line of an order; prices are integer minor units.
type Item struct {
	SKU            string `json:"sku"`
	Quantity       int64  `json:"quantity"`
	UnitPriceMinor int64  `json:"unit_price_minor"`
}

// Order is an order as the API serves it.
type Order struct {
	ID           string    `json:"id"`
	CustomerID   string    `json:"customer_id"`
	Currency     string    `json:"currency"`
	Items        []Item    `json:"items"`
	AmountMinor  int64     `json:"amount_minor"`
	Status       string    `json:"status"`
	CancelReason string    `json:"cancel_reason,omitempty"`
	Version      int64     `json:"version"`
	PayBy        time.Time `json:"pay_by"`
	CreatedAt    time.Time `json:"created_at"`
	UpdatedAt    time.Time `json:"updated_at"`
}

// Deadline is the payment deadline of a create or extend request: set
// exactly one of PayWithin (a Go duration such as "15m") and PayBy.
type Deadline struct {
	PayWithin string `json:"pay_within,omitempty"`
	PayBy     string `json:"pay_by,omitempty"`
}

// CreateRequest is the body of POST /v1/orders.
type CreateRequest struct {
	CustomerID string `json:"customer_id"`
	Currency   string `json:"currency"`
	Items      []Item `json:"items"`
	Deadline
}

// Problem is an RFC 9457 error answer; it is the error the client returns
// for any answer that is not 2xx.
type Problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail"`
	// Errors names the invalid fields of a validation error.
	Errors []struct {
		Field  string `json:"field"`
		Reason string `json:"reason"`
	} `json:"errors,omitempty"`
	// Body is the raw answer, for answers that are not problem+json.
	Body string `json:"-"`
}

// Error implements error.
func (p *Problem) Error() string {
	return fmt.Sprintf("orders api: %d %s: %s%s", p.Status, p.Title, p.Detail, p.Body)
}

// Client calls one orders service. It is safe for concurrent use.
type Client struct {
	// BaseURL is the service's root, e.g. http://127.0.0.1:8081.
	BaseURL string
	// Token is the bearer token of the mutating endpoints.
	Token string
	// HTTP is the client used; nil means one with a 10 s timeout.
	HTTP *http.Client
}

var defaultHTTP = &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 64}}

// Create creates an order (POST /v1/orders).
func (c *Client) Create(ctx context.Context, req CreateRequest) (Order, error) {
	return c.do(ctx, http.MethodPost, "/v1/orders", req)
}

// Get returns an order (GET /v1/orders/{id}).
func (c *Client) Get(ctx context.Context, id string) (Order, error) {
	return c.do(ctx, http.MethodGet, "/v1/orders/"+id, nil)
}

// Pay marks an order paid (POST /v1/orders/{id}/pay).
func (c *Client) Pay(ctx context.Context, id string) (Order, error) {
	return c.do(ctx, http.MethodPost, "/v1/orders/"+id+"/pay", nil)
}

// Cancel cancels an order on the customer's behalf (POST /v1/orders/{id}/cancel).
func (c *Client) Cancel(ctx context.Context, id string) (Order, error) {
	return c.do(ctx, http.MethodPost, "/v1/orders/"+id+"/cancel", nil)
}

// Extend moves an order's payment deadline (POST /v1/orders/{id}/extend).
func (c *Client) Extend(ctx context.Context, id string, d Deadline) (Order, error) {
	return c.do(ctx, http.MethodPost, "/v1/orders/"+id+"/extend", d)
}

func (c *Client) do(ctx context.Context, method, path string, body any) (Order, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return Order{}, fmt.Errorf("encode request: %w", err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.BaseURL+path, rd)
	if err != nil {
		return Order{}, fmt.Errorf("new request: %w", err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if method != http.MethodGet {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	hc := c.HTTP
	if hc == nil {
		hc = defaultHTTP
	}
	resp, err := hc.Do(req)
	if err != nil {
		return Order{}, fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return Order{}, fmt.Errorf("read %s %s: %w", method, path, err)
	}
	if resp.StatusCode/100 != 2 {
		p := &Problem{Status: resp.StatusCode}
		if json.Unmarshal(data, p) != nil || p.Title == "" {
			p.Body = string(data)
		}
		p.Status = resp.StatusCode
		return Order{}, p
	}
	var o Order
	if err := json.Unmarshal(data, &o); err != nil {
		return Order{}, fmt.Errorf("decode %s %s: %w", method, path, err)
	}
	return o, nil
}
