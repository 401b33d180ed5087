package events_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/ordertimeout/ordertimeout/pkg/events"
)

func TestDecodeCommand(t *testing.T) {
	t.Parallel()
	big := `"` + strings.Repeat("x", events.MaxPayloadBytes) + `"`
	tests := []struct {
		name   string
		in     string
		reason events.Reason // empty: valid
		field  string
	}{
		{"set", `{"schema":1,"kind":"set","key":"o-1","version":3,"deadline":"2026-01-02T03:04:05.123456789Z","fire_subject":"orders.cancel.o-1","payload":{"a":1}}`, "", ""},
		{"clear", `{"schema":1,"kind":"clear","key":"o_1","version":4}`, "", ""},
		{"missing schema reads as 1", `{"kind":"clear","key":"k","version":1}`, "", ""},
		{"issued at", `{"kind":"clear","key":"k","version":1,"issued_at":"2026-01-02T03:04:05.5+01:00"}`, "", ""},
		{"issued at not rfc3339", `{"kind":"clear","key":"k","version":1,"issued_at":"yesterday"}`, events.ReasonInvalidDeadline, "issued_at"},
		{"issued at out of range", `{"kind":"clear","key":"k","version":1,"issued_at":"3000-01-01T00:00:00Z"}`, events.ReasonDeadlineOutOfRange, "issued_at"},
		{"unknown fields ignored", `{"schema":1,"kind":"clear","key":"k","version":1,"extra":{"x":[1]}}`, "", ""},
		{"offset deadline", `{"kind":"set","key":"k","version":1,"deadline":"2026-01-02T05:04:05+02:00","fire_subject":"a.b"}`, "", ""},
		{"not json", `{"kind":`, events.ReasonMalformed, ""},
		{"trailing data", `{"kind":"clear","key":"k","version":1} {}`, events.ReasonMalformed, ""},
		{"wrong type", `{"kind":"clear","key":7,"version":1}`, events.ReasonMalformed, ""},
		{"newer schema", `{"schema":2,"kind":"clear","key":"k","version":1}`, events.ReasonUnsupportedSchema, "schema"},
		{"zero schema", `{"schema":0,"kind":"clear","key":"k","version":1}`, events.ReasonUnsupportedSchema, "schema"},
		{"unknown kind", `{"kind":"delete","key":"k","version":1}`, events.ReasonUnknownKind, "kind"},
		{"empty key", `{"kind":"clear","key":"","version":1}`, events.ReasonInvalidKey, "key"},
		{"key with two dots", `{"kind":"clear","key":"a.b.c","version":1}`, events.ReasonInvalidKey, "key"},
		{"orders tenant qualified", `{"kind":"clear","key":"orders.b","version":1}`, events.ReasonInvalidKey, "key"},
		{"tenant with a capital", `{"kind":"clear","key":"Res.b","version":1}`, events.ReasonInvalidKey, "key"},
		{"tenant key", `{"kind":"clear","key":"reservations.r-1","version":1}`, "", ""},
		{"key with dot at start", `{"kind":"clear","key":".b","version":1}`, events.ReasonInvalidKey, "key"},
		{"key with unicode", `{"kind":"clear","key":"ключ","version":1}`, events.ReasonInvalidKey, "key"},
		{"key too long", `{"kind":"clear","key":"` + strings.Repeat("k", events.MaxKeyLen+1) + `","version":1}`, events.ReasonInvalidKey, "key"},
		{"missing version", `{"kind":"clear","key":"k"}`, events.ReasonInvalidVersion, "version"},
		{"zero version", `{"kind":"clear","key":"k","version":0}`, events.ReasonInvalidVersion, "version"},
		{"fractional version", `{"kind":"clear","key":"k","version":1.5}`, events.ReasonInvalidVersion, "version"},
		{"huge version", `{"kind":"clear","key":"k","version":99999999999999999999}`, events.ReasonInvalidVersion, "version"},
		{"version as a string", `{"kind":"clear","key":"k","version":"1"}`, events.ReasonInvalidVersion, "version"},
		{"null version", `{"kind":"clear","key":"k","version":null}`, events.ReasonInvalidVersion, "version"},
		{"version in exponent form", `{"kind":"clear","key":"k","version":1e3}`, events.ReasonInvalidVersion, "version"},
		{"set without deadline", `{"kind":"set","key":"k","version":1,"fire_subject":"a.b"}`, events.ReasonInvalidDeadline, "deadline"},
		{"deadline not rfc3339", `{"kind":"set","key":"k","version":1,"deadline":"tomorrow","fire_subject":"a.b"}`, events.ReasonInvalidDeadline, "deadline"},
		{"deadline without zone", `{"kind":"set","key":"k","version":1,"deadline":"2026-01-02T03:04:05","fire_subject":"a.b"}`, events.ReasonInvalidDeadline, "deadline"},
		{"wildcard fire subject", `{"kind":"set","key":"k","version":1,"deadline":"2026-01-02T03:04:05Z","fire_subject":"orders.>"}`, events.ReasonInvalidSubject, "fire_subject"},
		{"empty token in subject", `{"kind":"set","key":"k","version":1,"deadline":"2026-01-02T03:04:05Z","fire_subject":"orders..x"}`, events.ReasonInvalidSubject, "fire_subject"},
		{"payload too large", `{"kind":"set","key":"k","version":1,"deadline":"2026-01-02T03:04:05Z","fire_subject":"a.b","payload":` + big + `}`, events.ReasonPayloadTooLarge, "payload"},
		{"deadline before 1678", `{"kind":"set","key":"k","version":1,"deadline":"1500-01-01T00:00:00Z","fire_subject":"a.b"}`, events.ReasonDeadlineOutOfRange, "deadline"},
		{"deadline after 2262", `{"kind":"set","key":"k","version":1,"deadline":"2300-01-01T00:00:00Z","fire_subject":"a.b"}`, events.ReasonDeadlineOutOfRange, "deadline"},
		{"deadline a nanosecond past the range", `{"kind":"set","key":"k","version":1,"deadline":"2262-04-11T23:47:16.854775808Z","fire_subject":"a.b"}`, events.ReasonDeadlineOutOfRange, "deadline"},
		{"deadline at the end of the range", `{"kind":"set","key":"k","version":1,"deadline":"2262-04-11T23:47:16.854775807Z","fire_subject":"a.b"}`, "", ""},
		{"deadline at the start of the range", `{"kind":"set","key":"k","version":1,"deadline":"1677-09-21T00:12:43.145224192Z","fire_subject":"a.b"}`, "", ""},
		{"negative misfire bound", `{"kind":"set","key":"k","version":1,"deadline":"2026-01-02T03:04:05Z","fire_subject":"a.b","max_lateness_ms":-1}`, events.ReasonInvalidField, "max_lateness_ms"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c, err := events.DecodeCommand([]byte(tt.in))
			if tt.reason == "" {
				if err != nil {
					t.Fatalf("DecodeCommand: %v", err)
				}
				if err := c.Validate(); err != nil {
					t.Fatalf("decoded command does not validate: %v", err)
				}
				return
			}
			var e *events.Error
			if !errors.As(err, &e) {
				t.Fatalf("err = %v, want *events.Error with reason %s", err, tt.reason)
			}
			if e.Reason != tt.reason || e.Field != tt.field {
				t.Fatalf("reason, field = %s, %q; want %s, %q (%v)", e.Reason, e.Field, tt.reason, tt.field, err)
			}
		})
	}
}

