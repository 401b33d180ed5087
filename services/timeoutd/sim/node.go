package sim

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ordertimeout/ordertimeout/services/timeoutd"
)

// node is one timeoutd instance of the simulated cluster, restarted
// under the same id after a crash. Its lifecycle calls are serialised by
// turn, a channel (a goroutine blocked on a mutex is not durably blocked,
// and would stop the bubble's clock).
type node struct {
	w    *World
	id   string
	cfg  timeoutd.Config
	skew atomic.Int64 // the wall clock's offset from the reference
	turn chan struct{}
	svc  atomic.Pointer[timeoutd.Service]
	stop context.CancelFunc
	done chan struct{}
}

func newNode(w *World, id string) *node {
	return &node{w: w, id: id, turn: make(chan struct{}, 1)}
}

func (n *node) wall() time.Time { return time.Now().Add(time.Duration(n.skew.Load())) }

func (n *node) lock()   { n.turn <- struct{}{} }
func (n *node) unlock() { <-n.turn }

// start runs a new timeoutd.Service of the node, unless one runs.
func (n *node) start(t *testing.T) {
	n.lock()
	defer n.unlock()
	if n.svc.Load() != nil {
		return
	}
	pub := publisher{w: n.w, id: n.id}
	svc, err := timeoutd.New(n.cfg, timeoutd.Deps{Store: store{w: n.w, id: n.id}, Source: &source{w: n.w, id: n.id, parts: map[int]bool{}},
		DeadLetters: pub, Publisher: pub, Leases: leases{w: n.w, id: n.id}})
	if err != nil {
		t.Errorf("%s: New: %v", n.id, err)
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := svc.Run(ctx); err != nil {
			t.Errorf("%s: Run: %v", n.id, err)
		}
	}()
	n.stop, n.done = cancel, done
	n.svc.Store(svc)
	n.w.mu.Lock()
	n.w.unsettle(n.id)
	n.w.mu.Unlock()
}

// crash kills the running timeoutd.Service as a SIGKILL would: its sessions vanish.
func (n *node) crash() { n.end(true) }

// shutdown stops the running timeoutd.Service gracefully.
func (n *node) shutdown() { n.end(false) }

func (n *node) end(kill bool) {
	n.lock()
	defer n.unlock()
	svc := n.svc.Load()
	if svc == nil {
		return
	}
	if kill {
		svc.Kill()
	}
	n.stop()
	<-n.done
	n.svc.Store(nil)
	n.w.LoseSessions(n.id)
}

// pending returns what the running timeoutd.Service holds in memory, and its bound.
func (n *node) pending() (held, bound int) {
	if svc := n.svc.Load(); svc != nil {
		return svc.Pending(), n.cfg.MaxPending
	}
	return 0, n.cfg.MaxPending
}
