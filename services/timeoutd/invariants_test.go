package timeoutd

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/ordertimeout/ordertimeout/pkg/events"
	"github.com/ordertimeout/ordertimeout/services/timeoutd/internal/schedule"
)

// The schedule's regression tests of an invariant (the cluster's are in
// package sim, beside the simulation).

// TestAnAcknowledgedSetIsNeverLostAtMaxPending: with the schedule full, a
// set of a key whose older version fires while the set is committed must
// keep its room, even when the fire's Done frees the key's slot and
// another set asks for it first; whether the older version was already in
// flight when the set was admitted, or still armed and handed out between
// the admission and the apply.
func TestAnAcknowledgedSetIsNeverLostAtMaxPending(t *testing.T) {
	for _, tt := range []struct {
		name     string
		inFlight bool // k v1 handed out before the set of k v2 is admitted
	}{
		{"in flight at admission", true},
		{"fired between admission and apply", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var handed []schedule.Due
				s, err := schedule.New(schedule.Config{MaxPending: 1, OnDue: func(d []schedule.Due) { handed = append(handed, d...) }})
				if err != nil {
					t.Fatal(err)
				}
				defer s.Stop()
				due := time.Now().Add(10 * time.Millisecond)
				s.Apply([]schedule.Change{{Entry: schedule.Entry{Key: "k", Version: 1, Deadline: due}}})
				fire := func() {
					time.Sleep(20 * time.Millisecond)
					synctest.Wait()
					if len(handed) != 1 {
						t.Fatalf("handed out %v, want k in flight", handed)
					}
				}
				if tt.inFlight {
					fire()
				}
				later := time.Now().Add(time.Hour)
				admitted, _, room := s.Admit([]events.Command{{Kind: events.KindSet, Key: "k", Version: 2, Deadline: later}})
				if !tt.inFlight {
					fire()
				}
				s.Done([]schedule.Ref{handed[0].Ref}) // k v1's mark committed
				other, _, otherRoom := s.Admit([]events.Command{{Kind: events.KindSet, Key: "j", Version: 1, Deadline: later}})
				if len(other) == 1 {
					s.Apply([]schedule.Change{{Entry: schedule.Entry{Key: "j", Version: 1, Deadline: later}}})
				}
				s.Unreserve(otherRoom)
				if len(admitted) == 1 {
					s.Apply([]schedule.Change{{Entry: schedule.Entry{Key: "k", Version: 2, Deadline: later}}})
					if v, ok := s.Version("k"); !ok || v != 2 {
						t.Errorf("k v2 admitted (%+v), committed and acknowledged, but not scheduled (held: %v %d)", room, ok, v)
					}
				}
				s.Unreserve(room)
				// Every slot given back: the set of a new key finds room.
				s.Apply([]schedule.Change{{Clear: true, Entry: schedule.Entry{Key: "k", Version: 3}}, {Clear: true, Entry: schedule.Entry{Key: "j", Version: 2}}})
				if got, deferred, r := s.Admit([]events.Command{{Kind: events.KindSet, Key: "n", Version: 1, Deadline: later}}); len(got) != 1 {
					t.Errorf("room not given back: a new key deferred (%v)", deferred)
				} else {
					s.Unreserve(r)
				}
			})
		})
	}
}
