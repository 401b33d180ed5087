//go:build !linux

package pgparams

import "time"

// setUserTimeout does nothing where TCP_USER_TIMEOUT does not exist: the
// keepalives still find a dead idle connection.
func setUserTimeout(uintptr, time.Duration) error { return nil }
