package lease

import (
	"testing"
	"time"
)

// TestGate: a gate answers for its partitions as the Ownership stood when
// it was taken: the instance's reason first (untrusted, out of contact),
// then the partition's (unowned, opening); its fence names the owned
// partitions at their epochs, and each partition's stream fence; Recheck
// sees the trust run out and a partition lost or taken again since.
func TestGate(t *testing.T) {
	now := time.Unix(1000, 0)
	clock := func() time.Time { return now }
	setup := func(trusted, contact bool) *Ownership {
		o := NewOwnership("me", clock, time.Second)
		o.Gain(Lease{Partition: 1, Epoch: 3})
		o.Gain(Lease{Partition: 2, Epoch: 4})
		o.OpenAt(1, 3)
		o.Fenced(1, 3, 70)
		if trusted {
			o.TrustUntil(now.Add(time.Second))
		}
		if contact {
			o.Contacted(now, nil)
		}
		return o
	}
	for _, tt := range []struct {
		name             string
		trusted, contact bool
		want             map[int]Why
	}{
		{"trusted, in contact", true, true, map[int]Why{1: "", 2: Opening, 5: Unowned}},
		{"untrusted", false, true, map[int]Why{1: Untrusted, 2: Untrusted, 5: Untrusted}},
		{"out of contact", true, false, map[int]Why{1: OutOfContact, 2: OutOfContact, 5: OutOfContact}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			g := setup(tt.trusted, tt.contact).Gate([]int{1, 2, 5})
			for p, want := range tt.want {
				if got := g.May(p); got != want {
					t.Errorf("May(%d) = %q, want %q", p, got, want)
				}
			}
		})
	}
	o := setup(true, true)
	g := o.PinGate([]int{1, 2, 5})
	if f := g.Fence(); len(f.Leases) != 2 || f.Leases[0] != (Lease{1, 3}) || f.Leases[1] != (Lease{2, 4}) || f.Owner != "me" {
		t.Errorf("Fence() = %+v, want me at 1@3 and 2@4", f)
	}
	if g.StreamFence(1) != 70 || g.StreamFence(2) != 0 {
		t.Errorf("StreamFence = %d, %d; want 70, 0", g.StreamFence(1), g.StreamFence(2))
	}
	if o.pins[1].Load() != 1 || o.pins[2].Load() != 0 {
		t.Errorf("pins = %d, %d; want the open partition pinned only", o.pins[1].Load(), o.pins[2].Load())
	}
	if why := g.Recheck(); why != "" {
		t.Errorf("Recheck() = %q at once, want it to hold", why)
	}
	o.Lose(1)
	o.Gain(Lease{Partition: 1, Epoch: 5})
	if why := g.Recheck(); why != Unowned {
		t.Errorf("Recheck() after partition 1 was taken again at another epoch = %q, want %q", why, Unowned)
	}
	g.Close()
	if o.pins[1].Load() != 0 {
		t.Errorf("pins after Close = %d, want 0", o.pins[1].Load())
	}
	now = now.Add(2 * time.Second)
	if why := o.Gate([]int{2}).Recheck(); why != Untrusted {
		t.Errorf("Recheck() past the trust = %q, want %q", why, Untrusted)
	}
	v := setup(true, true).View()
	if v[1] != "" || v[2] != Opening || v[0] != Unowned {
		t.Errorf("View = %q, %q, %q for partitions 1, 2, 0; want may fire, opening, unowned", v[1], v[2], v[0])
	}
}
