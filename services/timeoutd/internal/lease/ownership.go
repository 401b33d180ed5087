package lease

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ordertimeout/ordertimeout/internal/retry"
	"github.com/ordertimeout/ordertimeout/pkg/events"
)

// Ownership is what this instance owns, read by ingest, the fire path and
// the janitor on every batch: the epoch of each partition's lease (0: not
// owned), whether its fires may go (the backlog that waited for it is
// consumed), whether the leases are trusted (renewed lately) and whether
// this instance is in contact with Postgres. The [Membership] writes it
// (Gain, Lose, OpenAt, TrustUntil); its methods are safe for concurrent
// use.
type Ownership struct {
	id     string
	now    func() time.Time // the monotonic clock Trusted and InContact read
	epochs [events.Partitions]atomic.Int64
	opened [events.Partitions]atomic.Bool
	// fences are, per partition, the expiry stream's sequence of the fence
	// this instance published as it took it over (0: none): every event it
	// publishes for the partition names it, and the stream refuses one
	// whose fence is no longer the partition's last.
	fences [events.Partitions]atomic.Uint64
	// until is when the leases stop being trusted without a renewal (the
	// membership's validUntil), read by the fire path before it publishes.
	until atomic.Pointer[time.Time]
	// trusted, when not nil, is closed by the next TrustUntil that
	// trusts the leases (see Retrusted).
	trustMu sync.Mutex
	trusted chan struct{}
	// contact is the send time of the last statement that reached the
	// database, and contactWindow how long after it fires are published
	// (see Contacted).
	contact       atomic.Pointer[time.Time]
	contactWindow time.Duration
	// pins counts, per partition, the fire batches publishing its events
	// (Pin): a partition handed over is released only once none is left.
	pins [events.Partitions]atomic.Int32
}

// NewOwnership returns the Ownership of instance id, owning nothing, on
// the clock now (monotonic: time.Now in production); contactWindow is how
// long after the last statement that reached Postgres its fires are
// published (see Contacted).
func NewOwnership(id string, now func() time.Time, contactWindow time.Duration) *Ownership {
	return &Ownership{id: id, now: now, contactWindow: contactWindow}
}

// Pin marks parts as being published for, and reports which of them are
// open here: the others are unpinned at once, and their events must not
// be published. A partition lost after Pin reported it open waits, before
// its release, for Unpin.
func (o *Ownership) Pin(parts []int) (open []bool) {
	open = make([]bool, len(parts))
	for i, p := range parts {
		o.pins[p].Add(1)
		if open[i] = o.Open(p); !open[i] {
			o.pins[p].Add(-1)
		}
	}
	return open
}

// Unpin ends the publish pin reported open for parts.
func (o *Ownership) Unpin(parts []int) {
	for _, p := range parts {
		o.pins[p].Add(-1)
	}
}

// settled waits, up to wait, until no fire batch publishes for the
// partitions of leases (lost here already: Pin refuses them), and returns
// those still published for then.
func (o *Ownership) settled(ctx context.Context, leases []Lease, wait time.Duration) (busy []Lease) {
	deadline := o.now().Add(wait)
	for {
		busy = busy[:0]
		for _, l := range leases {
			if o.pins[l.Partition].Load() > 0 {
				busy = append(busy, l)
			}
		}
		if len(busy) == 0 || !o.now().Before(deadline) || !retry.Sleep(ctx, time.Millisecond) {
			return busy
		}
	}
}

// TrustUntil records when the leases stop being trusted without a
// renewal (the zero time: now).
func (o *Ownership) TrustUntil(t time.Time) {
	o.until.Store(&t)
	if !t.After(o.now()) {
		return
	}
	o.trustMu.Lock()
	defer o.trustMu.Unlock()
	if o.trusted != nil {
		close(o.trusted)
		o.trusted = nil
	}
}

// Retrusted returns a channel closed once a renewal trusts the leases
// after this call, for the fires that wait for one: a caller that found
// the leases untrusted checks Trusted again after taking it.
func (o *Ownership) Retrusted() <-chan struct{} {
	o.trustMu.Lock()
	defer o.trustMu.Unlock()
	if o.trusted == nil {
		o.trusted = make(chan struct{})
	}
	return o.trusted
}

// Trusted reports whether the leases are still trusted: the last renewal
// was sent less than the renew deadline ago, by this process's monotonic
// clock (a process paused longer, or cut off from Postgres, is not).
func (o *Ownership) Trusted() bool {
	u := o.until.Load()
	return u != nil && o.now().Before(*u)
}

// Gain records lease l; its fires stay shut until OpenAt.
func (o *Ownership) Gain(l Lease) {
	o.opened[l.Partition].Store(false)
	o.fences[l.Partition].Store(0)
	o.epochs[l.Partition].Store(l.Epoch)
}

