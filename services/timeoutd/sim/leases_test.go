package sim

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ordertimeout/ordertimeout/services/timeoutd"
	"github.com/ordertimeout/ordertimeout/services/timeoutd/internal/lease"
	"github.com/ordertimeout/ordertimeout/services/timeoutd/internal/lease/leasetest"
)

// TestLeaseRules runs the lease table's behaviour suite against the
// model the simulation runs on; package postgres runs the same suite
// against the real table (TestLeaseRules there).
func TestLeaseRules(t *testing.T) {
	leasetest.Run(t, leasetest.Harness{
		New:    func(*testing.T, leasetest.Options) leasetest.Backend { return modelBackend{New(suiteConfig)} },
		Bubble: func(t *testing.T, f func(*testing.T)) { synctest.Test(t, f) },
	})
}

// suiteConfig is a world of the suite: its TTL, the store's crash grace,
// no latency or fault.
var suiteConfig = Config{TTL: leasetest.TTL, CrashGrace: timeoutd.CrashGraceDefault, AckWait: time.Second, Dedupe: time.Minute, Batch: 1}

type modelBackend struct{ w *World }

func (b modelBackend) Instance(_ *testing.T, id string) lease.Table { return b.w.Leases(id) }
func (b modelBackend) Crash(_ *testing.T, id string)                { b.w.LoseSessions(id) }
func (b modelBackend) Restart(*testing.T)                           { b.w.RestartDB(context.Background(), 100*time.Millisecond) }
func (b modelBackend) Now(*testing.T) time.Time {
	b.w.mu.Lock()
	defer b.w.mu.Unlock()
	return b.w.dbNow()
}
func (b modelBackend) CrashGrace() time.Duration { return b.w.cfg.CrashGrace }

func (b modelBackend) Write(t *testing.T, kind string, fence lease.Fence, parts []int) []int {
	t.Helper()
	s := b.w.Store(fence.Owner)
	var refused []int
	var err error
	switch kind {
	case "apply":
		_, refused, err = s.Apply(context.Background(), fence, leasetest.Sets(parts), time.Now())
	case "mark":
		refused, err = s.MarkFired(context.Background(), fence, leasetest.Dues(parts), time.Now())
	default:
		t.Fatalf("unknown write %q", kind)
	}
	if err != nil {
		t.Fatalf("%s: %v", kind, err)
	}
	return refused
}
