package orders

import (
	"errors"
	"fmt"
	"math"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/ordertimeout/ordertimeout/pkg/events"
)

// Status is the state of an order.
type Status string

// The statuses; the values are those of events.OrderEvent.Status.
const (
	StatusPendingPayment Status = events.StatusPendingPayment
	StatusPaid           Status = events.StatusPaid
	StatusCancelled      Status = events.StatusCancelled
)

// Statuses lists every status, in state machine order.
var Statuses = []Status{StatusPendingPayment, StatusPaid, StatusCancelled}

// Valid reports whether s is a known status.
func (s Status) Valid() bool {
	return s == StatusPendingPayment || s == StatusPaid || s == StatusCancelled
}

// CancelReason says why an order was cancelled.
type CancelReason string

// The cancel reasons; the values are those of events.OrderEvent.CancelReason.
const (
	CancelByCustomer     CancelReason = events.CancelByCustomer
	CancelPaymentTimeout CancelReason = events.CancelPaymentTimeout
)

// Limits of a create request.
const (
	// MaxItems is the most line items an order may have.
	MaxItems = 100
	// MaxQuantity is the largest quantity of one line item.
	MaxQuantity = 1_000_000
	// MaxTextLen bounds customer ids and SKUs, in bytes.
	MaxTextLen = 128
)

// Item is one line of an order. Prices are integer minor units (cents).
type Item struct {
	SKU            string `json:"sku"`
	Quantity       int64  `json:"quantity"`
	UnitPriceMinor int64  `json:"unit_price_minor"`
}

