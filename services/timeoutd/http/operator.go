package http

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/ordertimeout/ordertimeout/pkg/events"
	"github.com/ordertimeout/ordertimeout/pkg/ordersclient"
)

// Limits of the operator routes.
const (
	// OrdersTimeoutDefault bounds one forwarded call to the orders API.
	OrdersTimeoutDefault = 5 * time.Second
	// operatorBodyMax bounds a request body and a relayed answer.
	operatorBodyMax = 64 << 10
)

// Operator configures the operator actions (extend, cancel) that the
// dashboard forwards to the orders API; the zero value disables them.
type Operator struct {
	// Token is the bearer token an operator presents; empty disables the
	// operator routes (404) and the dashboard stays read-only.
	Token string
	// OrdersURL is the orders API's base URL, e.g. http://orders:8081.
	OrdersURL string
	// OrdersToken is timeoutd's bearer token for the orders API.
	OrdersToken string
	// Client calls the orders API; default a client with
	// OrdersTimeoutDefault as timeout.
	Client *http.Client
}

// Enabled reports whether the operator routes are served.
func (o Operator) Enabled() bool { return o.Token != "" }

// ordersClient returns the orders API client the operator routes forward
// with (pkg/ordersclient, generated from the API's document): timeoutd's
// token on every call, answers asked for as JSON or problem documents. It
// is nil when the routes are disabled.
func (o Operator) ordersClient() (*ordersclient.Client, error) {
	if !o.Enabled() {
		return nil, nil
	}
	if o.OrdersURL == "" {
		return nil, errors.New("http: Config.Operator.OrdersURL is required with an operator token")
	}
	hc := o.Client
	if hc == nil {
		hc = &http.Client{Timeout: OrdersTimeoutDefault}
	}
	c, err := ordersclient.NewClient(o.OrdersURL, ordersclient.WithHTTPClient(hc), ordersclient.WithBearerToken(o.OrdersToken),
		ordersclient.WithRequestEditorFn(func(_ context.Context, req *http.Request) error {
			req.Header.Set("Accept", "application/json, application/problem+json")
			return nil
		}))
	if err != nil {
		return nil, fmt.Errorf("http: Config.Operator: %w", err)
	}
	return c, nil
}

// operatorRoutes mounts POST /orders/{id}/cancel and /orders/{id}/extend.
func (s *server) operatorRoutes(r chi.Router) {
	r.Post("/orders/{id}/cancel", s.forwardOrder("cancel", func(ctx context.Context, id string, _ []byte) (*http.Response, error) {
		return s.orders.CancelOrder(ctx, id)
	}))
	r.Post("/orders/{id}/extend", s.forwardOrder("extend", func(ctx context.Context, id string, body []byte) (*http.Response, error) {
		return s.orders.ExtendOrderWithBody(ctx, id, "application/json", bytes.NewReader(body))
	}))
}

// authorized reports whether r carries the operator token.
func (s *server) authorized(r *http.Request) bool { return s.operatorToken.Allow(r) }

// payloadAccess reports whether r may see the payloads of pending
// timeouts: always without a read token; with one, when r carries it or
// the operator token. A request that carries another bearer token gets a
// 401 (ok false), so a misconfigured client notices instead of reading
// withheld payloads as absent ones.
func (s *server) payloadAccess(w http.ResponseWriter, r *http.Request) (payloads, ok bool) {
	if s.cfg.ReadToken == "" {
		return true, true
	}
	if s.readToken.Allow(r) || s.authorized(r) {
		return true, true
	}
	if r.Header.Get("Authorization") != "" {
		w.Header().Set("WWW-Authenticate", `Bearer realm="timeoutd"`)
		s.problem(w, r, codeUnauthorized, "the bearer token is neither the read nor the operator token")
		return false, false
	}
	return false, true
}

// forwardOrder returns the handler that performs action on an order with
// call (the body is the request's for extend, nil for cancel) and relays the
// orders API's status and body.
func (s *server) forwardOrder(action string, call func(ctx context.Context, id string, body []byte) (*http.Response, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !s.cfg.Operator.Enabled() {
			s.problem(w, r, codeOperatorDisabled, "timeoutd has no TIMEOUTD_OPERATOR_TOKEN")
			return
		}
		if !s.authorized(r) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="timeoutd"`)
			s.problem(w, r, codeUnauthorized, "a valid operator bearer token is required")
			return
		}
		id := chi.URLParam(r, "id")
		if !events.ValidKey(id) {
			s.fail(w, r, &invalidParam{"id", "must be 1 to 128 letters, digits, '-' or '_'"})
			return
		}
		var body []byte
		if action == "extend" {
			b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, operatorBodyMax))
			if err != nil {
				var tooBig *http.MaxBytesError
				if errors.As(err, &tooBig) {
					s.problem(w, r, codeBodyTooLarge, "the body exceeds 64 KiB")
					return
				}
				s.fail(w, r, &invalidParam{"body", "could not be read"})
				return
			}
			body = b
		}
		resp, err := call(r.Context(), id, body)
		if err != nil {
			// The error names the URL only; tokens are in headers, never logged.
			s.log.Warn("orders API unreachable", "action", action, "id", id, "err", err)
			s.problem(w, r, codeOrdersUnreachable, "the orders API did not answer")
			return
		}
		defer resp.Body.Close()
		answer, err := io.ReadAll(io.LimitReader(resp.Body, operatorBodyMax+1))
		if err != nil || len(answer) > operatorBodyMax {
			s.problem(w, r, codeOrdersBadAnswer, "the answer was unreadable or too large")
			return
		}
		s.log.Info("operator action", "action", action, "id", id, "status", resp.StatusCode)
		if resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden {
			// Not the operator's fault: relaying it would make the
			// dashboard forget a valid operator token.
			s.log.Error("orders API refused timeoutd's token (TIMEOUTD_ORDERS_TOKEN)", "status", resp.StatusCode)
			s.problem(w, r, codeOrdersRefused, "the orders API refused TIMEOUTD_ORDERS_TOKEN")
			return
		}
		if ct := resp.Header.Get("Content-Type"); ct != "" {
			w.Header().Set("Content-Type", ct)
		}
		w.WriteHeader(resp.StatusCode)
		_, _ = w.Write(answer)
	}
}
