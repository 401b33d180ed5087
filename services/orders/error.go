package orders

import (
	"fmt"
	"time"
)

// Code classifies a domain error; the HTTP adapter maps each code to a status
// in one table.
type Code string

// The error codes.
const (
	// CodeValidation: the request is malformed; Fields says which fields.
	CodeValidation Code = "validation"
	// CodeNotFound: no order has the requested id.
	CodeNotFound Code = "not_found"
	// CodeConflict: the transition is illegal in the order's current status.
	CodeConflict Code = "conflict"
	// CodeDeadlinePassed: a payment after the order's pay_by plus the
	// configured grace; PayBy says which deadline.
	CodeDeadlinePassed Code = "payment_deadline_passed"
	// CodeIdempotencyMismatch: an Idempotency-Key was reused with another body.
	CodeIdempotencyMismatch Code = "idempotency_mismatch"
	// CodeUnauthorized: a mutating request without a valid bearer token.
	CodeUnauthorized Code = "unauthorized"
	// CodeUnavailable: a dependency (the database) cannot be reached or does
	// not answer in time; the request may be retried later.
	CodeUnavailable Code = "unavailable"
)

// Sentinel errors, matched with errors.Is against any *Error of the same code.
var (
	ErrValidation          = &Error{Code: CodeValidation, Detail: "orders: invalid request"}
	ErrNotFound            = &Error{Code: CodeNotFound, Detail: "orders: order not found"}
	ErrConflict            = &Error{Code: CodeConflict, Detail: "orders: illegal transition"}
	ErrDeadlinePassed      = &Error{Code: CodeDeadlinePassed, Detail: "orders: the payment deadline has passed"}
	ErrIdempotencyMismatch = &Error{Code: CodeIdempotencyMismatch, Detail: "orders: idempotency key reused with a different request"}
	ErrUnauthorized        = &Error{Code: CodeUnauthorized, Detail: "orders: missing or invalid bearer token"}
	ErrUnavailable         = &Error{Code: CodeUnavailable, Detail: "orders: the database is unavailable; retry later"}
)

// FieldError names a request field and why it was rejected.
type FieldError struct {
	// Field is the JSON name (items[1].quantity) or the query or header name.
	Field string `json:"field"`
	// Reason is a short human-readable explanation.
	Reason string `json:"reason"`
}

// Error is a domain error: a code, a detail for humans, the offending fields
// (validation) and the order's current status (conflict).
type Error struct {
	Code   Code
	Detail string
	Fields []FieldError
	// Status is the order's current status, set on CodeConflict and
	// CodeDeadlinePassed.
	Status Status
	// PayBy is the deadline that passed, set on CodeDeadlinePassed.
	PayBy time.Time
}

// Error implements error.
func (e *Error) Error() string {
	if len(e.Fields) > 0 {
		return fmt.Sprintf("%s: %s: %s", e.Detail, e.Fields[0].Field, e.Fields[0].Reason)
	}
	return e.Detail
}

// Is matches any *Error with the same code, so errors.Is(err, ErrNotFound)
// holds for every not-found error.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Code == e.Code
}

// validationError returns a CodeValidation error for fields; nil when empty.
func validationError(fields []FieldError) error {
	if len(fields) == 0 {
		return nil
	}
	return &Error{Code: CodeValidation, Detail: "orders: invalid request", Fields: fields}
}

// Invalid returns a validation error naming one field.
func Invalid(field, format string, args ...any) error {
	return validationError([]FieldError{{Field: field, Reason: fmt.Sprintf(format, args...)}})
}

// conflict returns the illegal-transition error of an order in status s.
func conflict(action string, s Status) error {
	return &Error{Code: CodeConflict, Detail: fmt.Sprintf("orders: cannot %s an order in status %s", action, s), Status: s}
}

// deadlinePassed returns the error of a payment after payBy plus grace.
func deadlinePassed(payBy time.Time, grace time.Duration) error {
	d := fmt.Sprintf("orders: the payment deadline %s has passed", payBy.Format(time.RFC3339Nano))
	if grace > 0 {
		d += fmt.Sprintf(" (grace %s)", grace)
	}
	return &Error{Code: CodeDeadlinePassed, Detail: d, Status: StatusPendingPayment, PayBy: payBy}
}