// Order is an order as stored and as served by the REST API.
type Order struct {
	// ID is a valid events key: a UUIDv7 string, so ids sort by creation
	// time (strictly, for the orders of one process).
	ID         string `json:"id"`
	CustomerID string `json:"customer_id"`
	// Currency is an ISO 4217 code such as EUR.
	Currency string `json:"currency"`
	Items    []Item `json:"items"`
	// AmountMinor is the sum of quantity × unit price, in minor units.
	AmountMinor int64  `json:"amount_minor"`
	Status      Status `json:"status"`
	// CancelReason is set only when Status is cancelled.
	CancelReason CancelReason `json:"cancel_reason,omitempty"`
	// Version starts at 1 and grows by one with every change; it is the
	// version of the timeout commands and events about this order.
	Version int64 `json:"version"`
	// PayBy is the payment deadline, in UTC.
	PayBy     time.Time `json:"pay_by"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
}

// Change is a committed-together state change: the order after it, the
// timeout command for timeoutd (nil when none is needed) and the domain event
// (nil when none is published).
type Change struct {
	Order   Order
	Command *events.Command
	Event   *events.OrderEvent
}

// Deadline is the payment deadline of a create or extend request: exactly one
// of PayWithin (a Go duration such as "15m") and PayBy (RFC 3339) is set.
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

// Limits bounds a payment deadline relative to the time of the request.
type Limits struct {
	// PayWithinMin and PayWithinMax bound the deadline minus now.
	PayWithinMin time.Duration `env:"PAY_WITHIN_MIN"`
	PayWithinMax time.Duration `env:"PAY_WITHIN_MAX"`
}

// resolve returns the absolute deadline of d at now, or the fields' errors.
func (d Deadline) resolve(now time.Time, lim Limits) (time.Time, []FieldError) {
	switch {
	case d.PayWithin == "" && d.PayBy == "":
		return time.Time{}, []FieldError{{"pay_within", "one of pay_within and pay_by is required"}}
	case d.PayWithin != "" && d.PayBy != "":
		return time.Time{}, []FieldError{{"pay_by", "only one of pay_within and pay_by may be set"}}
	}
	field, within := "pay_within", time.Duration(0)
	var deadline time.Time
	if d.PayWithin != "" {
		w, err := time.ParseDuration(d.PayWithin)
		if err != nil {
			return time.Time{}, []FieldError{{field, fmt.Sprintf("must be a duration such as 15m or 1h30m, got %.64q", d.PayWithin)}}
		}
		within, deadline = w, now.Add(w)
	} else {
		field = "pay_by"
		t, err := events.ParseTime(field, d.PayBy)
		if err != nil {
			return time.Time{}, []FieldError{{field, fmt.Sprintf("must be an RFC 3339 time such as 2026-01-02T15:04:05Z, got %.64q", d.PayBy)}}
		}
		within, deadline = t.Sub(now), t
	}
	if within < lim.PayWithinMin || within > lim.PayWithinMax {
		return time.Time{}, []FieldError{{field, fmt.Sprintf("the deadline must be between %s and %s from now", lim.PayWithinMin, lim.PayWithinMax)}}
	}
	return ceilMicro(deadline), nil
}

// ceilMicro rounds t up to Postgres's microsecond precision, so the stored
// deadline is never earlier than the one asked for.
func ceilMicro(t time.Time) time.Time {
	r := t.Truncate(time.Microsecond)
	if r.Before(t) {
		r = r.Add(time.Microsecond)
	}
	return r.UTC()
}

// NewOrder validates req and returns the new order id at now with its Change:
// status pending_payment, version 1, a set command and a created event.
func NewOrder(id string, req CreateRequest, now time.Time, lim Limits) (Change, error) {
	var fe []FieldError
	if req.CustomerID == "" || len(req.CustomerID) > MaxTextLen || !identifier(req.CustomerID) {
		fe = append(fe, FieldError{"customer_id", fmt.Sprintf("must be 1 to %d bytes of %s", MaxTextLen, identifierText)})
	}
	if !validCurrency(req.Currency) {
		fe = append(fe, FieldError{"currency", "must be an ISO 4217 code of three upper-case letters, such as EUR"})
	}
	if len(req.Items) == 0 || len(req.Items) > MaxItems {
		fe = append(fe, FieldError{"items", fmt.Sprintf("must hold 1 to %d items", MaxItems)})
	}
	var amount int64
	for i, it := range req.Items {
		if i == MaxItems {
			break
		}
		p := fmt.Sprintf("items[%d].", i)
		switch {
		case it.SKU == "" || len(it.SKU) > MaxTextLen || !identifier(it.SKU):
			fe = append(fe, FieldError{p + "sku", fmt.Sprintf("must be 1 to %d bytes of %s", MaxTextLen, identifierText)})
		case it.Quantity < 1 || it.Quantity > MaxQuantity:
			fe = append(fe, FieldError{p + "quantity", fmt.Sprintf("must be between 1 and %d", MaxQuantity)})
		case it.UnitPriceMinor < 0:
			fe = append(fe, FieldError{p + "unit_price_minor", "must not be negative"})
		case it.UnitPriceMinor > (math.MaxInt64-amount)/it.Quantity:
			fe = append(fe, FieldError{p + "unit_price_minor", "makes the order amount overflow"})
		default:
			amount += it.Quantity * it.UnitPriceMinor
		}
	}
	payBy, dfe := req.Deadline.resolve(now, lim)
	fe = append(fe, dfe...)
	if err := validationError(fe); err != nil {
		return Change{}, err
	}
	now = now.Truncate(time.Microsecond).UTC()
	o := Order{ID: id, CustomerID: req.CustomerID, Currency: req.Currency, Items: req.Items, AmountMinor: amount,
		Status: StatusPendingPayment, Version: 1, PayBy: payBy, CreatedAt: now, UpdatedAt: now}
	return Change{Order: o, Command: o.setCommand(), Event: o.event(events.OrderCreated)}, nil
}

// Pay marks a pending order paid at now: a clear command and a paid event.
// The deadline is the rule: once now is past PayBy plus grace (not negative),
// the payment is refused with ErrDeadlinePassed even though the order is
// still pending (its cancel event has not arrived yet; see the package doc).
func (o Order) Pay(now time.Time, grace time.Duration) (Change, error) {
	if o.Status != StatusPendingPayment {
		return Change{}, conflict("pay", o.Status)
	}
	if now.After(o.PayBy.Add(grace)) {
		return Change{}, deadlinePassed(o.PayBy, grace)
	}
	o = o.next(now)
	o.Status = StatusPaid
	return Change{Order: o, Command: o.clearCommand(), Event: o.event(events.OrderPaid)}, nil
}

// Cancel cancels a pending order at the customer's request: a clear command
// and a cancelled event.
func (o Order) Cancel(now time.Time) (Change, error) {
	if o.Status != StatusPendingPayment {
		return Change{}, conflict("cancel", o.Status)
	}
	o = o.next(now)
	o.Status, o.CancelReason = StatusCancelled, CancelByCustomer
	return Change{Order: o, Command: o.clearCommand(), Event: o.event(events.OrderCancelled)}, nil
}

// Extend moves the deadline of a pending order: a set command with the new
// version (which makes the cancel event of the old one stale). No domain
// event is published: the contract has none for a moved deadline.
func (o Order) Extend(d Deadline, now time.Time, lim Limits) (Change, error) {
	payBy, fe := d.resolve(now, lim)
	if err := validationError(fe); err != nil {
		return Change{}, err
	}
	if o.Status != StatusPendingPayment {
		return Change{}, conflict("extend", o.Status)
	}
	o = o.next(now)
	o.PayBy = payBy
	return Change{Order: o, Command: o.setCommand()}, nil
}

// Expire applies a cancel event for version with the event's deadline at
// now. A stale or settled order is a no-op (applied false, nil error). For
// the pending order at that version, the event must be about its deadline
// (ErrDeadlineMismatch otherwise: forged or corrupt) and the deadline must
// have passed by this service's clock too (an *EarlyError otherwise, to be
// retried at PayBy): an order is never cancelled before its pay_by, even by
// a forged event. Then the order is cancelled for payment_timeout and a
// cancelled event announces it; no command is needed (the timeout fired).
func (o Order) Expire(version int64, deadline, now time.Time) (Change, bool, error) {
	if o.Status != StatusPendingPayment || o.Version != version {
		return Change{}, false, nil
	}
	if d := deadline.Sub(o.PayBy); d < -DeadlineTolerance || d > DeadlineTolerance {
		return Change{}, false, fmt.Errorf("%w: event %s, order %s", ErrDeadlineMismatch, deadline.Format(time.RFC3339Nano), o.PayBy.Format(time.RFC3339Nano))
	}
	if now.Before(o.PayBy) {
		return Change{}, false, &EarlyError{PayBy: o.PayBy}
	}
	o = o.next(now)
	o.Status, o.CancelReason = StatusCancelled, CancelPaymentTimeout
	return Change{Order: o, Event: o.event(events.OrderCancelled)}, true, nil
}

// Reconcile cancels a pending order whose pay_by passed more than margin
// before now, for a payment timeout, without its cancel event (lost outside
// the platform, or its timeout replaced by a forged later version): the same
// change and cancelled event as Expire, plus a clear command at the new
// version, so a timeoutd that still holds the timeout drops it instead of
// firing for a cancelled order. Any other order is a no-op (applied false).
func (o Order) Reconcile(now time.Time, margin time.Duration) (Change, bool) {
	if o.Status != StatusPendingPayment || !now.After(o.PayBy.Add(margin)) {
		return Change{}, false
	}
	ch, applied, err := o.Expire(o.Version, o.PayBy, now)
	if err != nil || !applied {
		return Change{}, false
	}
	ch.Command = ch.Order.clearCommand()
	return ch, true
}

// DeadlineTolerance is how far a cancel event's deadline may be from the
// order's pay_by and still be about it (timestamps may lose precision on the
// way through timeoutd).
const DeadlineTolerance = time.Millisecond

// ErrDeadlineMismatch rejects a cancel event whose deadline is not the
// order's pay_by at that version.
var ErrDeadlineMismatch = errors.New("orders: the cancel event's deadline is not the order's pay_by")

// EarlyError rejects, for now, a cancel event that arrives before the
// order's pay_by by this service's clock; apply it again at PayBy.
type EarlyError struct {
	// PayBy is the order's deadline.
	PayBy time.Time
}

// Error implements error.
func (e *EarlyError) Error() string {
	return "orders: cancel event before the order's pay_by " + e.PayBy.Format(time.RFC3339Nano)
}

// next returns o at the next version, updated at now.
func (o Order) next(now time.Time) Order {
	o.Version++
	o.UpdatedAt = now.Truncate(time.Microsecond).UTC()
	return o
}

// The orders service is the tenant events.OrdersTenant, whose timeout
// keys are the order ids themselves (events.TenantKey), on
// timeouts.cmd.<id>.

func (o Order) setCommand() *events.Command {
	return &events.Command{Schema: events.SchemaVersion, Kind: events.KindSet, Key: events.TenantKey(events.OrdersTenant, o.ID), Version: o.Version,
		Deadline: o.PayBy, FireSubject: events.OrderCancelSubject(o.ID), IssuedAt: o.UpdatedAt}
}

func (o Order) clearCommand() *events.Command {
	return &events.Command{Schema: events.SchemaVersion, Kind: events.KindClear, Key: events.TenantKey(events.OrdersTenant, o.ID), Version: o.Version, IssuedAt: o.UpdatedAt}
}

func (o Order) event(t events.OrderEventType) *events.OrderEvent {
	return &events.OrderEvent{Schema: events.SchemaVersion, Type: t, OrderID: o.ID, Version: o.Version,
		Status: string(o.Status), CancelReason: string(o.CancelReason), CustomerID: o.CustomerID,
		AmountMinor: o.AmountMinor, Currency: o.Currency, PayBy: o.PayBy, At: o.UpdatedAt}
}

// identifierText says what identifier accepts, for the errors.
const identifierText = "UTF-8 text without control characters, bidirectional controls or U+FFFD"

// identifier reports whether s may be an identifier (customer id, SKU,
// Idempotency-Key): valid UTF-8 (so Postgres can store it, and nothing was
// silently replaced) without C0 or C1 control characters (NUL, escape
// sequences, line breaks that forge log lines), without the bidirectional
// controls that make a dashboard or a log show another text than stored
// (U+061C, U+200E, U+200F, U+202A-U+202E, U+2066-U+2069), and without
// U+FFFD, which is what a JSON decoder puts in place of invalid UTF-8 or a
// lone surrogate escape.
func identifier(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		switch {
		case unicode.IsControl(r), r == utf8.RuneError, r == '\u061c', r == '\u200e', r == '\u200f',
			r >= '\u202a' && r <= '\u202e', r >= '\u2066' && r <= '\u2069':
			return false
		}
	}
	return true
}

func validCurrency(c string) bool {
	if len(c) != 3 {
		return false
	}
	for i := 0; i < 3; i++ {
		if c[i] < 'A' || c[i] > 'Z' {
			return false
		}
	}
	return true
}
