package orders_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/ordertimeout/ordertimeout/pkg/events"
	"github.com/ordertimeout/ordertimeout/services/orders"
)

var (
	now    = time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)
	limits = orders.Limits{PayWithinMin: time.Second, PayWithinMax: 24 * time.Hour}
)

func newOrder(t *testing.T) orders.Order {
	t.Helper()
	ch, err := orders.NewOrder("o-1", orders.CreateRequest{CustomerID: "c", Currency: "EUR",
		Items: []orders.Item{{SKU: "a", Quantity: 3, UnitPriceMinor: 100}}, Deadline: orders.Deadline{PayWithin: "10m"}}, now, limits)
	if err != nil {
		t.Fatal(err)
	}
	return ch.Order
}

func TestNewOrderAnnouncesASetCommand(t *testing.T) {
	t.Parallel()
	ch, err := orders.NewOrder("o-1", orders.CreateRequest{CustomerID: "c", Currency: "EUR",
		Items: []orders.Item{{SKU: "a", Quantity: 3, UnitPriceMinor: 100}}, Deadline: orders.Deadline{PayBy: "2026-11-23T10:10:00.0000001Z"}}, now, limits)
	if err != nil {
		t.Fatal(err)
	}
	o, c, e := ch.Order, ch.Command, ch.Event
	// Postgres keeps microseconds: the deadline rounds up, never earlier.
	wantPayBy := time.Date(2026, 11, 23, 10, 10, 0, 1000, time.UTC)
	if o.Status != orders.StatusPendingPayment || o.Version != 1 || o.AmountMinor != 300 || !o.PayBy.Equal(wantPayBy) {
		t.Fatalf("order = %+v", o)
	}
	if c == nil || c.Kind != events.KindSet || c.Key != "o-1" || c.Version != 1 || !c.Deadline.Equal(o.PayBy) ||
		c.FireSubject != events.OrderCancelSubject("o-1") || c.Validate() != nil || c.IssuedAt.IsZero() || !c.IssuedAt.Equal(o.UpdatedAt) {
		t.Fatalf("command = %+v", c)
	}
	if e == nil || e.Type != events.OrderCreated || e.Version != 1 || e.Status != events.StatusPendingPayment || e.AmountMinor != 300 {
		t.Fatalf("event = %+v", e)
	}
}

func TestTransitions(t *testing.T) {
	t.Parallel()
	later := now.Add(time.Minute)
	pending := newOrder(t)
	paid, _ := pending.Pay(later, 0)
	cancelled, _ := pending.Cancel(later)
	tests := []struct {
		name       string
		apply      func(o orders.Order) (orders.Change, error)
		from       orders.Order
		wantStatus orders.Status
		wantReason orders.CancelReason
		wantCmd    events.CommandKind // "" = no command
		wantEvent  events.OrderEventType
		wantErr    error
	}{
		{"pay pending", func(o orders.Order) (orders.Change, error) { return o.Pay(later, 0) }, pending, orders.StatusPaid, "", events.KindClear, events.OrderPaid, nil},
		{"pay paid", func(o orders.Order) (orders.Change, error) { return o.Pay(later, 0) }, paid.Order, "", "", "", "", orders.ErrConflict},
		{"pay cancelled", func(o orders.Order) (orders.Change, error) { return o.Pay(later, 0) }, cancelled.Order, "", "", "", "", orders.ErrConflict},
		{"cancel pending", func(o orders.Order) (orders.Change, error) { return o.Cancel(later) }, pending, orders.StatusCancelled, orders.CancelByCustomer, events.KindClear, events.OrderCancelled, nil},
		{"cancel paid", func(o orders.Order) (orders.Change, error) { return o.Cancel(later) }, paid.Order, "", "", "", "", orders.ErrConflict},
		{"extend pending", func(o orders.Order) (orders.Change, error) {
			return o.Extend(orders.Deadline{PayWithin: "1h"}, later, limits)
		}, pending, orders.StatusPendingPayment, "", events.KindSet, "", nil},
		{"extend cancelled", func(o orders.Order) (orders.Change, error) {
			return o.Extend(orders.Deadline{PayWithin: "1h"}, later, limits)
		}, cancelled.Order, "", "", "", "", orders.ErrConflict},
		{"extend beyond the limit", func(o orders.Order) (orders.Change, error) {
			return o.Extend(orders.Deadline{PayWithin: "48h"}, later, limits)
		}, pending, "", "", "", "", orders.ErrValidation},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ch, err := tt.apply(tt.from)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("err = %v, want %v", err, tt.wantErr)
				}
				var de *orders.Error
				if errors.Is(tt.wantErr, orders.ErrConflict) && (!errors.As(err, &de) || de.Status != tt.from.Status) {
					t.Fatalf("conflict does not carry the current status %s: %+v", tt.from.Status, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			o := ch.Order
			if o.Status != tt.wantStatus || o.CancelReason != tt.wantReason || o.Version != tt.from.Version+1 || !o.UpdatedAt.Equal(later) {
				t.Fatalf("order = %+v", o)
			}
			if (ch.Command == nil) != (tt.wantCmd == "") || (ch.Command != nil && (ch.Command.Kind != tt.wantCmd || ch.Command.Version != o.Version || !ch.Command.IssuedAt.Equal(o.UpdatedAt) || ch.Command.Validate() != nil)) {
				t.Fatalf("command = %+v, want kind %q at version %d", ch.Command, tt.wantCmd, o.Version)
			}
			if (ch.Event == nil) != (tt.wantEvent == "") || (ch.Event != nil && (ch.Event.Type != tt.wantEvent || ch.Event.Version != o.Version)) {
				t.Fatalf("event = %+v, want %q", ch.Event, tt.wantEvent)
			}
		})
	}
}

