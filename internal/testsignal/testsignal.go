// Package testsignal gives a component points of interest a test can wait
// on instead of sleeping, in the style of River's test signals: the
// component signals a value; the zero Signal (production) drops it at no
// cost.
package testsignal

import "time"

// Signal delivers the values a component signals once a test called Init.
type Signal[T any] struct{ ch chan T }

// Init makes s deliver its signals, buffered; call it before the component
// runs.
func (s *Signal[T]) Init() { s.ch = make(chan T, 64) }

// Signal delivers v when s was initialised; it never blocks (a test that
// lets more than the buffer pile up loses the rest).
func (s *Signal[T]) Signal(v T) {
	if s.ch == nil {
		return
	}
	select {
	case s.ch <- v:
	default:
	}
}

// Failer is the part of testing.TB that Wait uses.
type Failer interface {
	Helper()
	Fatalf(format string, args ...any)
}

// Wait returns the next value signalled, or fails t after timeout.
func (s *Signal[T]) Wait(t Failer, timeout time.Duration) T {
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
