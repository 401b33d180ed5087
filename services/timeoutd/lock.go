package timeoutd

import "sync/atomic"

// waitLock is a mutex for what may be held across I/O (a lease round, a
// takeover's release, an onDue call waiting for a fire slot): its waiters
// block on a channel. A goroutine blocked on a sync.Mutex is not durably
// blocked in a testing/synctest bubble, so a sync.Mutex held across a wait
// would stop the simulation's clock (TestSimulation). The zero value is
// unlocked.
type waitLock struct{ ch atomic.Pointer[chan struct{}] }

func (l *waitLock) c() chan struct{} {
	if p := l.ch.Load(); p != nil {
		return *p
	}
	ch := make(chan struct{}, 1)
	l.ch.CompareAndSwap(nil, &ch)
	return *l.ch.Load()
}

// Lock locks l, waiting while another holds it.
func (l *waitLock) Lock() { l.c() <- struct{}{} }

// Unlock unlocks l.
func (l *waitLock) Unlock() { <-l.c() }
