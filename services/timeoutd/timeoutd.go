package timeoutd

import (
	"errors"
	"time"
)

// Errors of the domain; package http maps them to HTTP statuses in one table.
var (
	// ErrNotFound is returned when a key has no pending timeout.
	ErrNotFound = errors.New("timeoutd: not found")
	// ErrInvalid is returned for a malformed query (wrapped with the field).
	ErrInvalid = errors.New("timeoutd: invalid")
	// ErrFenced is returned by Publisher.Publish when the stream refused
	// an event because its partition's fence is no longer the one it
	// names: fenced again by a new owner, or aged out of the stream.
	ErrFenced = errors.New("timeoutd: refused by the partition's fence")
)

// State is the state of a stored timeout row.
type State int16

// The states of a row. Cleared and fired rows are tombstones: they keep the
// key's version so that stale commands are rejected, and their fire data,
// until the janitor retires them after TombstoneTTL into version marks,
// which keep only the key's version, for good: latest wins however late a
// stale command comes.
const (
	StatePending State = 0
	StateCleared State = 1
	StateFired   State = 2
	StateRetired State = 3
)

// Timeout is one timeout as stored.
type Timeout struct {
	Key       string
	Partition int
	Version   int64
	State     State
	// Deadline is when the timeout expires (pending rows), in UTC.
	Deadline time.Time
	// MaxLateness is the misfire bound; 0 means fire however late.
	MaxLateness time.Duration
	// FireSubject is where the expiry event goes.
	FireSubject string
	// Payload is returned verbatim in the expiry event.
	Payload []byte
	// TraceParent is the W3C trace context of the span that stored the
	// timeout (its ingest span), "" when it was set untraced; the fire's
	// span links to it.
	TraceParent string
	// Plain reports that the row holds nothing its expiry event needs
	// beyond the key, version and deadline: no payload, the default fire
	// subject, no misfire bound, no trace context. The fire path publishes
	// a plain timeout's event without reading its row. Set by LoadPending.
	Plain bool
}

// Change is a row that an Apply really changed: its new version, state and
// deadline (for a clear, the deadline holds the time of the clear).
type Change struct {
	Key      string
	Version  int64
	State    State
	Deadline time.Time
	// Plain is Timeout.Plain of a pending row.
	Plain bool
}

// Due is a timeout the scheduler fires: key and version identify the row,
// Deadline is its deadline.
type Due struct {
	Key      string
	Version  int64
	Deadline time.Time
}

// Cursor is a keyset position in the (deadline, key) order of pending
// timeouts; the zero Cursor is the start.
type Cursor struct {
	Deadline time.Time
	Key      string
}

// Query selects a page of pending timeouts.
type Query struct {
	// After is the position after which the page starts.
	After Cursor
	// KeyPrefix keeps only the keys that start with it (empty: all).
	KeyPrefix string
	// Limit is the page size.
	Limit int
}
