package events

import (
	"strconv"
	"time"
)

// OrderEventType is the type of an order domain event; it is also the second
// token of its subject.
type OrderEventType string

// The order event types.
const (
	OrderCreated   OrderEventType = "created"
	OrderPaid      OrderEventType = "paid"
	OrderCancelled OrderEventType = "cancelled"
)

// Order statuses, as carried by OrderEvent.Status.
const (
	StatusPendingPayment = "pending_payment"
	StatusPaid           = "paid"
	StatusCancelled      = "cancelled"
)

// typeStatus is the status an order event of each type carries.
var typeStatus = map[OrderEventType]string{
	OrderCreated:   StatusPendingPayment,
	OrderPaid:      StatusPaid,
	OrderCancelled: StatusCancelled,
}

// Cancel reasons, as carried by OrderEvent.CancelReason.
const (
	CancelByCustomer     = "customer"
	CancelPaymentTimeout = "payment_timeout"
)

// OrderEvent is an order domain event, published on
// OrderEventSubject(Type, OrderID) after the change committed.
type OrderEvent struct {
	Schema  int            `json:"schema"`
	Type    OrderEventType `json:"type"`
	OrderID string         `json:"order_id"`
	// Version is the order's version after the change.
	Version      int64  `json:"version"`
	Status       string `json:"status"`
	CancelReason string `json:"cancel_reason,omitempty"`
	CustomerID   string `json:"customer_id"`
	// AmountMinor is the total in the currency's minor units (cents).
	AmountMinor int64  `json:"amount_minor"`
	Currency    string `json:"currency"`
	// PayBy is the payment deadline in force after the change.
	PayBy time.Time `json:"pay_by,omitzero"`
	// At is when the change committed.
	At time.Time `json:"at"`
}

// MsgID returns the Nats-Msg-Id of the event: order.<type>:<id>:<version>.
func (e OrderEvent) MsgID() string {
	return "order." + string(e.Type) + ":" + e.OrderID + ":" + strconv.FormatInt(e.Version, 10)
}

// Subject returns the subject the event is published on.
func (e OrderEvent) Subject() string { return OrderEventSubject(e.Type, e.OrderID) }

type orderEventWire struct {
	Schema       *int           `json:"schema"`
	Type         OrderEventType `json:"type"`
	OrderID      string         `json:"order_id"`
	Version      int64          `json:"version"`
	Status       string         `json:"status"`
	CancelReason string         `json:"cancel_reason"`
	CustomerID   string         `json:"customer_id"`
	AmountMinor  int64          `json:"amount_minor"`
	Currency     string         `json:"currency"`
	PayBy        string         `json:"pay_by"`
	At           string         `json:"at"`
}

// DecodeOrderEvent parses and validates an order event.
func DecodeOrderEvent(data []byte) (OrderEvent, error) {
	var w orderEventWire
	if err := decodeJSON(data, &w); err != nil {
		return OrderEvent{}, err
	}
	e := OrderEvent{Schema: 1, Type: w.Type, OrderID: w.OrderID, Version: w.Version, Status: w.Status,
		CancelReason: w.CancelReason, CustomerID: w.CustomerID, AmountMinor: w.AmountMinor, Currency: w.Currency}
	if w.Schema != nil {
		e.Schema = *w.Schema
	}
	if e.Schema < 1 || e.Schema > SchemaVersion {
		return OrderEvent{}, invalid(ReasonUnsupportedSchema, "schema", "schema version %d is not supported (newest is %d)", e.Schema, SchemaVersion)
	}
	status, ok := typeStatus[e.Type]
	if !ok {
		return OrderEvent{}, invalid(ReasonUnknownKind, "type", "unknown order event type %q", truncate(string(e.Type)))
	}
	if e.Status != status {
		return OrderEvent{}, invalid(ReasonInvalidField, "status", "must be %q for a %q event, got %q", status, e.Type, truncate(e.Status))
	}
	if !ValidKey(e.OrderID) {
		return OrderEvent{}, invalid(ReasonInvalidKey, "order_id", "must be 1 to %d letters, digits, '-' or '_'", MaxKeyLen)
	}
	if e.Version <= 0 {
		return OrderEvent{}, invalid(ReasonInvalidVersion, "version", "must be a positive integer, got %d", e.Version)
	}
	var err error
	if w.PayBy != "" {
		if e.PayBy, err = ParseTime("pay_by", w.PayBy); err != nil {
			return OrderEvent{}, err
		}
	}
	if e.At, err = ParseTime("at", w.At); err != nil {
		return OrderEvent{}, err
	}
	return e, nil
}

func itoa(n uint64) string { return strconv.FormatUint(n, 10) }
