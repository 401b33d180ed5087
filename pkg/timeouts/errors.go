package timeouts

import (
	"errors"

	"github.com/ordertimeout/ordertimeout/pkg/events"
)

// ErrRefused matches (errors.Is) every *RefusedError: a command the
// platform would refuse, caught before it is written.
var ErrRefused = errors.New("timeouts: refused")

// RefusedError is a command timeoutd would refuse and dead-letter on
// dlq.timeoutd.<tenant>.<Reason>, caught by the producer before it is written, so
// that the caller's transaction fails instead of the deadline vanishing
// later. Reason is the dead letter's reason (an events.Reason), Field the
// command's JSON field it concerns.
type RefusedError struct {
	Reason events.Reason
	Field  string
	Detail string
	// Key is the command's key, as given (it may be the invalid field).
	Key string
}

// Error implements error as "timeouts: refused <key>: <field>: <detail>".
func (e *RefusedError) Error() string {
	s := "timeouts: refused " + e.Key + ": "
	if e.Field != "" {
		s += e.Field + ": "
	}
	return s + e.Detail
}

// Is reports whether target is ErrRefused.
func (e *RefusedError) Is(target error) bool { return target == ErrRefused }

// refused returns err, an *events.Error, as a *RefusedError about key.
func refused(key string, err error) error {
	var ee *events.Error
	if !errors.As(err, &ee) {
		return err
	}
	return &RefusedError{Reason: ee.Reason, Field: ee.Field, Detail: ee.Detail, Key: key}
}
