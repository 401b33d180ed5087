package sim

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/ordertimeout/ordertimeout/pkg/events"
	"github.com/ordertimeout/ordertimeout/services/timeoutd"
	"github.com/ordertimeout/ordertimeout/services/timeoutd/internal/lease"
)

// store is instance id's timeoutd.Store.
type store struct {
	w  *World
	id string
}

var _ timeoutd.Store = store{}

// Store returns instance id's store.
func (w *World) Store(id string) timeoutd.Store { return store{w: w, id: id} }

func (s store) Apply(ctx context.Context, fence lease.Fence, cmds []events.Command, now time.Time) (changes []timeoutd.Change, refused []int, err error) {
	err = s.w.statement(ctx, s.id, true, func(at time.Time) error {
		changes, refused = nil, nil
		refused = s.w.fenced(fence, partitionsOf(cmds, func(c events.Command) string { return c.Key }), at)
		for _, c := range cmds {
			if slices.Contains(refused, events.PartitionOf(c.Key)) {
				continue
			}
			r := s.w.pg.rows[c.Key]
			want := timeoutd.StatePending
			if c.Kind == events.KindClear {
				want = timeoutd.StateCleared
			}
			if r != nil && r.version >= c.Version {
				if r.version == c.Version && r.state == want {
					changes = append(changes, timeoutd.Change{Key: c.Key, Version: r.version, State: r.state, Deadline: r.deadline, Plain: r.plain})
				}
				continue
			}
			r = &row{version: c.Version, state: want, deadline: c.Deadline, payload: c.Payload, subject: c.FireSubject,
				maxLate: time.Duration(c.MaxLatenessMs) * time.Millisecond}
			if want == timeoutd.StateCleared {
				r.deadline = now
			} else {
				r.plain = len(c.Payload) == 0 && c.FireSubject == events.OrderCancelSubject(c.Key) && c.MaxLatenessMs == 0 && c.TraceParent == ""
			}
			s.w.pg.rows[c.Key] = r
			s.w.hist.add(time.Now(), "commit", s.id, c.Key, c.Version, string(c.Kind))
			changes = append(changes, timeoutd.Change{Key: c.Key, Version: r.version, State: r.state, Deadline: r.deadline, Plain: r.plain})
			if want == timeoutd.StatePending {
				s.w.checkFits(c.Key, time.Now())
			}
		}
		return nil
	})
	return changes, refused, err
}

func (s store) DueRows(ctx context.Context, due []timeoutd.Due) (out []timeoutd.Timeout, err error) {
	err = s.w.statement(ctx, s.id, false, func(time.Time) error {
		out = nil
		for _, d := range due {
			if r := s.w.pg.rows[d.Key]; r != nil && r.version == d.Version && r.state == timeoutd.StatePending {
				out = append(out, timeoutd.Timeout{Key: d.Key, Partition: events.PartitionOf(d.Key), Version: r.version, State: r.state,
					Deadline: r.deadline, MaxLateness: r.maxLate, FireSubject: r.subject, Payload: r.payload, Plain: r.plain})
			}
		}
		return nil
	})
	return out, err
}

func (s store) MarkFired(ctx context.Context, fence lease.Fence, due []timeoutd.Due, firedAt time.Time) (refused []int, err error) {
	err = s.w.statement(ctx, s.id, true, func(at time.Time) error {
		refused = s.w.fenced(fence, partitionsOf(due, func(d timeoutd.Due) string { return d.Key }), at)
		for _, d := range due {
			r := s.w.pg.rows[d.Key]
			if slices.Contains(refused, events.PartitionOf(d.Key)) || r == nil || r.version != d.Version || r.state != timeoutd.StatePending {
				continue
			}
			r.state, r.deadline = timeoutd.StateFired, firedAt
		}
		return nil
	})
	return refused, err
}

func (s store) LoadPending(ctx context.Context, partition int, afterKey string, limit int) (out []timeoutd.Timeout, err error) {
	err = s.w.statement(ctx, s.id, false, func(time.Time) error {
		out = nil
		for k, r := range s.w.pg.rows {
			if r.state == timeoutd.StatePending && events.PartitionOf(k) == partition && k > afterKey {
				out = append(out, timeoutd.Timeout{Key: k, Version: r.version, Deadline: r.deadline, Plain: r.plain})
			}
		}
		slices.SortFunc(out, func(a, b timeoutd.Timeout) int { return strings.Compare(a.Key, b.Key) })
		out = out[:min(len(out), limit)]
		return nil
	})
	return out, err
}

func (s store) RetireTombstones(context.Context, lease.Fence, time.Time, int) (int, error) {
	return 0, nil
}
func (s store) ForgetMarks(context.Context, lease.Fence, time.Time, int) (int, error) {
	return 0, nil
}
func (s store) ListPending(context.Context, timeoutd.Query) ([]timeoutd.Timeout, error) {
	return nil, nil
}
func (s store) GetPending(context.Context, string) (timeoutd.Timeout, error) {
	return timeoutd.Timeout{}, timeoutd.ErrNotFound
}
func (s store) Ping(ctx context.Context) error {
	return s.w.statement(ctx, s.id, false, func(time.Time) error { return nil })
}

// partitionsOf returns the distinct partitions of keys, in the order
// first seen.
func partitionsOf[T any](items []T, key func(T) string) []int {
	var parts []int
	for _, it := range items {
		if p := events.PartitionOf(key(it)); !slices.Contains(parts, p) {
			parts = append(parts, p)
		}
	}
	return parts
}
