package daemon_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ordertimeout/ordertimeout/pkg/events"
	"github.com/ordertimeout/ordertimeout/services/timeoutd/daemon"
	"github.com/ordertimeout/ordertimeout/services/timeoutd/internal/lease"
)

// The leases of the cluster tests: a TTL longer than the default, so that
// a takeover that does not wait for the leases to expire (a crash, a
// graceful handover) stands well apart from one that does, on a loaded
// machine too.
const (
	leaseTTL      = 6 * time.Second
	renewInterval = time.Second
)

// leaseLeft returns how long, by the database's clock, until the first of
// id's leases of parts expires.
func (e *env) leaseLeft(t *testing.T, id string, parts []int) time.Duration {
	t.Helper()
	p16 := make([]int16, len(parts))
	for i, p := range parts {
		p16[i] = int16(p)
	}
	var ms int64
	if err := e.pool.QueryRow(context.Background(), `SELECT (extract(epoch FROM min(expires_at) - now()) * 1000)::int8
		FROM timeout_leases WHERE part = ANY($1) AND owner = $2`, p16, id).Scan(&ms); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ms) * time.Millisecond
}

// startMember starts a cluster member named id.
func (e *env) startMember(t *testing.T, id string) *started {
	t.Helper()
	return e.start(t, func(c *daemon.Config) {
		c.Service.InstanceID = id
		c.Service.LeaseTTL = leaseTTL
		c.Service.LeaseRenewInterval = renewInterval
	})
}

// waitOwnedElsewhere polls the lease table until no partition of parts is
// owned by id any more, every one by another instance, and returns how long
// that took from since.
func (e *env) waitOwnedElsewhere(t *testing.T, id string, parts []int, since time.Time) time.Duration {
	t.Helper()
	p16 := make([]int16, len(parts))
	for i, p := range parts {
		p16[i] = int16(p)
	}
	var took time.Duration
	eventually(t, 30*time.Second, "the partitions of "+id+" owned by the others", func() bool {
		var left int
		err := e.pool.QueryRow(context.Background(), `SELECT count(*) FROM timeout_leases
			WHERE part = ANY($1) AND (owner IS NULL OR owner = $2 OR expires_at <= now())`, p16, id).Scan(&left)
		took = time.Since(since)
		return err == nil && left == 0
	})
	return took
}

// expiries reads every cancel event on the expiry stream.
func (e *env) expiries(t *testing.T) []events.Expiry {
	t.Helper()
	ctx := context.Background()
	c, err := e.js.OrderedConsumer(ctx, events.StreamExpiries, jetstream.OrderedConsumerConfig{FilterSubjects: []string{events.OrderCancelSubjects}})
	if err != nil {
		t.Fatal(err)
	}
	var out []events.Expiry
	for {
		b, err := c.FetchNoWait(1000)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for m := range b.Messages() {
			n++
			var ex events.Expiry
			if err := json.Unmarshal(m.Data(), &ex); err != nil {
				t.Fatal(err)
			}
			out = append(out, ex)
		}
		if n == 0 {
			return out
		}
	}
}

