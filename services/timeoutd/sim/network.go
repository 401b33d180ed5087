package sim

import (
	"context"
	"errors"
	"time"
)

// network is every instance's links, under the world's lock.
type network struct {
	links map[string]*link
	// calm is, by instance, when its link, clock or process last changed:
	// the checker's "partitions taken" asks for instances calm for a while.
	calm map[string]time.Time
}

// link is one instance's connectivity, set by the nemesis.
type link struct {
	dbCut       bool // statements hang, running nothing
	natsCut     bool // NATS calls hang
	ambiguousP  float64
	natsLatency time.Duration
	dbLatency   time.Duration
	// healed is closed when the link changes, so that hung calls fail.
	healed chan struct{}
}

var (
	errSimCut       = errors.New("sim: connection reset")
	errSimDown      = errors.New("sim: the database system is starting up")
	errSimAmbiguous = errors.New("sim: commit reply lost")
	errSimPubAck    = errors.New("sim: PubAck lost")
)

// linkOf returns id's link, under w.mu.
func (w *World) linkOf(id string) *link {
	l := w.net.links[id]
	if l == nil {
		l = &link{healed: make(chan struct{})}
		w.net.links[id] = l
	}
	return l
}

// setLink changes id's link with f and wakes its hung calls.
func (w *World) setLink(id string, f func(*link)) {
	w.mu.Lock()
	defer w.mu.Unlock()
	l := w.linkOf(id)
	f(l)
	w.net.calm[id] = time.Now()
	close(l.healed)
	l.healed = make(chan struct{})
}

// unsettle records that id's process or clock changed now, under w.mu.
func (w *World) unsettle(id string) { w.net.calm[id] = time.Now() }

// draw returns a healthy link's latency, under w.mu: up to cfg.latency,
// and one time in slowOneIn slowFactor times that, a statement or a
// publish that meets a busy server (a checkpoint, a vacuum, a leader's
// fsync). The tail widens the windows between an admission, a commit and
// its apply, where another lane's statement may overtake.
func (w *World) draw() time.Duration {
	d := time.Duration(w.cfg.Rand() * float64(w.cfg.Latency))
	if w.cfg.Rand() < 1.0/slowOneIn {
		d *= slowFactor
	}
	return d
}

// slowOneIn and slowFactor shape the tail of a healthy link's latency.
const (
	slowOneIn  = 20
	slowFactor = 20
)

// hang blocks until ctx ends or the link changes, and fails.
func hang(ctx context.Context, healed <-chan struct{}) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-healed:
		return errSimCut
	}
}
