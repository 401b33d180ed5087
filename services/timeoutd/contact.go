package timeoutd

import (
	"context"
	"time"

	"github.com/ordertimeout/ordertimeout/pkg/events"
	"github.com/ordertimeout/ordertimeout/services/timeoutd/internal/lease"
)

// contactStore is the Store of a Service: each successful call records
// its send time as a contact with Postgres (lease.Ownership.Contacted):
// under load the fire path's own marks prove contact, idle the membership's
// probes do.
type contactStore struct {
	Store
	own *lease.Ownership
}

func (s contactStore) Apply(ctx context.Context, fence lease.Fence, cmds []events.Command, now time.Time) ([]Change, []int, error) {
	sent := s.own.Now()
	changes, refused, err := s.Store.Apply(ctx, fence, cmds, now)
	s.own.Contacted(sent, err)
	return changes, refused, err
}

func (s contactStore) DueRows(ctx context.Context, due []Due) ([]Timeout, error) {
	sent := s.own.Now()
	rows, err := s.Store.DueRows(ctx, due)
	s.own.Contacted(sent, err)
	return rows, err
}

func (s contactStore) MarkFired(ctx context.Context, fence lease.Fence, due []Due, firedAt time.Time) ([]int, error) {
	sent := s.own.Now()
	refused, err := s.Store.MarkFired(ctx, fence, due, firedAt)
	s.own.Contacted(sent, err)
	return refused, err
}

func (s contactStore) LoadPending(ctx context.Context, partition int, afterKey string, limit int) ([]Timeout, error) {
	sent := s.own.Now()
	rows, err := s.Store.LoadPending(ctx, partition, afterKey, limit)
	s.own.Contacted(sent, err)
	return rows, err
}
