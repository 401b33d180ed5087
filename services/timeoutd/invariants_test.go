package timeoutd

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ordertimeout/ordertimeout/pkg/events"
	"github.com/ordertimeout/ordertimeout/services/timeoutd/internal/schedule"
)

// The invariants' regression tests: each replays, in the simulation's
// world, the one schedule of faults and commands that broke an invariant,
// and asserts the invariants with the simulation's checker.

// simCluster is a cluster of n instances in the simulation's world, for a
// test inside a synctest bubble; tweak adjusts each one's Config.
type simCluster struct {
	w     *world
	nodes []*simNode
	keys  map[string]*simKey
}

func newSimCluster(t *testing.T, n int, tweak func(*Config)) *simCluster {
	t.Helper()
	w := newWorld(worldConfig{ackWait: 5 * time.Second, dedupe: 2 * time.Minute, crashGrace: CrashGraceDefault, ttl: LeaseTTLDefault,
		batch: 64, rand: func() float64 { return 1 }})
	c := &simCluster{w: w, keys: map[string]*simKey{}}
	for i := range n {
		node := newSimNode(w, fmt.Sprintf("t%d", i+1))
		node.cfg = Config{InstanceID: node.id, Now: node.wall, Logger: discardLogger(), MaxPending: 1000,
			RetryDelay: 200 * time.Millisecond, RecoveryCatchupMax: 2 * time.Second}
		if tweak != nil {
			tweak(&node.cfg)
		}
		c.nodes = append(c.nodes, node)
		node.start(t)
	}
	time.Sleep(2 * time.Second) // every partition owned and open
	return c
}

// set produces a set of key at version v due at deadline (a plain one).
func (c *simCluster) set(key string, v int64, deadline time.Time) {
	cmd := events.Command{Schema: events.SchemaVersion, Kind: events.KindSet, Key: key, Version: v, Deadline: deadline.UTC(),
		FireSubject: events.OrderCancelSubject(key)}
	c.keys[key] = &simKey{key: key, version: v, deadline: deadline, last: cmd}
	c.w.produce(cmd)
}

// clear produces a clear of key at version v.
func (c *simCluster) clear(key string, v int64) {
	cmd := events.Command{Schema: events.SchemaVersion, Kind: events.KindClear, Key: key, Version: v}
	c.keys[key] = &simKey{key: key, version: v, cleared: true, last: cmd}
	c.w.produce(cmd)
}

// node returns the instance that owns key's partition.
func (c *simCluster) node(t *testing.T, key string) *simNode {
	t.Helper()
	c.w.mu.Lock()
	owner := c.w.leases[events.PartitionOf(key)].owner
	c.w.mu.Unlock()
	i := slices.IndexFunc(c.nodes, func(n *simNode) bool { return n.id == owner })
	if i < 0 {
		t.Fatalf("nobody owns %s's partition", key)
	}
	return c.nodes[i]
}

// finish stops the cluster and fails t with the history when the checker
// finds a violation.
func (c *simCluster) finish(t *testing.T) {
	t.Helper()
	for _, n := range c.nodes {
		n.crash()
	}
	c.w.mu.Lock()
	defer c.w.mu.Unlock()
	check(c.w, c.keys, time.Now())
	if len(c.w.hist.violations) > 0 {
		t.Errorf("%s\nhistory:\n%s", strings.Join(c.w.hist.violations, "\n"), strings.Join(c.w.hist.lines, "\n"))
	}
}

// published returns the events published of key, by whom.
func (c *simCluster) published(key string) []string {
	c.w.mu.Lock()
	defer c.w.mu.Unlock()
	var out []string
	for _, p := range c.w.hist.pubs {
		if p.event.Key == key {
			out = append(out, fmt.Sprintf("%s v%d", p.by, p.event.Version))
		}
	}
	return out
}

// TestAReplacedVersionIsNeverPublishedUnderBacklog: a plain timeout handed
// out while every fire slot is busy (a backlog) is cleared before its turn
// comes; its stale version must not be published, then or later.
func TestAReplacedVersionIsNeverPublishedUnderBacklog(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newSimCluster(t, 1, func(cfg *Config) { cfg.FireConcurrency, cfg.FireBatch = 1, 1 })
		c.w.setLink("t1", func(l *link) { l.natsLatency = 200 * time.Millisecond }) // each publish holds the one slot
		due := time.Now().Add(100 * time.Millisecond)
		c.set("busy", 1, due)
		c.set("stale", 1, due.Add(time.Millisecond))
		time.Sleep(150 * time.Millisecond) // busy publishing, stale handed out and waiting for the slot
		c.clear("stale", 2)
		time.Sleep(2 * time.Second)
		if got := c.published("stale"); len(got) != 0 {
			t.Errorf("stale published %v after its clear was acknowledged", got)
		}
		c.finish(t)
	})
}

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

// TestNeverEarlyByPostgresClock: whatever the host's wall clock reads at
// start, and however it steps later, forward or back, no deadline fires
// before it by Postgres's clock (the reference), nor late by more than a
// few ticks once the heartbeats measured the offset.
func TestNeverEarlyByPostgresClock(t *testing.T) {
	tests := []struct {
		name        string
		start, step time.Duration
	}{
		{"ahead from the start", 2 * time.Second, 0},
		{"behind from the start", -2 * time.Second, 0},
		{"a forward step", 0, 2 * time.Second},
		{"a backward step", 0, -2 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				c := newSimCluster(t, 1, func(cfg *Config) {
					now := cfg.Now
					cfg.Now = func() time.Time { return now().Add(tt.start) }
				})
				c.nodes[0].skew.Add(int64(tt.step))
				deadline := time.Now().Add(1500 * time.Millisecond)
				c.set("k", 1, deadline)
				time.Sleep(5 * time.Second)
				c.w.mu.Lock()
				pubs := slices.Clone(c.w.hist.pubs)
				c.w.mu.Unlock()
				if len(pubs) != 1 || pubs[0].at.Sub(deadline) > 20*time.Millisecond {
					t.Errorf("k published %+v, want once within 20ms after its deadline %v", pubs, deadline)
				}
				c.finish(t)
			})
		})
	}
}

// TestAnOwnerCutOffFromPostgresPublishesNothing: an owner whose statements
// hang while Postgres dropped its sessions (the others read it as crashed
// and take its partitions at once) must stop publishing before its
// partitions can move; the new owner fires what it held.
func TestAnOwnerCutOffFromPostgresPublishesNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newSimCluster(t, 2, nil)
		owner := c.node(t, "k")
		c.set("k", 1, time.Now().Add(time.Second))
		time.Sleep(100 * time.Millisecond) // k in owner's schedule
		c.w.setLink(owner.id, func(l *link) { l.dbCut = true })
		c.w.loseSessions(owner.id)
		time.Sleep(3 * time.Second)
		if got := c.published("k"); len(got) != 1 || !strings.HasPrefix(got[0], "t") || strings.HasPrefix(got[0], owner.id) {
			t.Errorf("k published %v; want once, by the new owner (the cut-off owner is %s)", got, owner.id)
		}
		c.w.setLink(owner.id, func(l *link) { l.dbCut = false })
		c.finish(t)
	})
}
