package orders

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"log/slog"
	"time"

	"github.com/google/uuid"

	"github.com/ordertimeout/ordertimeout/pkg/events"
)

// Store persists orders. Every method that changes an order writes the
// Change's command and event to the outbox in the same transaction.
// Implementations return *Error values for domain failures (ErrNotFound,
// ErrConflict, ErrIdempotencyMismatch) and wrapped errors otherwise.
type Store interface {
	// Create inserts ch. With a non-nil key it first claims the key for the
	// request hash: a key already used with the same hash returns the order
	// stored with it and replayed=true (nothing is written); a different
	// hash is ErrIdempotencyMismatch.
	Create(ctx context.Context, ch Change, key *IdempotencyKey) (o Order, replayed bool, err error)
	// Get returns the order id, or ErrNotFound.
	Get(ctx context.Context, id string) (Order, error)
	// List returns a page of orders in a stable order (newest id first).
	List(ctx context.Context, f ListFilter) (Page, error)
	// Update locks order id, calls fn with it and, when fn succeeds, writes
	// the Change it returns. It returns fn's error unchanged.
	Update(ctx context.Context, id string, fn func(Order) (Change, error)) (Order, error)
	// ExpireAll applies Order.Expire(e.Version, e.Deadline, now) to the
	// order of each e in exps, in turn, in one transaction, writing the
	// cancelled events; result i tells what became of exps[i] (an order
	// named twice sees the first's outcome). A result's Err is ErrNotFound
	// when no such order exists, or Order.Expire's error unchanged; it does
	// not stop the others. A returned error means nothing was written.
	ExpireAll(ctx context.Context, exps []Expiry, now time.Time) ([]ExpireResult, error)
	// CountByStatus returns how many orders are in each status.
	CountByStatus(ctx context.Context) (map[Status]int64, error)
}

// Expiry is a cancel event to apply: order ID, at Version, whose payment
// deadline Deadline passed.
type Expiry struct {
	ID       string
	Version  int64
	Deadline time.Time
	// TraceParent is the W3C trace context of the span applying the event,
	// carried by the cancelled event it writes; "" when untraced.
	TraceParent string
}

// ExpireResult is what applying one Expiry did: Applied when it cancelled
// the order (then Order is the cancelled order), false for a stale or
// duplicate event (Order as found), or Err (see Store.ExpireAll).
type ExpireResult struct {
	Order   Order
	Applied bool
	Err     error
}

// IdempotencyKey is the Idempotency-Key of a create request and the hash of
// its canonical body.
type IdempotencyKey struct {
	Key  string
	Hash []byte
}

// ListFilter selects a page of orders.
type ListFilter struct {
	// Status and CustomerID filter when set.
	Status     Status
	CustomerID string
	// Limit is the page size, 1 to ListLimitMax.
	Limit int
	// After is the id of the last order of the previous page ("" = first).
	After string
}

// Limits of list pages.
const (
	ListLimitDefault = 50
	ListLimitMax     = 500
	// MaxIdempotencyKeyLen bounds the Idempotency-Key header, in bytes.
	MaxIdempotencyKeyLen = 255
)

// Page is a page of orders and the id to continue after ("" at the end).
type Page struct {
	Items []Order
	Next  string
}

// Service applies the order use cases to a Store.
type Service struct {
	store  Store
	limits Limits
	grace  time.Duration
	now    func() time.Time
	log    *slog.Logger
}

// ServiceConfig configures a Service.
type ServiceConfig struct {
	// Limits bounds payment deadlines; zero fields take PayWithinMinDefault
	// and PayWithinMaxDefault.
	Limits Limits
	// PaymentGrace is how long after an order's pay_by a payment is still
	// accepted (while the order is pending); default 0, must not be
	// negative. The deadline is decided by Now, the same clock that checks
	// a cancel event is not early (Order.Expire).
	PaymentGrace time.Duration
	// Now is the clock; default time.Now.
	Now func() time.Time
	// Logger; default slog.Default().
	Logger *slog.Logger
}

// NewService returns a Service over store.
func NewService(store Store, cfg ServiceConfig) (*Service, error) {
	lim := Limits{
		PayWithinMin: cmp.Or(cfg.Limits.PayWithinMin, PayWithinMinDefault),
		PayWithinMax: cmp.Or(cfg.Limits.PayWithinMax, PayWithinMaxDefault),
	}
	if lim.PayWithinMin <= 0 || lim.PayWithinMax < lim.PayWithinMin {
		return nil, fmt.Errorf("orders: Limits: need 0 < PayWithinMin <= PayWithinMax, got %s and %s", lim.PayWithinMin, lim.PayWithinMax)
	}
	if cfg.PaymentGrace < 0 {
		return nil, fmt.Errorf("orders: PaymentGrace must not be negative, got %s", cfg.PaymentGrace)
	}
	s := &Service{store: store, limits: lim, grace: cfg.PaymentGrace, now: cfg.Now, log: cfg.Logger}
	if s.now == nil {
		s.now = time.Now
	}
	if s.log == nil {
		s.log = slog.Default()
	}
	return s, nil
}

