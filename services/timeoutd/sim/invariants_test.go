package sim

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ordertimeout/ordertimeout/pkg/events"
	"github.com/ordertimeout/ordertimeout/services/timeoutd"
)

// The invariants' regression tests: each replays, in the simulation's
// world, the one schedule of faults and commands that broke an invariant,
// and asserts the invariants with the simulation's checker.

// cluster is a cluster of n instances in the simulation's world, for a
// test inside a synctest bubble; tweak adjusts each one's timeoutd.Config.
type cluster struct {
	w     *World
	nodes []*node
	keys  map[string]*keyState
}

func newCluster(t *testing.T, n int, tweak func(*timeoutd.Config)) *cluster {
	t.Helper()
	w := New(Config{AckWait: 5 * time.Second, Dedupe: 2 * time.Minute, CrashGrace: timeoutd.CrashGraceDefault, TTL: timeoutd.LeaseTTLDefault,
		Batch: 64, Rand: func() float64 { return 1 }})
	c := &cluster{w: w, keys: map[string]*keyState{}}
	for i := range n {
		node := newNode(w, fmt.Sprintf("t%d", i+1))
		node.cfg = timeoutd.Config{InstanceID: node.id, Now: node.wall, Logger: discardLogger(), MaxPending: 1000,
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
func (c *cluster) set(key string, v int64, deadline time.Time) {
	cmd := events.Command{Schema: events.SchemaVersion, Kind: events.KindSet, Key: key, Version: v, Deadline: deadline.UTC(),
		FireSubject: events.OrderCancelSubject(key)}
	c.keys[key] = &keyState{key: key, version: v, deadline: deadline, last: cmd}
	c.w.produce(cmd)
}

// clear produces a clear of key at version v.
func (c *cluster) clear(key string, v int64) {
	cmd := events.Command{Schema: events.SchemaVersion, Kind: events.KindClear, Key: key, Version: v}
	c.keys[key] = &keyState{key: key, version: v, cleared: true, last: cmd}
	c.w.produce(cmd)
}

// node returns the instance that owns key's partition.
func (c *cluster) node(t *testing.T, key string) *node {
	t.Helper()
	c.w.mu.Lock()
	owner := c.w.pg.leases[events.PartitionOf(key)].owner
	c.w.mu.Unlock()
	i := slices.IndexFunc(c.nodes, func(n *node) bool { return n.id == owner })
	if i < 0 {
		t.Fatalf("nobody owns %s's partition", key)
	}
	return c.nodes[i]
}

// finish stops the cluster and fails t with the history when the checker
// finds a violation.
func (c *cluster) finish(t *testing.T) {
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
func (c *cluster) published(key string) []string {
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
		c := newCluster(t, 1, func(cfg *timeoutd.Config) { cfg.FireConcurrency, cfg.FireBatch = 1, 1 })
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
				c := newCluster(t, 1, func(cfg *timeoutd.Config) {
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
		c := newCluster(t, 2, nil)
		owner := c.node(t, "k")
		c.set("k", 1, time.Now().Add(time.Second))
		time.Sleep(100 * time.Millisecond) // k in owner's schedule
		c.w.setLink(owner.id, func(l *link) { l.dbCut = true })
		c.w.LoseSessions(owner.id)
		time.Sleep(3 * time.Second)
		if got := c.published("k"); len(got) != 1 || !strings.HasPrefix(got[0], "t") || strings.HasPrefix(got[0], owner.id) {
			t.Errorf("k published %v; want once, by the new owner (the cut-off owner is %s)", got, owner.id)
		}
		c.w.setLink(owner.id, func(l *link) { l.dbCut = false })
		c.finish(t)
	})
}

// TestAStalledOwnersLatePublishIsRefused: an owner whose publish of k v1
// is delivered seconds late (a stalled process or network) while its
// statements hang loses k's partition to another instance, which consumes
// k v2 before it opens the partition; the late v1 must not be stored
// after v2 was acknowledged: the new owner's fence refuses it.
func TestAStalledOwnersLatePublishIsRefused(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t, 2, nil)
		owner := c.node(t, "k")
		start := time.Now()
		c.set("k", 1, start.Add(time.Second))
		time.Sleep(900 * time.Millisecond)
		c.w.setLink(owner.id, func(l *link) { l.natsLatency = 6 * time.Second }) // v1's publish, at 1 s, lands at 7 s
		time.Sleep(150 * time.Millisecond)
		c.w.setLink(owner.id, func(l *link) { l.dbCut = true }) // and the lease lapses meanwhile
		time.Sleep(time.Second)
		c.set("k", 2, start.Add(time.Hour)) // waits in the stream for the new owner
		time.Sleep(8 * time.Second)
		c.w.setLink(owner.id, func(l *link) { l.dbCut, l.natsLatency = false, 0 })
		if got := c.published("k"); len(got) == 0 || !strings.HasPrefix(got[0], owner.id) {
			t.Errorf("k published %v; want v1 by the stalled owner %s (the case the fence is for)", got, owner.id)
		}
		c.w.mu.Lock()
		_, stored := c.w.js.stored[events.Expiry{Outcome: events.OutcomeFired, Key: "k", Version: 1}.MsgID()]
		c.w.mu.Unlock()
		if stored {
			t.Errorf("k v1 stored, though v2 was acknowledged before it arrived")
		}
		c.finish(t)
	})
}

// TestNeverEarlyByAPromotedStandbysClock: after a failover to a standby
// whose clock is behind the old primary's, or ahead of it, no deadline
// fires before it by the new primary's clock nor by the old one's, nor
// late by more than a few ticks by the slower of the two: the hold on the
// fires follows the server that answers from its first heartbeat, and
// keeps the old one's as a floor (the old primary is measured again only
// once it streams as a standby).
func TestNeverEarlyByAPromotedStandbysClock(t *testing.T) {
	for _, step := range []time.Duration{-500 * time.Millisecond, 500 * time.Millisecond} {
		t.Run(fmt.Sprintf("the clock %+v", step), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				c := newCluster(t, 2, nil)
				c.w.Promote(context.Background(), time.Second, step)
				time.Sleep(500 * time.Millisecond) // the heartbeats that meet the new primary
				var deadlines []time.Time
				for i := range 20 { // due over the next five heartbeats, by the new clock
					c.w.mu.Lock()
					deadline := c.w.dbNow().Add(time.Duration(300+200*i) * time.Millisecond)
					c.w.mu.Unlock()
					c.set(fmt.Sprintf("k%02d", i), 1, deadline)
					deadlines = append(deadlines, deadline)
				}
				time.Sleep(6 * time.Second)
				c.w.mu.Lock()
				for _, p := range c.w.hist.pubs {
					// the slower clock of the two: the old primary's
					// reads the new one's minus step
					slower := p.dbAt.Add(-max(0, step))
					if late := slower.Sub(p.event.Deadline); late < 0 || late > 50*time.Millisecond {
						t.Errorf("%s published %v late by the slower of the two primaries' clocks, want 0 to 50ms", p.event.Key, late)
					}
				}
				if n := len(c.w.hist.pubs); n != len(deadlines) {
					t.Errorf("%d publishes, want %d", n, len(deadlines))
				}
				c.w.mu.Unlock()
				c.finish(t)
			})
		})
	}
}
