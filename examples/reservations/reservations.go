// Package reservations is an example service that is not orders: stock
// reservations that expire unless confirmed. It sets a deadline with each
// reservation, in the same transaction, through pkg/timeouts, and consumes
// its own expiry events. README.md walks through it.
package reservations

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ordertimeout/ordertimeout/pkg/events"
	"github.com/ordertimeout/ordertimeout/pkg/outbox"
	"github.com/ordertimeout/ordertimeout/pkg/timeouts"
)

// Tenant is the service's tenant on the platform: its NATS user, the
// namespace of its keys (reservations.<id>) and its commands' subject
// token (timeouts.cmd.reservations.<id>), in the tenant registry
// (deploy/compose/tenants.json) with its fire subject prefix.
const Tenant = "reservations"

// FireSubjectPrefix is where the expiries of reservations go:
// reservations.expire.<id>, the tenant's fire subject prefix in the
// registry.
const FireSubjectPrefix = "reservations.expire."

// Status is a reservation's state: held until confirmed or expired.
type Status string

// The statuses.
const (
	StatusHeld      Status = "held"
	StatusConfirmed Status = "confirmed"
	StatusExpired   Status = "expired"
)

// Reservation is a quantity of a SKU held until ExpiresAt.
type Reservation struct {
	ID        string    `json:"id"`
	SKU       string    `json:"sku"`
	Qty       int       `json:"qty"`
	Status    Status    `json:"status"`
	Version   int64     `json:"version"`
	ExpiresAt time.Time `json:"expires_at"`
}

// Errors of the service.
var (
	ErrNotFound = errors.New("reservations: not found")
	ErrNotHeld  = errors.New("reservations: not held any more")
	ErrInvalid  = errors.New("reservations: invalid request")
)

// schema is the service's own table. The outbox table comes from
// outbox.Migrate.
const schema = `CREATE TABLE IF NOT EXISTS reservations (
	id         text PRIMARY KEY,
	sku        text        NOT NULL,
	qty        int         NOT NULL CHECK (qty > 0),
	status     text        NOT NULL,
	version    bigint      NOT NULL,
	expires_at timestamptz NOT NULL
)`

// Migrate creates the outbox and the reservations table.
func Migrate(ctx context.Context, pool *pgxpool.Pool) error {
	if err := outbox.Migrate(ctx, pool); err != nil {
		return err
	}
	if _, err := pool.Exec(ctx, schema); err != nil {
		return fmt.Errorf("create reservations table: %w", err)
	}
	return nil
}

// Service holds, confirms and expires reservations.
type Service struct {
	pool *pgxpool.Pool
	// deadlines writes the timeout commands into the outbox, in the
	// transaction of the change they belong to.
	deadlines timeouts.Writer
	// committed wakes the outbox relay after a commit (Relay.Kick).
	committed func()
	now       func() time.Time
}

// NewService returns a Service over pool (migrated); committed is called
// after each commit that wrote a command.
func NewService(pool *pgxpool.Pool, committed func(), now func() time.Time) *Service {
	return &Service{pool: pool, committed: committed, now: now,
		deadlines: timeouts.Writer{Tenant: Tenant, FireSubjectPrefixes: []string{FireSubjectPrefix}, Now: now}}
}

// deadline is the timeout of r: at its expiry, on its fire subject, at its
// version.
func deadline(r Reservation) timeouts.Deadline {
	return timeouts.Deadline{Key: r.ID, Version: r.Version, At: r.ExpiresAt, FireSubject: FireSubjectPrefix + r.ID}
}

