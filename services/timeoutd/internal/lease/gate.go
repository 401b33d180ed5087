package lease

import "github.com/ordertimeout/ordertimeout/pkg/events"

// Why is why this instance may not fire a partition now; "" when it may.
type Why string

// The reasons, in the order a Gate reports them: the instance's before
// the partition's.
const (
	// Untrusted: the leases were not renewed within the renew deadline,
	// so another instance may hold them by now.
	Untrusted Why = "untrusted"
	// OutOfContact: no statement reached Postgres within the contact
	// window, so the others may read this instance as crashed.
	OutOfContact Why = "out_of_contact"
	// Unowned: no lease of the partition is held here.
	Unowned Why = "unowned"
	// Opening: owned, its takeover not done: its fires wait for the
	// command backlog that waited for it.
	Opening Why = "opening"
)

// Gate is what this instance may do for a batch's partitions, read from
// the Ownership at one moment: each partition's epoch (the fence its
// writes present to Postgres), whether its fires are open, its fence in
// the expiry stream, and whether the leases were trusted and Postgres in
// contact. Ingest and the janitor write under its Fence. The fire path
// takes one per batch with the partitions pinned (PinGate), publishes
// only for those it may fire, each event naming its stream fence, checks
// it again right before the publish (Recheck), and closes it (Close) once
// the publish is over.
type Gate struct {
	o      *Ownership
	parts  []int
	pinned bool
	why    Why // the instance's reason, "" when trusted and in contact
	// Per partition, indexed by it: whether it is one of parts, its
	// epoch (0: not owned), whether its fires were open (and pinned), its
	// stream fence.
	member  [events.Partitions]bool
	epochs  [events.Partitions]int64
	open    [events.Partitions]bool
	streams [events.Partitions]uint64
}

// Gate returns the gate of parts.
func (o *Ownership) Gate(parts []int) *Gate { return o.gate(parts, false) }

// PinGate returns the gate of parts with those open here pinned: a
// partition handed over after it waits, before its release, for Close.
func (o *Ownership) PinGate(parts []int) *Gate { return o.gate(parts, true) }

func (o *Ownership) gate(parts []int, pin bool) *Gate {
	g := &Gate{o: o, parts: parts, pinned: pin}
	var open []bool
	if pin {
		open = o.Pin(parts)
	}
	for i, p := range parts {
		g.member[p], g.epochs[p], g.streams[p] = true, o.Epoch(p), o.StreamFence(p)
		if pin {
			g.open[p] = open[i]
		} else {
			g.open[p] = o.Open(p)
		}
	}
	g.why = o.why()
	return g
}

// why is the instance's reason not to fire now.
func (o *Ownership) why() Why {
	switch {
	case !o.Trusted():
		return Untrusted
	case !o.InContact():
		return OutOfContact
	}
	return ""
}

// Why returns why the instance may fire none of the gate's partitions,
// "" when it may fire those open.
func (g *Gate) Why() Why { return g.why }

// May returns why partition p, one of the gate's, may not be fired: the
// instance's reason, else the partition's; "" when it may.
func (g *Gate) May(p int) Why {
	if g.why != "" {
		return g.why
	}
	return g.state(p)
}

// state returns the partition's own reason: Unowned, Opening, or "".
func (g *Gate) state(p int) Why {
	switch {
	case !g.member[p] || g.epochs[p] == 0:
		return Unowned
	case !g.open[p]:
		return Opening
	}
	return ""
}

// Open reports whether partition p's fires were open when the gate was
// taken (and, for a PinGate, pinned).
func (g *Gate) Open(p int) bool { return g.state(p) == "" }

// Owned reports whether partition p was owned when the gate was taken.
func (g *Gate) Owned(p int) bool { return g.state(p) != Unowned }

// Fence returns the fence of the gate's owned partitions at their epochs.
func (g *Gate) Fence() Fence {
	f := Fence{Owner: g.o.id}
	for _, p := range g.parts {
		if g.epochs[p] != 0 {
			f.Leases = append(f.Leases, Lease{Partition: p, Epoch: g.epochs[p]})
		}
	}
	return f
}

// StreamFence returns partition p's fence in the expiry stream when the
// gate was taken (0: none).
func (g *Gate) StreamFence(p int) uint64 {
	if g.member[p] {
		return g.streams[p]
	}
	return 0
}

// Recheck returns why the gate no longer holds: the leases no longer
// trusted, Postgres out of contact, or a partition open in the gate since
// lost or taken again at another epoch (Unowned); "" when it still holds.
func (g *Gate) Recheck() Why {
	if why := g.o.why(); why != "" {
		return why
	}
	for _, p := range g.parts {
		if g.open[p] && g.o.Epoch(p) != g.epochs[p] {
			return Unowned
		}
	}
	return ""
}

// Close unpins what PinGate pinned; a Gate not pinned needs none.
func (g *Gate) Close() {
	if g.pinned {
		var open []int
		for _, p := range g.parts {
			if g.open[p] {
				open = append(open, p)
			}
		}
		g.o.Unpin(open)
	}
}

// View returns, for every partition, why this instance may not fire it
// now ("" when it may): the same reasons the fire path's gates give.
func (o *Ownership) View() [events.Partitions]Why {
	all := make([]int, events.Partitions)
	for p := range all {
		all[p] = p
	}
	g := o.Gate(all)
	var v [events.Partitions]Why
	for p := range v {
		if v[p] = g.state(p); v[p] != Unowned && g.why != "" {
			v[p] = g.why
		}
	}
	return v
}