// TestPayRefusedAfterTheDeadline: the deadline is the rule. A payment after
// pay_by plus the grace is refused with the deadline, even though the order
// is still pending (its cancel event has not arrived).
func TestPayRefusedAfterTheDeadline(t *testing.T) {
	t.Parallel()
	pending := newOrder(t)
	payBy := pending.PayBy
	tests := []struct {
		name   string
		at     time.Time
		grace  time.Duration
		passed bool
	}{
		{"before pay_by", payBy.Add(-time.Second), 0, false},
		{"at pay_by", payBy, 0, false},
		{"a nanosecond after pay_by", payBy.Add(time.Nanosecond), 0, true},
		{"0.3s after pay_by", payBy.Add(300 * time.Millisecond), 0, true},
		{"within the grace", payBy.Add(300 * time.Millisecond), time.Second, false},
		{"at the end of the grace", payBy.Add(time.Second), time.Second, false},
		{"after the grace", payBy.Add(time.Second + time.Nanosecond), time.Second, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ch, err := pending.Pay(tt.at, tt.grace)
			if !tt.passed {
				if err != nil || ch.Order.Status != orders.StatusPaid {
					t.Fatalf("pay = %+v, %v; want paid", ch.Order, err)
				}
				return
			}
			var de *orders.Error
			if !errors.Is(err, orders.ErrDeadlinePassed) || !errors.As(err, &de) || !de.PayBy.Equal(payBy) ||
				de.Status != orders.StatusPendingPayment || !strings.Contains(de.Detail, payBy.Format(time.RFC3339Nano)) {
				t.Fatalf("err = %#v, want ErrDeadlinePassed naming %s", err, payBy)
			}
		})
	}
}

func TestExpire(t *testing.T) {
	t.Parallel()
	pending := newOrder(t)
	payBy := pending.PayBy
	extended, _ := pending.Extend(orders.Deadline{PayWithin: "1h"}, now, limits)
	paid, _ := pending.Pay(now, 0)
	tests := []struct {
		name     string
		o        orders.Order
		version  int64
		deadline time.Time
		at       time.Time
		applied  bool
		wantErr  error // orders.ErrDeadlineMismatch, or a *orders.EarlyError
	}{
		{"at pay_by", pending, 1, payBy, payBy, true, nil},
		{"late", pending, 1, payBy, payBy.Add(time.Hour), true, nil},
		{"deadline within the tolerance", pending, 1, payBy.Add(-time.Microsecond), payBy, true, nil},
		{"stale version after extend", extended.Order, 1, payBy, payBy, false, nil},
		{"future version", pending, 2, payBy, payBy, false, nil},
		{"paid", paid.Order, 2, payBy, payBy, false, nil},
		{"early by this clock", pending, 1, payBy, payBy.Add(-time.Nanosecond), false, &orders.EarlyError{PayBy: payBy}},
		{"another deadline", pending, 1, payBy.Add(-time.Minute), payBy, false, orders.ErrDeadlineMismatch},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ch, applied, err := tt.o.Expire(tt.version, tt.deadline, tt.at)
			var early *orders.EarlyError
			switch want := tt.wantErr.(type) {
			case nil:
				if err != nil {
					t.Fatalf("err = %v", err)
				}
			case *orders.EarlyError:
				if !errors.As(err, &early) || !early.PayBy.Equal(want.PayBy) {
					t.Fatalf("err = %v, want an EarlyError until %v", err, want.PayBy)
				}
			default:
				if !errors.Is(err, want) {
					t.Fatalf("err = %v, want %v", err, want)
				}
			}
			if applied != tt.applied {
				t.Fatalf("applied = %v, want %v", applied, tt.applied)
			}
			if applied && (ch.Order.Status != orders.StatusCancelled || ch.Order.CancelReason != orders.CancelPaymentTimeout ||
				ch.Order.Version != tt.version+1 || ch.Command != nil || ch.Event == nil || ch.Event.Type != events.OrderCancelled) {
				t.Fatalf("change = %+v", ch)
			}
		})
	}
}

// TestReconcile: only a pending order overdue by more than the margin is
// cancelled, with the event of a timeout cancellation and a clear command.
func TestReconcile(t *testing.T) {
	t.Parallel()
	pending := newOrder(t)
	payBy, margin := pending.PayBy, 30*time.Second
	paid, _ := pending.Pay(now, 0)
	tests := []struct {
		name    string
		o       orders.Order
		at      time.Time
		applied bool
	}{
		{"overdue by more than the margin", pending, payBy.Add(margin + time.Nanosecond), true},
		{"overdue by the margin exactly", pending, payBy.Add(margin), false},
		{"overdue by less than the margin", pending, payBy.Add(time.Second), false},
		{"before pay_by", pending, payBy.Add(-time.Second), false},
		{"paid", paid.Order, payBy.Add(time.Hour), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ch, applied := tt.o.Reconcile(tt.at, margin)
			if applied != tt.applied {
				t.Fatalf("applied = %v, want %v", applied, tt.applied)
			}
			if !applied {
				return
			}
			o := ch.Order
			if o.Status != orders.StatusCancelled || o.CancelReason != orders.CancelPaymentTimeout || o.Version != tt.o.Version+1 ||
				ch.Event == nil || ch.Event.Type != events.OrderCancelled || ch.Event.CancelReason != events.CancelPaymentTimeout ||
				ch.Command == nil || ch.Command.Kind != events.KindClear || ch.Command.Version != o.Version || ch.Command.Validate() != nil {
				t.Fatalf("change = %+v, command %+v, event %+v", o, ch.Command, ch.Event)
			}
		})
	}
}