func TestDecodeCommandNormalisesDeadlineToUTC(t *testing.T) {
	t.Parallel()
	c, err := events.DecodeCommand([]byte(`{"kind":"set","key":"k","version":1,"deadline":"2026-01-02T05:04:05.5+02:00","fire_subject":"a.b"}`))
	if err != nil {
		t.Fatal(err)
	}
	want := time.Date(2026, 1, 2, 3, 4, 5, 5e8, time.UTC)
	if !c.Deadline.Equal(want) || c.Deadline.Location() != time.UTC {
		t.Fatalf("deadline = %v, want %v in UTC", c.Deadline, want)
	}
}

func TestRoundTrips(t *testing.T) {
	t.Parallel()
	d := time.Date(2026, 5, 6, 7, 8, 9, 123456789, time.UTC)
	cmd := events.Command{Schema: 1, Kind: events.KindSet, Key: "o-9", Version: 7, Deadline: d,
		FireSubject: events.OrderCancelSubject("o-9"), MaxLatenessMs: 500, Payload: json.RawMessage(`{"shop":"s1"}`), IssuedAt: d.Add(-time.Hour)}
	data, err := json.Marshal(cmd)
	if err != nil {
		t.Fatal(err)
	}
	got, err := events.DecodeCommand(data)
	if err != nil {
		t.Fatal(err)
	}
	if got.Key != cmd.Key || got.Version != cmd.Version || !got.Deadline.Equal(d) || got.FireSubject != cmd.FireSubject ||
		got.MaxLatenessMs != 500 || string(got.Payload) != `{"shop":"s1"}` || !got.IssuedAt.Equal(cmd.IssuedAt) {
		t.Fatalf("command round trip: got %+v, want %+v", got, cmd)
	}

	exp := events.Expiry{Schema: 1, Outcome: events.OutcomeFired, Key: "o-9", Version: 7, Deadline: d,
		FiredAt: d.Add(3 * time.Millisecond), LatenessNs: 3e6, Payload: cmd.Payload}
	data, _ = json.Marshal(exp)
	gotExp, err := events.DecodeExpiry(data)
	if err != nil {
		t.Fatal(err)
	}
	if gotExp.MsgID() != "fired:o-9:7" || !gotExp.FiredAt.Equal(exp.FiredAt) || gotExp.LatenessNs != 3e6 {
		t.Fatalf("expiry round trip: got %+v", gotExp)
	}

	ev := events.OrderEvent{Schema: 1, Type: events.OrderCancelled, OrderID: "o-9", Version: 3, Status: events.StatusCancelled,
		CancelReason: events.CancelPaymentTimeout, CustomerID: "c", AmountMinor: 1299, Currency: "EUR", PayBy: d, At: d}
	data, _ = json.Marshal(ev)
	gotEv, err := events.DecodeOrderEvent(data)
	if err != nil {
		t.Fatal(err)
	}
	if gotEv != ev {
		t.Fatalf("order event round trip: got %+v, want %+v", gotEv, ev)
	}
}

