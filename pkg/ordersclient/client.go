package ordersclient

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
)

// problemBodyMax bounds the part of a body that is not a problem document
// which Check keeps as a Problem's Detail.
const problemBodyMax = 512

// Error makes a *Problem the error of a refused call, e.g. "ordersclient:
// 409 Illegal transition: order is paid".
func (p *Problem) Error() string {
	return fmt.Sprintf("ordersclient: %d %s: %s", p.Status, p.Title, p.Detail)
}

// Response is the answer of every ClientWithResponses method
// (CreateOrderResponse, GetOrderResponse, …): its status, content type and
// raw body.
type Response interface {
	StatusCode() int
	ContentType() string
	GetBody() []byte
}

// Check passes through the answer of a ClientWithResponses method with the
// error that matters to its caller: err when the call failed (no answer,
// or a body that does not decode), nil for a 2xx answer, and a *Problem for
// any other answer. The Problem is the answer's RFC 9457 document or, when
// the body is not one, the status's text as Title and the start of the body
// as Detail; its Status is always the answer's HTTP status. It costs one
// decode of the body, for answers that are not 2xx only.
//
//	r, err := ordersclient.Check(c.GetOrderWithResponse(ctx, id))
//	if err != nil { … }
//	order := r.JSON200
func Check[R Response](r R, err error) (R, error) {
	if err != nil {
		return r, err
	}
	code := r.StatusCode()
	if code >= 200 && code < 300 {
		return r, nil
	}
	body := r.GetBody()
	p := &Problem{}
	if !strings.Contains(r.ContentType(), "json") || json.Unmarshal(body, p) != nil || p.Title == "" {
		if len(body) > problemBodyMax {
			body = body[:problemBodyMax]
		}
		p = &Problem{Title: http.StatusText(code), Detail: strings.TrimSpace(string(body))}
	}
	p.Status = code
	return r, p
}

// OrderOf returns the order of a create, get, pay, cancel or extend answer
// (JSON201 or JSON200), or the error Check returns; a 2xx answer without a
// decoded order (not JSON) is an error too.
//
//	o, err := ordersclient.OrderOf(c.PayOrderWithResponse(ctx, id))
func OrderOf[R Response](r R, err error) (Order, error) {
	if _, err := Check(r, err); err != nil {
		return Order{}, err
	}
	var o *Order
	switch r := any(r).(type) {
	case interface{ GetJSON201() *Order }:
		o = r.GetJSON201()
	case interface{ GetJSON200() *Order }:
		o = r.GetJSON200()
	}
	if o == nil {
		return Order{}, fmt.Errorf("ordersclient: %d answer without an order (Content-Type %q)", r.StatusCode(), r.ContentType())
	}
	return *o, nil
}

// WithBearerToken returns the option that sends token as the bearer token
// of every request; the orders API requires one on create, pay, cancel and
// extend.
func WithBearerToken(token string) ClientOption {
	return WithRequestEditorFn(func(_ context.Context, req *http.Request) error {
		req.Header.Set("Authorization", "Bearer "+token)
		return nil
	})
}
