// Package waitlock is a mutex for what may be held across I/O (a lease
// round, a takeover's release, a fire batch waiting for a slot): its
// waiters block on a channel. A goroutine blocked on a sync.Mutex is not
// durably blocked in a testing/synctest bubble, so a sync.Mutex held
// across a wait would stop the simulation's clock (timeoutd's
// TestSimulation).
package waitlock

import "sync/atomic"

// Mutex is a mutual exclusion lock whose waiters block on a channel. The
// zero value is unlocked.
type Mutex struct{ ch atomic.Pointer[chan struct{}] }

func (l *Mutex) c() chan struct{} {
	if p := l.ch.Load(); p != nil {
		return *p
	}
	ch := make(chan struct{}, 1)
	l.ch.CompareAndSwap(nil, &ch)
	return *l.ch.Load()
}

// Lock locks l, waiting while another holds it.
func (l *Mutex) Lock() { l.c() <- struct{}{} }

// Unlock unlocks l.
func (l *Mutex) Unlock() { <-l.c() }
