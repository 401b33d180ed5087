package sim

import (
	"context"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ordertimeout/ordertimeout/pkg/events"
	"github.com/ordertimeout/ordertimeout/services/timeoutd"
)

// TestAFrozenDatabaseCostsItsLengthAndMovesNothing: Postgres frozen for
// longer than the lease TTL (a stalled disk, a paused VM: sessions open,
// nothing answers, its clock running) holds every fire, and every lease
// expires by its clock meanwhile. Once it thaws, the timeouts due during
// the freeze fire within a second (not after their RetryDelay: the
// renewal that trusts the leases again wakes them), and no partition moves,
// its owner being healthy.
func TestAFrozenDatabaseCostsItsLengthAndMovesNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// A RetryDelay far above the second a thaw may cost: a fire that
		// waits for it instead of the renewal fails the bound.
		c := newCluster(t, 2, func(cfg *timeoutd.Config) { cfg.RetryDelay = 3 * time.Second })
		start := time.Now()
		const freeze = 5 * time.Second
		var deadlines []time.Time
		for i := range 20 {
			d := start.Add(time.Second + time.Duration(i)*freeze/20)
			c.set(fmt.Sprintf("k%d", i), 1, d)
			deadlines = append(deadlines, d)
		}
		time.Sleep(500 * time.Millisecond) // the sets applied
		c.w.mu.Lock()
		before := c.w.pg.leases
		c.w.mu.Unlock()
		c.w.FreezeDB(context.Background(), freeze)
		thaw := time.Now()
		time.Sleep(3 * time.Second)

		c.w.mu.Lock()
		moved := 0
		for p := range events.Partitions {
			if c.w.pg.leases[p].owner != before[p].owner || c.w.pg.leases[p].epoch != before[p].epoch {
				moved++
			}
		}
		first := map[string]time.Time{}
		for _, p := range c.w.hist.pubs {
			if _, ok := first[p.event.Key]; !ok {
				first[p.event.Key] = p.at
			}
		}
		c.w.mu.Unlock()
		if moved > 0 {
			t.Errorf("%d partitions moved after a freeze of %v; want none", moved, freeze)
		}
		var worst time.Duration
		for i, d := range deadlines {
			key := fmt.Sprintf("k%d", i)
			at, ok := first[key]
			switch due := later(d, thaw); {
			case !ok:
				t.Errorf("%s (due %v into the freeze) never fired", key, d.Sub(start.Add(500*time.Millisecond)))
			case at.Sub(due) > time.Second:
				t.Errorf("%s fired %v after the thaw (or its deadline, if later); want within a second", key, at.Sub(due))
			default:
				worst = max(worst, at.Sub(due))
			}
		}
		t.Logf("fired at most %v after the thaw (or the deadline, if later)", worst)
		c.finish(t)
	})
}