// TestClusterSharesFailsOverAndHandsOver runs three instances on one
// Postgres and one NATS: the 64 partitions spread evenly; an instance
// killed (as SIGKILL: its connections close) has its partitions taken over
// before its leases could expire (its sessions are gone from the database),
// and every deadline of its partitions fired by the survivors; one stopped
// gracefully hands its partitions over at once, likewise before its leases
// could expire. Every deadline fires once, never early.
func TestClusterSharesFailsOverAndHandsOver(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	members := map[string]*started{}
	for _, id := range []string{"c1", "c2", "c3"} {
		members[id] = e.startMember(t, id)
	}
	owned := func() map[string]int {
		out := map[string]int{}
		for id, m := range members {
			out[id] = len(m.Service().Owned())
		}
		return out
	}
	eventually(t, 20*time.Second, "64 partitions spread over three", func() bool {
		sum, lo, hi := 0, events.Partitions, 0
		for _, n := range owned() {
			sum, lo, hi = sum+n, min(lo, n), max(hi, n)
		}
		// Each takes at most ceil(64/3) = 22, the last the rest.
		return sum == events.Partitions && lo >= 20 && hi <= 22
	})
	t.Logf("distribution with 3 instances: %v", owned())

	// 640 deadlines, one every 10 ms from 3 s on; the kill comes at 4 s.
	start := time.Now()
	const n = 640
	deadlines := map[string]time.Time{}
	for i := range n {
		key := fmt.Sprintf("cl-%03d", i)
		deadlines[key] = start.Add(3*time.Second + time.Duration(i)*10*time.Millisecond).UTC()
		e.publish(t, setCmd(key, 1, deadlines[key]))
	}
	victim := "c1"
	for id, k := range owned() {
		if k > owned()[victim] {
			victim = id
		}
	}
	victimParts := members[victim].Service().Owned()
	time.Sleep(time.Until(start.Add(4 * time.Second)))
	left := e.leaseLeft(t, victim, victimParts)
	killedAt := time.Now()
	members[victim].Kill()
	takeover := e.waitOwnedElsewhere(t, victim, victimParts, killedAt)
	<-members[victim].done
	delete(members, victim)
	t.Logf("the kill of %s: its %d partitions owned by the survivors %v after it; its leases had %v left",
		victim, len(victimParts), takeover.Round(time.Millisecond), left)
	if takeover >= left {
		t.Errorf("the survivors took the killed instance's partitions %v after the kill, not before its leases expired (%v)", takeover, left)
	}

	var got []events.Expiry
	eventually(t, 30*time.Second, "every deadline fired", func() bool {
		got = e.expiries(t)
		return len(got) >= n
	})
	seen := map[string]int{}
	firstAfterKill := map[int]time.Time{}
	var worst time.Duration
	for _, ex := range got {
		seen[ex.Key]++
		if ex.FiredAt.Before(ex.Deadline) || !ex.Deadline.Equal(deadlines[ex.Key]) {
			t.Errorf("%s fired at %v, deadline %v (sent %v)", ex.Key, ex.FiredAt, ex.Deadline, deadlines[ex.Key])
		}
		p := events.PartitionOf(ex.Key)
		if slices.Contains(victimParts, p) && ex.FiredAt.After(killedAt) {
			if f, ok := firstAfterKill[p]; !ok || ex.FiredAt.Before(f) {
				firstAfterKill[p] = ex.FiredAt
			}
			worst = max(worst, ex.FiredAt.Sub(ex.Deadline))
		}
	}
	for key := range deadlines {
		if seen[key] != 1 {
			t.Errorf("%s fired %d times, want once", key, seen[key])
		}
	}
	var failover time.Duration
	for p, f := range firstAfterKill {
		d := f.Sub(killedAt)
		failover = max(failover, d)
		if d > 5*time.Second {
			t.Errorf("partition %d: first fire by its new owner %v after the kill, want at most 5s", p, d)
		}
	}
	t.Logf("killed %s (%d partitions): failover (kill to the first fire of each partition's new owner) at most %v over %d partitions; worst lateness of their deadlines %v",
		victim, len(victimParts), failover.Round(time.Millisecond), len(firstAfterKill), worst.Round(time.Millisecond))
	if worst > 5*time.Second {
		t.Errorf("a deadline of the killed instance's partitions fired %v late, want at most 5s", worst)
	}
	eventually(t, 10*time.Second, "the survivors own every partition", func() bool {
		sum := 0
		for _, k := range owned() {
			sum += k
		}
		return sum == events.Partitions
	})
	t.Logf("distribution with 2 instances: %v", owned())
	// The ownership view, as each survivor reads it: every partition held
	// by a survivor, which may fire it.
	eventually(t, 10*time.Second, "every partition may fire, by a survivor, in each survivor's view", func() bool {
		for _, m := range members {
			own := m.Service().Ownership()
			if len(own) != events.Partitions {
				return false
			}
			for _, o := range own {
				if _, ok := members[o.Owner]; !ok || o.Why != "" || o.Lease != lease.LeaseHeld {
					return false
				}
			}
		}
		return true
	})

	// A graceful stop hands over at once, not after the lease TTL.
	var leaving, staying string
	for id := range members {
		if leaving == "" {
			leaving = id
		} else {
			staying = id
		}
	}
	leavingParts := members[leaving].Service().Owned()
	left = e.leaseLeft(t, leaving, leavingParts)
	stoppedAt := time.Now()
	members[leaving].stop(t)
	delete(members, leaving)
	handover := e.waitOwnedElsewhere(t, leaving, leavingParts, stoppedAt)
	t.Logf("graceful handover of %s to %s: %v; its leases had %v left", leaving, staying, handover.Round(time.Millisecond), left)
	if handover >= left {
		t.Errorf("graceful handover took %v, not before the leases expired (%v)", handover, left)
	}
	eventually(t, 10*time.Second, "the last instance owns every partition", func() bool {
		return len(members[staying].Service().Owned()) == events.Partitions
	})
}

// TestASkewedInstanceNeverFiresEarly: an instance whose wall clock runs
// 2 s ahead of the database's (and NATS's) measures the lead at its
// heartbeats and holds its fires by it: every event is stored at or after
// its deadline by the true clock, and the lead is exported.
func TestASkewedInstanceNeverFiresEarly(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const skew = 2 * time.Second
	d := e.start(t, func(c *daemon.Config) { c.Service.ClockSkew = skew })
	eventually(t, 10*time.Second, "the clock's lead measured", func() bool {
		return d.Service().Stats().ClockOffset > skew-500*time.Millisecond
	})
	deadline := time.Now().Add(time.Second).UTC().Truncate(time.Millisecond)
	for i := range 5 {
		e.publish(t, setCmd(fmt.Sprintf("skew-%d", i), 1, deadline.Add(time.Duration(i)*100*time.Millisecond)))
	}
	for i := range 5 {
		key := fmt.Sprintf("skew-%d", i)
		// expiry checks the stored (publish) time, by NATS's clock, against
		// the deadline.
		e.expiry(t, events.OrderCancelSubject(key), events.OutcomeFired, key, 1, deadline.Add(time.Duration(i)*100*time.Millisecond))
	}
	if off := d.Service().Stats().ClockOffset; off < skew-500*time.Millisecond || off > skew+500*time.Millisecond {
		t.Errorf("clock offset %v, want about %v", off, skew)
	}
}
