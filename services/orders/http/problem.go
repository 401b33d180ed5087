package http

import (
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"time"

	"github.com/go-chi/chi/v5/middleware"
	"github.com/ordertimeout/ordertimeout/internal/httpapi"
	"github.com/ordertimeout/ordertimeout/services/orders"
)

// Codes of the HTTP adapter itself, mapped in the same table as the domain's.
const (
	codeBodyTooLarge     orders.Code = "body_too_large"
	codeUnsupportedMedia orders.Code = "unsupported_media_type"
	codeRouteNotFound    orders.Code = "route_not_found"
	codeMethodNotAllowed orders.Code = "method_not_allowed"
	codeInternal         orders.Code = "internal"
	codeOverloaded       orders.Code = "overloaded"
)

// statusOf maps every error code to its HTTP status: the one table.
var statusOf = map[orders.Code]int{
	orders.CodeValidation:          http.StatusBadRequest,
	orders.CodeUnauthorized:        http.StatusUnauthorized,
	orders.CodeNotFound:            http.StatusNotFound,
	orders.CodeConflict:            http.StatusConflict,
	orders.CodeDeadlinePassed:      http.StatusConflict,
	orders.CodeIdempotencyMismatch: http.StatusUnprocessableEntity,
	codeBodyTooLarge:               http.StatusRequestEntityTooLarge,
	codeUnsupportedMedia:           http.StatusUnsupportedMediaType,
	codeRouteNotFound:              http.StatusNotFound,
	codeMethodNotAllowed:           http.StatusMethodNotAllowed,
	codeInternal:                   http.StatusInternalServerError,
	orders.CodeUnavailable:         http.StatusServiceUnavailable,
	codeOverloaded:                 http.StatusServiceUnavailable,
}

// titles are the problem titles, one per code.
var titles = map[orders.Code]string{
	orders.CodeValidation:          "Invalid request",
	orders.CodeUnauthorized:        "Unauthorized",
	orders.CodeNotFound:            "Order not found",
	orders.CodeConflict:            "Illegal transition",
	orders.CodeDeadlinePassed:      "Payment deadline passed",
	orders.CodeIdempotencyMismatch: "Idempotency key reused with a different request",
	codeBodyTooLarge:               "Request body too large",
	codeUnsupportedMedia:           "Unsupported media type",
	codeRouteNotFound:              "Not found",
	codeMethodNotAllowed:           "Method not allowed",
	codeInternal:                   "Internal server error",
	orders.CodeUnavailable:         "Service unavailable",
	codeOverloaded:                 "Service overloaded",
}

// retryAfter is the Retry-After header, in seconds, of the codes that ask
// the client to come back later.
var retryAfter = map[orders.Code]string{
	orders.CodeUnavailable: "1",
	// The outbox lags by more than MaxOutboxLag (seconds): give the relay
	// a few seconds.
	codeOverloaded: "5",
}

// problem is the orders API's problem document: for an illegal transition
// or a passed payment deadline (409) the extension member "order_status"
// holds the order's current status, and for the latter "pay_by" the
// deadline.
type problem struct {
	httpapi.Problem
	// OrderStatus is the order's current status, on a conflict only.
	OrderStatus orders.Status `json:"order_status,omitempty"`
	// PayBy is the deadline that passed, on payment_deadline_passed only.
	PayBy *time.Time `json:"pay_by,omitempty"`
}

// writeError writes err as a problem; an error that is not a domain error is
// logged and answered with a generic 500.
func (s *server) writeError(w http.ResponseWriter, r *http.Request, err error) {
	var de *orders.Error
	if !errors.As(err, &de) {
		s.log.ErrorContext(r.Context(), "request failed", "request_id", middleware.GetReqID(r.Context()),
			"method", r.Method, "path", r.URL.Path, "err", err)
		de = &orders.Error{Code: codeInternal, Detail: "the request failed; quote the request id when reporting it"}
	} else if de.Code == orders.CodeUnavailable {
		// The cause (a network or connect error) is logged, never shown.
		s.log.WarnContext(r.Context(), "request failed: dependency unavailable", "request_id", middleware.GetReqID(r.Context()),
			"method", r.Method, "path", r.URL.Path, "err", err)
	}
	status, ok := statusOf[de.Code]
	if !ok {
		status = http.StatusInternalServerError
	}
	p := problem{Problem: httpapi.Problem{Type: httpapi.TypeOf(string(de.Code)), Title: titles[de.Code], Status: status,
		Detail: de.Detail, Instance: r.URL.Path, RequestID: middleware.GetReqID(r.Context())}}
	for _, f := range de.Fields {
		p.Errors = append(p.Errors, httpapi.FieldError{Field: f.Field, Reason: f.Reason})
	}
	if (de.Code == orders.CodeConflict || de.Code == orders.CodeDeadlinePassed) && de.Status != "" {
		p.OrderStatus = de.Status
	}
	if de.Code == orders.CodeDeadlinePassed {
		p.PayBy = &de.PayBy
	}
	if v, ok := retryAfter[de.Code]; ok {
		w.Header().Set("Retry-After", v)
	}
	if de.Code == orders.CodeUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="orders"`)
	}
	httpapi.WriteProblem(w, status, p)
}

// writeJSON writes v as JSON with the given status and content type.
func writeJSON(w http.ResponseWriter, status int, contentType string, v any, log *slog.Logger) {
	body, err := json.Marshal(v)
	if err != nil {
		log.Error("encode response", "err", err)
		http.Error(w, `{"title":"Internal server error","status":500}`, http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", contentType)
	w.WriteHeader(status)
	_, _ = w.Write(append(body, '\n'))
}
