package timeouts_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/ordertimeout/ordertimeout/pkg/events"
	"github.com/ordertimeout/ordertimeout/pkg/timeouts"
)

// TestSetCommandRefuses: every command timeoutd's decoder would refuse is
// refused at the call with the reason and field of its dead letter.
func TestSetCommandRefuses(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 11, 26, 9, 0, 0, 0, time.UTC)
	ok := timeouts.Deadline{Key: "res-1", Version: 1, At: at, FireSubject: "reservations.expire.res-1"}
	tests := []struct {
		name   string
		edit   func(*timeouts.Deadline)
		issued time.Time
		reason events.Reason
		field  string
	}{
		{"bad key", func(d *timeouts.Deadline) { d.Key = "res.1.2" }, at, events.ReasonInvalidKey, "key"},
		{"empty key", func(d *timeouts.Deadline) { d.Key = "" }, at, events.ReasonInvalidKey, "key"},
		{"zero version", func(d *timeouts.Deadline) { d.Version = 0 }, at, events.ReasonInvalidVersion, "version"},
		{"no deadline", func(d *timeouts.Deadline) { d.At = time.Time{} }, at, events.ReasonInvalidDeadline, "deadline"},
		{"deadline out of range", func(d *timeouts.Deadline) { d.At = time.Date(2300, 1, 1, 0, 0, 0, 0, time.UTC) }, at, events.ReasonDeadlineOutOfRange, "deadline"},
		{"wildcard subject", func(d *timeouts.Deadline) { d.FireSubject = "reservations.expire.*" }, at, events.ReasonInvalidSubject, "fire_subject"},
		{"negative lateness", func(d *timeouts.Deadline) { d.MaxLateness = -time.Second }, at, events.ReasonInvalidField, "max_lateness_ms"},
		{"payload not an object", func(d *timeouts.Deadline) { d.Payload = []byte(`"x"`) }, at, events.ReasonInvalidPayload, "payload"},
		{"payload too large", func(d *timeouts.Deadline) {
			d.Payload = []byte(`{"x":"` + strings.Repeat("a", events.MaxPayloadBytes) + `"}`)
		}, at, events.ReasonPayloadTooLarge, "payload"},
		{"not dated", func(*timeouts.Deadline) {}, time.Time{}, events.ReasonInvalidField, "issued_at"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			d := ok
			tt.edit(&d)
			_, err := timeouts.SetCommand(d, tt.issued)
			var r *timeouts.RefusedError
			if !errors.As(err, &r) || !errors.Is(err, timeouts.ErrRefused) {
				t.Fatalf("SetCommand = %v, want a *RefusedError", err)
			}
			if r.Reason != tt.reason || r.Field != tt.field || r.Key != d.Key {
				t.Fatalf("refused with %s on %q for key %q, want %s on %q", r.Reason, r.Field, r.Key, tt.reason, tt.field)
			}
		})
	}
	c, err := timeouts.SetCommand(ok, at)
	if err != nil {
		t.Fatalf("valid deadline refused: %v", err)
	}
	if c.Kind != events.KindSet || c.Key != "res-1" || c.Version != 1 || !c.IssuedAt.Equal(at) {
		t.Fatalf("command %+v", c)
	}
}

// TestClearCommand: a clear needs a valid key and version, and is dated.
func TestClearCommand(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 11, 26, 9, 0, 0, 0, time.UTC)
	if _, err := timeouts.ClearCommand("res-1", -1, at); !errors.Is(err, timeouts.ErrRefused) {
		t.Fatalf("clear at version -1: %v, want refused", err)
	}
	c, err := timeouts.ClearCommand("res-1", 3, at)
	if err != nil || c.Kind != events.KindClear || c.Version != 3 || c.Subject() != "timeouts.cmd.res-1" {
		t.Fatalf("ClearCommand = %+v, %v", c, err)
	}
}
