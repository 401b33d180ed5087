package timeoutd

import (
	"context"
	"time"

	"github.com/ordertimeout/ordertimeout/pkg/events"
)

// Contact with Postgres. The others take this instance's partitions at
// once when its database sessions have all been gone for CrashGrace (it
// crashed, by the Leases' crash detection), without waiting for its leases
// to expire; an instance only cut off from the database (its statements
// hang, while the database already dropped its sessions) still trusts its
// leases until the renew deadline. So the fire path publishes only while
// the last statement that reached the database was sent less than
// Config.contactWindow ago (ownership.inContact): its session was alive
// after that moment, so no other instance can hold its partitions before
// CrashGrace after it. Every successful Store and Leases call records its
// send time: under load the fire path's own marks prove contact, idle the
// probes every LeaseProbeInterval do.

// contactStore is the Store of a Service: each successful call records
// its send time as a contact.
type contactStore struct {
	Store
	own *ownership
}

func (s contactStore) Apply(ctx context.Context, fence Fence, cmds []events.Command, now time.Time) ([]Change, []int, error) {
	sent := s.own.now()
	changes, refused, err := s.Store.Apply(ctx, fence, cmds, now)
	s.own.contacted(sent, err)
	return changes, refused, err
}

func (s contactStore) DueRows(ctx context.Context, due []Due) ([]Timeout, error) {
	sent := s.own.now()
	rows, err := s.Store.DueRows(ctx, due)
	s.own.contacted(sent, err)
	return rows, err
}

func (s contactStore) MarkFired(ctx context.Context, fence Fence, due []Due, firedAt time.Time) ([]int, error) {
	sent := s.own.now()
	refused, err := s.Store.MarkFired(ctx, fence, due, firedAt)
	s.own.contacted(sent, err)
	return refused, err
}

func (s contactStore) LoadPending(ctx context.Context, partition int, afterKey string, limit int) ([]Timeout, error) {
	sent := s.own.now()
	rows, err := s.Store.LoadPending(ctx, partition, afterKey, limit)
	s.own.contacted(sent, err)
	return rows, err
}

// contactLeases is the Leases of a Service: each successful heartbeat,
// probe and renewal records its send time as a contact.
type contactLeases struct {
	Leases
	own *ownership
}

func (l contactLeases) Heartbeat(ctx context.Context, id string, ttl time.Duration, info []byte, serving bool) (Beat, error) {
	sent := l.own.now()
	b, err := l.Leases.Heartbeat(ctx, id, ttl, info, serving)
	l.own.contacted(sent, err)
	return b, err
}

func (l contactLeases) Probe(ctx context.Context, id string, ttl time.Duration) (int, int, error) {
	sent := l.own.now()
	live, takeable, err := l.Leases.Probe(ctx, id, ttl)
	l.own.contacted(sent, err)
	return live, takeable, err
}

func (l contactLeases) Renew(ctx context.Context, id string, held []Lease, ttl time.Duration) ([]Lease, error) {
	sent := l.own.now()
	renewed, err := l.Leases.Renew(ctx, id, held, ttl)
	l.own.contacted(sent, err)
	return renewed, err
}

// contacted records a statement sent at sent that reached the database
// (err is nil): the latest such send time is kept. One that ends a gap of
// the contact window or more (the link was cut, or the database slow)
// also withdraws the leases' trust: the others may have read this
// instance as crashed meanwhile and taken its partitions, so the fires
// wait for a renewal to prove which leases are still its own.
func (o *ownership) contacted(sent time.Time, err error) {
	if err != nil {
		return
	}
	for {
		last := o.contact.Load()
		if last != nil && !sent.After(*last) {
			return
		}
		if o.contact.CompareAndSwap(last, &sent) {
			if last != nil && sent.Sub(*last) >= o.contactWindow {
				o.trustUntil(time.Time{})
			}
			return
		}
	}
}

// inContact reports whether the last statement that reached the database
// was sent less than the contact window ago, by the monotonic clock.
func (o *ownership) inContact() bool {
	c := o.contact.Load()
	return c != nil && o.now().Sub(*c) < o.contactWindow
}