// Lose forgets partition p: every later write for it is refused here, and
// by the fence in Postgres whatever this instance still believes.
func (o *Ownership) Lose(p int) {
	o.epochs[p].Store(0)
	o.opened[p].Store(false)
	o.fences[p].Store(0)
}

// Fenced records seq, the expiry stream's sequence of partition p's fence,
// if p is still owned at epoch, and reports whether it did.
func (o *Ownership) Fenced(p int, epoch int64, seq uint64) bool {
	if o.epochs[p].Load() != epoch {
		return false
	}
	o.fences[p].Store(seq)
	return o.epochs[p].Load() == epoch
}

// StreamFence returns the expiry stream's sequence of partition p's fence
// (0: none), which every event published for it names.
func (o *Ownership) StreamFence(p int) uint64 { return o.fences[p].Load() }

// OpenAt opens partition p's fires if it is still owned at epoch, and
// reports whether it did.
func (o *Ownership) OpenAt(p int, epoch int64) bool {
	if o.epochs[p].Load() != epoch {
		return false
	}
	o.opened[p].Store(true)
	return true
}

// Epoch returns the epoch partition p is owned at (0: not owned).
func (o *Ownership) Epoch(p int) int64 { return o.epochs[p].Load() }

// HeldAt returns whether a partition is still owned at the epoch leases
// grant it (false for one leases do not name): what was read or written
// under leases still belongs to this instance's schedule.
func (o *Ownership) HeldAt(leases []Lease) func(partition int) bool {
	var at [events.Partitions]int64 // epochs only grow from 1: 0 is none
	for _, l := range leases {
		at[l.Partition] = l.Epoch
	}
	return func(p int) bool { return at[p] != 0 && o.Epoch(p) == at[p] }
}

// Owns reports whether partition p is owned: its commands are written.
func (o *Ownership) Owns(p int) bool { return o.epochs[p].Load() != 0 }

// Open reports whether partition p is owned and its fires open.
func (o *Ownership) Open(p int) bool { return o.opened[p].Load() && o.Owns(p) }

// Owned returns the partitions owned, in order.
func (o *Ownership) Owned() []int {
	var out []int
	for p := range events.Partitions {
		if o.Owns(p) {
			out = append(out, p)
		}
	}
	return out
}

// Contact with Postgres. The others take this instance's partitions at
// once when its database sessions have all been gone for the crash grace
// (it crashed, by the Table's crash detection), without waiting for its
// leases to expire; an instance only cut off from the database (its
// statements hang, while the database already dropped its sessions) still
// trusts its leases until the renew deadline. So the fire path publishes
// only while the last statement that reached the database was sent less
// than the contact window ago (InContact): its session was alive after
// that moment, so no other instance can hold its partitions before the
// crash grace after it. Every successful store and lease call records its
// send time (Contacted; Watch for the lease calls): under load the fire
// path's own marks prove contact, idle the probes every probe interval do.

// Contacted records a statement sent at sent that reached the database
// (err is nil): the latest such send time is kept. One that ends a gap of
// the contact window or more (the link was cut, or the database slow)
// also withdraws the leases' trust: the others may have read this
// instance as crashed meanwhile and taken its partitions, so the fires
// wait for a renewal to prove which leases are still its own.
func (o *Ownership) Contacted(sent time.Time, err error) {
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
				o.TrustUntil(time.Time{})
			}
			return
		}
	}
}

// InContact reports whether the last statement that reached the database
// was sent less than the contact window ago, by the monotonic clock.
func (o *Ownership) InContact() bool {
	c := o.contact.Load()
	return c != nil && o.now().Sub(*c) < o.contactWindow
}

// Now reads the clock Trusted and InContact read (monotonic), for the
// send times given to Contacted.
func (o *Ownership) Now() time.Time { return o.now() }

// Watch returns t with each successful Heartbeat, Probe and Renew recorded
// as a contact.
func (o *Ownership) Watch(t Table) Table { return contactTable{t, o} }

type contactTable struct {
	Table
	own *Ownership
}

func (l contactTable) Heartbeat(ctx context.Context, id string, ttl time.Duration, info []byte, serving bool) (Beat, error) {
	sent := l.own.now()
	b, err := l.Table.Heartbeat(ctx, id, ttl, info, serving)
	l.own.Contacted(sent, err)
	return b, err
}

func (l contactTable) Probe(ctx context.Context, id string, ttl time.Duration) (int, int, error) {
	sent := l.own.now()
	live, takeable, err := l.Table.Probe(ctx, id, ttl)
	l.own.Contacted(sent, err)
	return live, takeable, err
}

func (l contactTable) Renew(ctx context.Context, id string, held []Lease, ttl time.Duration) ([]Lease, error) {
	sent := l.own.now()
	renewed, err := l.Table.Renew(ctx, id, held, ttl)
	l.own.Contacted(sent, err)
	return renewed, err
}
