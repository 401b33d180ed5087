package sim

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/ordertimeout/ordertimeout/services/timeoutd/internal/lease"
)

// leases is instance id's Leases.
type leases struct {
	w  *World
	id string
}

var _ lease.Table = leases{}

// cluster returns what a heartbeat or probe learns, under w.mu.
func (l leases) cluster(now time.Time) lease.Beat {
	b := lease.Beat{Live: 1, DBTime: now, Server: l.w.server()}
	for id, in := range l.w.pg.insts {
		if id != l.id && in.serving && l.w.graceExpiry(in.expires, in).After(now) && !l.w.gone(id, now) {
			b.Live++
		}
	}
	for _, ls := range l.w.pg.leases {
		if ls.owner == "" || l.w.gone(ls.owner, now) {
			b.Takeable++
			continue
		}
		if d := l.w.graceExpiry(ls.expires, l.w.pg.insts[ls.owner]).Sub(now); ls.owner != l.id && d > 0 && (b.NextExpiry == 0 || d < b.NextExpiry) {
			b.NextExpiry = d
		}
	}
	return b
}

func (l leases) Heartbeat(ctx context.Context, id string, ttl time.Duration, _ []byte, serving bool) (b lease.Beat, err error) {
	err = l.w.statement(ctx, l.id, true, func(now time.Time) error {
		in := l.w.pg.insts[id]
		l.w.see(in, now)
		if in == nil {
			in = &instance{seenAt: now}
			l.w.pg.insts[id] = in
		}
		in.expires, in.serving, in.beatAt = now.Add(ttl), serving, now
		b = l.cluster(now)
		return nil
	})
	return b, err
}

func (l leases) Probe(ctx context.Context, id string, _ time.Duration) (live, takeable int, err error) {
	err = l.w.statement(ctx, l.id, true, func(now time.Time) error {
		l.w.see(l.w.pg.insts[id], now)
		b := l.cluster(now)
		live, takeable = b.Live, b.Takeable
		return nil
	})
	return live, takeable, err
}

func (l leases) Acquire(ctx context.Context, id string, n int, held []int, ttl time.Duration) (got []lease.Lease, err error) {
	err = l.w.statement(ctx, l.id, true, func(now time.Time) error {
		got = nil
		for p := range l.w.pg.leases {
			ls := &l.w.pg.leases[p]
			if len(got) == n || slices.Contains(held, p) {
				continue
			}
			if ls.owner == "" || ls.owner == id || !l.w.graceExpiry(ls.expires, l.w.pg.insts[ls.owner]).After(now) || l.w.gone(ls.owner, now) {
				ls.owner, ls.epoch, ls.expires = id, ls.epoch+1, now.Add(ttl)
				got = append(got, lease.Lease{Partition: p, Epoch: ls.epoch})
			}
		}
		if len(got) > 0 {
			l.w.hist.add(time.Now(), "acquire", id, "-", 0, fmt.Sprint(got))
		}
		return nil
	})
	return got, err
}

func (l leases) Renew(ctx context.Context, id string, held []lease.Lease, ttl time.Duration) (out []lease.Lease, err error) {
	err = l.w.statement(ctx, l.id, true, func(now time.Time) error {
		out = nil
		for _, h := range held {
			if ls := &l.w.pg.leases[h.Partition]; ls.owner == id && ls.epoch == h.Epoch {
				ls.expires = now.Add(ttl)
				out = append(out, h)
			}
		}
		return nil
	})
	return out, err
}

func (l leases) Release(ctx context.Context, id string, leases []lease.Lease) error {
	return l.w.statement(ctx, l.id, true, func(now time.Time) error {
		for _, h := range leases {
			if ls := &l.w.pg.leases[h.Partition]; ls.owner == id && ls.epoch == h.Epoch {
				ls.owner, ls.expires = "", time.Time{}
			}
		}
		l.w.hist.add(time.Now(), "release", id, "-", 0, fmt.Sprint(leases))
		return nil
	})
}

// Leave ends id's registration at once, its row kept as the last time it
// was seen (the store's leaveSQL).
func (l leases) Leave(ctx context.Context, id string) error {
	return l.w.statement(ctx, l.id, true, func(now time.Time) error {
		if in := l.w.pg.insts[id]; in != nil {
			in.expires, in.serving, in.seenAt = now, false, now
		}
		return nil
	})
}

// Instances lists, by id, the instances whose registration is live by
// its own expiry, with the partitions each holds under a live lease (the
// store's instancesSQL: the table as it reads, grace aside).
func (l leases) Instances(ctx context.Context) (out []lease.Instance, err error) {
	err = l.w.statement(ctx, l.id, false, func(now time.Time) error {
		out = nil
		for _, id := range slices.Sorted(maps.Keys(l.w.pg.insts)) {
			if !l.w.pg.insts[id].expires.After(now) {
				continue
			}
			in := lease.Instance{ID: id, Info: []byte(`{}`)}
			for p, ls := range l.w.pg.leases {
				if ls.owner == id && ls.expires.After(now) {
					in.Partitions = append(in.Partitions, p)
				}
			}
			out = append(out, in)
		}
		return nil
	})
	return out, err
}

// Ownership reads every lease by the rules Acquire applies (the store's
// ownershipSQL).
func (l leases) Ownership(ctx context.Context, _ time.Duration) (out []lease.PartitionLease, err error) {
	err = l.w.statement(ctx, l.id, false, func(now time.Time) error {
		out = make([]lease.PartitionLease, len(l.w.pg.leases))
		for p, ls := range l.w.pg.leases {
			pl := lease.PartitionLease{Partition: p, Owner: ls.owner, Epoch: ls.epoch}
			until := l.w.graceExpiry(ls.expires, l.w.pg.insts[ls.owner])
			switch {
			case ls.owner == "":
				pl.State = lease.LeaseFree
			case l.w.gone(ls.owner, now):
				pl.State = lease.LeaseOrphaned
			case ls.expires.After(now):
				pl.State = lease.LeaseHeld
			case until.After(now):
				pl.State = lease.LeaseGrace
			default:
				pl.State = lease.LeaseExpired
			}
			if (pl.State == lease.LeaseHeld || pl.State == lease.LeaseGrace) && until.After(now) {
				pl.Left = until.Sub(now)
			}
			out[p] = pl
		}
		return nil
	})
	return out, err
}

// Leases returns instance id's lease table.
func (w *World) Leases(id string) lease.Table { return leases{w: w, id: id} }