// Create creates an order; idemKey is the Idempotency-Key header ("" = none).
// replayed reports that the answer is the stored one of an earlier request.
func (s *Service) Create(ctx context.Context, req CreateRequest, idemKey string) (o Order, replayed bool, err error) {
	var key *IdempotencyKey
	if idemKey != "" {
		if len(idemKey) > MaxIdempotencyKeyLen || !identifier(idemKey) {
			return Order{}, false, Invalid("Idempotency-Key", "must be at most %d bytes of %s", MaxIdempotencyKeyLen, identifierText)
		}
		// The canonical body: the decoded request re-encoded, so whitespace
		// and field order do not make a retry look different.
		body, err := json.Marshal(req)
		if err != nil {
			return Order{}, false, fmt.Errorf("hash request: %w", err)
		}
		sum := sha256.Sum256(body)
		key = &IdempotencyKey{Key: idemKey, Hash: sum[:]}
	}
	id, err := uuid.NewV7()
	if err != nil {
		return Order{}, false, fmt.Errorf("new order id: %w", err)
	}
	ch, err := NewOrder(id.String(), req, s.now(), s.limits)
	if err != nil {
		return Order{}, false, err
	}
	return s.store.Create(ctx, ch, key)
}

// Get returns an order or ErrNotFound.
func (s *Service) Get(ctx context.Context, id string) (Order, error) {
	if err := checkID(id); err != nil {
		return Order{}, err
	}
	return s.store.Get(ctx, id)
}

// List returns a page of orders; a zero Limit takes ListLimitDefault.
func (s *Service) List(ctx context.Context, f ListFilter) (Page, error) {
	f.Limit = cmp.Or(f.Limit, ListLimitDefault)
	var fe []FieldError
	if f.Status != "" && !f.Status.Valid() {
		fe = append(fe, FieldError{"status", "must be pending_payment, paid or cancelled"})
	}
	if f.Limit < 1 || f.Limit > ListLimitMax {
		fe = append(fe, FieldError{"limit", fmt.Sprintf("must be between 1 and %d", ListLimitMax)})
	}
	if len(f.CustomerID) > MaxTextLen || !identifier(f.CustomerID) {
		fe = append(fe, FieldError{"customer_id", fmt.Sprintf("must be at most %d bytes of %s", MaxTextLen, identifierText)})
	}
	if err := validationError(fe); err != nil {
		return Page{}, err
	}
	return s.store.List(ctx, f)
}

// Pay marks order id paid, or refuses with ErrDeadlinePassed once its pay_by
// plus PaymentGrace has passed by the service's clock, read with the row
// locked.
func (s *Service) Pay(ctx context.Context, id string) (Order, error) {
	return s.update(ctx, id, func(o Order) (Change, error) { return o.Pay(s.now(), s.grace) })
}

// Cancel cancels order id at the customer's request.
func (s *Service) Cancel(ctx context.Context, id string) (Order, error) {
	return s.update(ctx, id, func(o Order) (Change, error) { return o.Cancel(s.now()) })
}

// Extend moves the payment deadline of order id.
func (s *Service) Extend(ctx context.Context, id string, d Deadline) (Order, error) {
	return s.update(ctx, id, func(o Order) (Change, error) { return o.Extend(d, s.now(), s.limits) })
}

// ExpireAll applies cancel events in one transaction: each order is
// cancelled for a payment timeout if it is still pending_payment at the
// event's version and its pay_by passed. Result i is about exps[i]:
// Applied is false for a stale or duplicate event; see Order.Expire and
// Store.ExpireAll for the errors.
func (s *Service) ExpireAll(ctx context.Context, exps []Expiry) ([]ExpireResult, error) {
	return s.store.ExpireAll(ctx, exps, s.now())
}

func (s *Service) update(ctx context.Context, id string, fn func(Order) (Change, error)) (Order, error) {
	if err := checkID(id); err != nil {
		return Order{}, err
	}
	return s.store.Update(ctx, id, fn)
}

// checkID rejects ids that cannot exist, so they never reach the store.
func checkID(id string) error {
	if !events.ValidKey(id) {
		return ErrNotFound
	}
	return nil
}