func TestDecodeExpiryRejectsEarlyFire(t *testing.T) {
	t.Parallel()
	_, err := events.DecodeExpiry([]byte(`{"outcome":"fired","key":"k","version":1,"deadline":"2026-01-02T03:04:05Z","fired_at":"2026-01-02T03:04:04Z"}`))
	if events.ReasonOf(err) != events.ReasonInvalidDeadline {
		t.Fatalf("err = %v, want reason %s", err, events.ReasonInvalidDeadline)
	}
}

func TestMsgIDsAreDistinctPerKindAndVersion(t *testing.T) {
	t.Parallel()
	ids := map[string]bool{}
	const nonce = "AAAAAAAAAAAAAAAAAAAAAA"
	for _, id := range []string{
		events.Command{Kind: events.KindSet, Key: "a", Version: 1}.MsgID(nonce),
		events.Command{Kind: events.KindSet, Key: "a", Version: 2}.MsgID(nonce),
		events.Command{Kind: events.KindClear, Key: "a", Version: 2}.MsgID(nonce),
		events.Command{Kind: events.KindSet, Key: "a-1", Version: 2}.MsgID(nonce),
		events.Command{Kind: events.KindSet, Key: "a-1", Version: 2}.MsgID(events.NewNonce()),
		events.Expiry{Outcome: events.OutcomeFired, Key: "a", Version: 1}.MsgID(),
		events.Expiry{Outcome: events.OutcomeMissed, Key: "a", Version: 1}.MsgID(),
		events.OrderEvent{Type: events.OrderPaid, OrderID: "a", Version: 1}.MsgID(),
		events.OrderEvent{Type: events.OrderCancelled, OrderID: "a", Version: 1}.MsgID(),
	} {
		if ids[id] {
			t.Fatalf("duplicate msg id %q", id)
		}
		ids[id] = true
	}
}

func TestSubjects(t *testing.T) {
	t.Parallel()
	tests := []struct{ got, want string }{
		{events.CommandSubject("o-1"), "timeouts.cmd.o-1"},
		{events.MissedSubject("o-1"), "timeouts.missed.o-1"},
		{events.OrderCancelSubject("o-1"), "orders.cancel.o-1"},
		{events.OrderEventSubject(events.OrderPaid, "o-1"), "orders.paid.o-1"},
		{events.OrderEventSubjects(events.OrderCancelled), "orders.cancelled.>"},
		{events.OrderCancelSubjects, "orders.cancel.>"},
		{events.DeadLetterSubject("timeoutd", events.ReasonInvalidKey), "dlq.timeoutd.invalid_key"},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("subject = %q, want %q", tt.got, tt.want)
		}
	}
}

func TestNewDeadLetter(t *testing.T) {
	t.Parallel()
	_, err := events.DecodeCommand([]byte(`{"kind":"clear","key":"a b","version":1}`))
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	d := events.NewDeadLetter("timeouts.cmd.x", []byte("raw"), "clear:x:1:AAAAAAAAAAAAAAAAAAAAAA", 42, err, at)
	if d.Reason != events.ReasonInvalidKey || d.Field != "key" || d.StreamSeq != 42 || d.RejectedMsgID != "clear:x:1:AAAAAAAAAAAAAAAAAAAAAA" ||
		d.MsgID() != "dlq:timeouts.cmd.x:42:8657daca7a0fc646917f562a4e719b48" {
		t.Fatalf("dead letter = %+v, id %s", d, d.MsgID())
	}
}

