package timeoutd

import "time"

// testSignal is a point of interest of a component that a test can wait on
// instead of sleeping (River's test signals): the component signals a
// value; the zero testSignal (production) drops it at no cost. A test calls
// init before the component runs, then wait.
type testSignal[T any] struct{ ch chan T }

// init makes s deliver its signals, buffered.
func (s *testSignal[T]) init() { s.ch = make(chan T, 64) }

// signal delivers v when s was initialised; it never blocks (a test that
// lets more than the buffer pile up loses the rest).
func (s *testSignal[T]) signal(v T) {
	if s.ch == nil {
		return
	}
	select {
	case s.ch <- v:
	default:
	}
}

// failer is the part of testing.TB that wait uses.
type failer interface {
	Helper()
	Fatalf(format string, args ...any)
}

// wait returns the next value signalled, or fails t after timeout.
func (s *testSignal[T]) wait(t failer, timeout time.Duration) T {
	t.Helper()
	select {
	case v := <-s.ch:
		return v
	case <-time.After(timeout):
		var zero T
		t.Fatalf("no signal within %v", timeout)
		return zero
	}
}