// Reserve holds qty of sku for ttl and sets the reservation's deadline.
func (s *Service) Reserve(ctx context.Context, sku string, qty int, ttl time.Duration) (Reservation, error) {
	if sku == "" || qty < 1 || ttl <= 0 {
		return Reservation{}, fmt.Errorf("%w: need a sku, a positive qty and a positive ttl", ErrInvalid)
	}
	id, err := uuid.NewV7()
	if err != nil {
		return Reservation{}, fmt.Errorf("new reservation id: %w", err)
	}
	r := Reservation{ID: id.String(), SKU: sku, Qty: qty, Status: StatusHeld, Version: 1, ExpiresAt: s.expiry(ttl)}
	err = s.inTx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO reservations (id, sku, qty, status, version, expires_at) VALUES ($1, $2, $3, $4, $5, $6)`,
			r.ID, r.SKU, r.Qty, r.Status, r.Version, r.ExpiresAt); err != nil {
			return fmt.Errorf("insert reservation: %w", err)
		}
		return s.deadlines.Set(ctx, tx, deadline(r))
	})
	return r, err
}

// expiry returns the time ttl from now, to the microsecond Postgres
// stores, so that the row and its deadline name the same instant.
func (s *Service) expiry(ttl time.Duration) time.Time {
	return s.now().Add(ttl).UTC().Truncate(time.Microsecond)
}

// Extend moves a held reservation's expiry to ttl from now: a newer
// version of its deadline.
func (s *Service) Extend(ctx context.Context, id string, ttl time.Duration) (Reservation, error) {
	return s.change(ctx, id, func(tx pgx.Tx, r Reservation) (Reservation, error) {
		r.ExpiresAt = s.expiry(ttl)
		return r, s.deadlines.Set(ctx, tx, deadline(r))
	})
}

// Confirm confirms a held reservation and clears its deadline.
func (s *Service) Confirm(ctx context.Context, id string) (Reservation, error) {
	return s.change(ctx, id, func(tx pgx.Tx, r Reservation) (Reservation, error) {
		r.Status = StatusConfirmed
		return r, s.deadlines.Clear(ctx, tx, r.ID, r.Version)
	})
}

// Expire applies an expiry event: the reservation expires if it is still
// held at the event's version. Applying it again, or a stale version's, is
// a no-op, so redeliveries are harmless. It reports whether it expired.
func (s *Service) Expire(ctx context.Context, e events.Expiry) (bool, error) {
	tenant, id := events.SplitKey(e.Key) // the event's key is reservations.<id>
	if tenant != Tenant {
		return false, fmt.Errorf("expire reservation: key %q is not of tenant %s", e.Key, Tenant)
	}
	tag, err := s.pool.Exec(ctx, `UPDATE reservations SET status = $1 WHERE id = $2 AND version = $3 AND status = $4`,
		StatusExpired, id, e.Version, StatusHeld)
	if err != nil {
		return false, fmt.Errorf("expire reservation %s: %w", id, err)
	}
	return tag.RowsAffected() == 1, nil
}

// Get returns a reservation or ErrNotFound.
func (s *Service) Get(ctx context.Context, id string) (Reservation, error) {
	return get(ctx, s.pool, id, "")
}

// change locks a held reservation, applies fn to it at the next version
// and stores the result, in one transaction with what fn wrote.
func (s *Service) change(ctx context.Context, id string, fn func(pgx.Tx, Reservation) (Reservation, error)) (Reservation, error) {
	var r Reservation
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		cur, err := get(ctx, tx, id, " FOR UPDATE")
		if err != nil {
			return err
		}
		if cur.Status != StatusHeld {
			return ErrNotHeld
		}
		cur.Version++
		if r, err = fn(tx, cur); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `UPDATE reservations SET status = $1, version = $2, expires_at = $3 WHERE id = $4`, r.Status, r.Version, r.ExpiresAt, r.ID)
		return err
	})
	return r, err
}

// inTx runs fn in a transaction and, once it committed, wakes the relay.
func (s *Service) inTx(ctx context.Context, fn func(pgx.Tx) error) error {
	if err := pgx.BeginFunc(ctx, s.pool, fn); err != nil {
		return err
	}
	s.committed()
	return nil
}

type querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

func get(ctx context.Context, q querier, id, lock string) (Reservation, error) {
	var r Reservation
	var status string
	err := q.QueryRow(ctx, `SELECT id, sku, qty, status, version, expires_at FROM reservations WHERE id = $1`+lock, id).
		Scan(&r.ID, &r.SKU, &r.Qty, &status, &r.Version, &r.ExpiresAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return Reservation{}, ErrNotFound
	}
	if err != nil {
		return Reservation{}, fmt.Errorf("get reservation %s: %w", id, err)
	}
	r.Status, r.ExpiresAt = Status(status), r.ExpiresAt.UTC()
	return r, nil
}