// TestTimesOutsideTheRangeAreRefused is issue 14 item 2.3: a time outside
// the int64 Unix-nanosecond range used to be accepted and wrap around when
// stored (a set dated 1500 was stored as 2084). Every decoder, and
// Command.Validate for producers, refuses it naming the field.
func TestTimesOutsideTheRangeAreRefused(t *testing.T) {
	t.Parallel()
	const ok = "2026-01-02T03:04:05Z"
	expiry := func(deadline, firedAt string) string {
		return `{"outcome":"fired","key":"k","version":1,"deadline":"` + deadline + `","fired_at":"` + firedAt + `"}`
	}
	order := func(payBy, at string) string {
		return `{"schema":1,"type":"created","order_id":"o","version":1,"status":"pending_payment","customer_id":"c","amount_minor":1,"currency":"EUR","pay_by":"` + payBy + `","at":"` + at + `"}`
	}
	decodeExpiry := func(s string) error { _, err := events.DecodeExpiry([]byte(s)); return err }
	decodeOrder := func(s string) error { _, err := events.DecodeOrderEvent([]byte(s)); return err }
	tests := []struct {
		name   string
		decode func(string) error
		in     string
		field  string
	}{
		{"expiry deadline in 1500", decodeExpiry, expiry("1500-01-01T00:00:00Z", ok), "deadline"},
		{"expiry fired_at in 2300", decodeExpiry, expiry(ok, "2300-01-01T00:00:00Z"), "fired_at"},
		{"order pay_by in 1500", decodeOrder, order("1500-01-01T00:00:00Z", ok), "pay_by"},
		{"order at in 9999", decodeOrder, order(ok, "9999-12-31T23:59:59Z"), "at"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var e *events.Error
			if err := tt.decode(tt.in); !errors.As(err, &e) || e.Reason != events.ReasonDeadlineOutOfRange || e.Field != tt.field {
				t.Fatalf("err = %v, want reason %s on %s", err, events.ReasonDeadlineOutOfRange, tt.field)
			}
		})
	}
	t.Run("Command.Validate", func(t *testing.T) {
		t.Parallel()
		c := events.Command{Schema: 1, Kind: events.KindSet, Key: "k", Version: 1,
			Deadline: time.Date(1500, 1, 1, 0, 0, 0, 0, time.UTC), FireSubject: "a.b"}
		var e *events.Error
		if err := c.Validate(); !errors.As(err, &e) || e.Reason != events.ReasonDeadlineOutOfRange || e.Field != "deadline" {
			t.Fatalf("err = %v, want reason %s on deadline", err, events.ReasonDeadlineOutOfRange)
		}
	})
}

// BenchmarkDecodeCommand decodes a typical set, as timeoutd's ingest does
// for every command.
func BenchmarkDecodeCommand(b *testing.B) {
	data := []byte(`{"schema":1,"kind":"set","key":"019a4b2c-7d1e-7f00-8a3b-123456789abc","version":3,"deadline":"2026-01-02T03:04:05.123456789Z","fire_subject":"orders.cancel.019a4b2c-7d1e-7f00-8a3b-123456789abc"}`)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := events.DecodeCommand(data); err != nil {
			b.Fatal(err)
		}
	}
}

// TestCheckMsgID: a command message's id must end in a nonce another
// tenant cannot guess; the ids of the contract before nonces, a missing
// id and a short or foreign-alphabet tail are refused naming the header.
func TestCheckMsgID(t *testing.T) {
	t.Parallel()
	c := events.Command{Kind: events.KindClear, Key: "reservations.r-1", Version: 7}
	tests := []struct {
		name, id string
		ok       bool
	}{
		{"a command's", c.MsgID(events.NewNonce()), true},
		{"a batch's", events.BatchMsgID([]string{c.MsgID(events.NewNonce())}), true},
		{"a replayed dead letter's", "replay:" + events.NewDeadLetter("timeouts.cmd.x", nil, "", 1, errors.New("x"), time.Time{}).MsgID(), true},
		{"the contract's before nonces", "clear:reservations.r-1:7", false},
		{"none", "", false},
		{"a nonce one short", c.MsgID(strings.Repeat("a", events.NonceLen-1)), false},
		{"a nonce with a dot", c.MsgID(strings.Repeat("a", events.NonceLen) + "."), false},
		{"a nonce alone", events.NewNonce(), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := events.CheckMsgID(tt.id)
			if tt.ok != (err == nil) {
				t.Fatalf("CheckMsgID(%q) = %v, want ok %v", tt.id, err, tt.ok)
			}
			var e *events.Error
			if err != nil && (!errors.As(err, &e) || e.Reason != events.ReasonGuessableMsgID || e.Field != "Nats-Msg-Id") {
				t.Fatalf("CheckMsgID(%q) = %v, want reason %s on Nats-Msg-Id", tt.id, err, events.ReasonGuessableMsgID)
			}
		})
	}
	if a, b := events.NewNonce(), events.NewNonce(); a == b || len(a) != events.NonceLen {
		t.Fatalf("two nonces %q and %q: want distinct, of %d characters", a, b, events.NonceLen)
	}
}
