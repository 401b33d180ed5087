package timeouts

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/ordertimeout/ordertimeout/pkg/events"
	"github.com/ordertimeout/ordertimeout/pkg/outbox"
)

// Deadline is what a producer asks of the platform: publish an expiry
// event on FireSubject once At has passed, unless a newer command for Key
// clears or moves it.
type Deadline struct {
	// Key names the timeout (say, a reservation id): 1 to events.MaxKeyLen
	// letters, digits, '-' or '_', qualified by the producer's tenant
	// (events.TenantKey; Writer does it). Each tenant owns its keys.
	Key string
	// Version orders the commands of Key: each command must carry a
	// version greater than the last one (a row's version column, bumped
	// with each change, serves). timeoutd ignores a command whose version
	// is not newer than the one it holds, however late it arrives.
	Version int64
	// At is when the deadline passes; the expiry event is never published
	// before it.
	At time.Time
	// FireSubject is where the expiry event goes; timeoutd accepts only
	// subjects under the tenant's fire prefixes (the tenant registry).
	FireSubject string
	// Payload is an optional JSON object of at most events.MaxPayloadBytes,
	// returned verbatim in the expiry event.
	Payload json.RawMessage
	// MaxLateness, when positive, is the misfire bound: a deadline
	// processed later than At plus MaxLateness (after a long outage) is
	// published as a "missed" event on timeouts.missed.<key> instead of
	// firing. Zero fires however late. Millisecond precision.
	MaxLateness time.Duration
}

// SetCommand returns the command that creates Key's deadline, or moves or
// extends it (a later command with a newer version), issued at issuedAt
// (the time of the change it carries, by the producer's clock; a republish
// keeps it). It returns a *RefusedError for a command timeoutd would
// refuse whatever its configuration.
func SetCommand(d Deadline, issuedAt time.Time) (events.Command, error) {
	c := events.Command{Schema: events.SchemaVersion, Kind: events.KindSet, Key: d.Key, Version: d.Version,
		Deadline: d.At.UTC(), FireSubject: d.FireSubject, MaxLatenessMs: d.MaxLateness.Milliseconds(),
		Payload: d.Payload, IssuedAt: issuedAt.UTC()}
	return c, check(c)
}

// ClearCommand returns the command that removes key's deadline at version
// (the reservation was confirmed, the order paid), issued at issuedAt. A
// clear is final for the versions up to its own: a set of an older version
// arriving later is ignored. It returns a *RefusedError for an invalid key
// or version.
func ClearCommand(key string, version int64, issuedAt time.Time) (events.Command, error) {
	c := events.Command{Schema: events.SchemaVersion, Kind: events.KindClear, Key: key, Version: version, IssuedAt: issuedAt.UTC()}
	return c, check(c)
}

// check validates c as timeoutd's decoder does, and requires IssuedAt,
// which timeoutd requires while it forgets the versions of old keys.
func check(c events.Command) error {
	if c.IssuedAt.IsZero() {
		return &RefusedError{Reason: events.ReasonInvalidField, Field: "issued_at", Detail: "is required", Key: c.Key}
	}
	return refused(c.Key, c.Validate())
}

// Message returns c as the outbox row the relay publishes: on its command
// subject, timeouts.cmd.<key> (timeouts.cmd.<tenant>.<local key>), with a
// Nats-Msg-Id of a fresh nonce, <kind>:<key>:<version>:<nonce>
// (events.Command.MsgID). The row keeps the id, so a republish after a
// crash is dropped as a duplicate, and no other tenant can know it
// beforehand to have the command dropped. It returns a *RefusedError for
// a command timeoutd would refuse.
func Message(c events.Command) (outbox.Message, error) {
	if err := check(c); err != nil {
		return outbox.Message{}, err
	}
	data, err := json.Marshal(c)
	if err != nil {
		return outbox.Message{}, fmt.Errorf("timeouts: encode command %s %s v%d: %w", c.Kind, c.Key, c.Version, err)
	}
	return outbox.Message{Subject: c.Subject(), MsgID: c.MsgID(events.NewNonce()), Data: data}, nil
}

// allowed returns a *RefusedError unless a set command's fire subject
// starts with one of prefixes (any, when prefixes is empty).
func allowed(c events.Command, prefixes []string) error {
	if c.Kind != events.KindSet || len(prefixes) == 0 {
		return nil
	}
	for _, p := range prefixes {
		if strings.HasPrefix(c.FireSubject, p) {
			return nil
		}
	}
	return &RefusedError{Reason: events.ReasonSubjectNotAllowed, Field: "fire_subject",
		Detail: fmt.Sprintf("%q must start with one of %v", c.FireSubject, prefixes), Key: c.Key}
}
