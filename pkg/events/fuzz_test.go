package events_test

import (
	"encoding/json"
	"testing"

	"github.com/ordertimeout/ordertimeout/pkg/events"
)

// The fuzz targets check that decoders never panic, that every rejection is
// an *events.Error with a reason, and that whatever they accept validates and
// survives a marshal/decode round trip unchanged.

func FuzzDecodeCommand(f *testing.F) {
	for _, s := range []string{
		`{"schema":1,"kind":"set","key":"o-1","version":3,"deadline":"2026-01-02T03:04:05.123456789Z","fire_subject":"orders.cancel.o-1","payload":{"a":1}}`,
		`{"kind":"clear","key":"k","version":1}`,
		`{"kind":"set","key":"k","version":1,"deadline":"9999-12-31T23:59:59Z","fire_subject":"a.b","max_lateness_ms":5}`,
		`{"schema":2}`, `[]`, `null`, ``,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := events.DecodeCommand(data)
		if err != nil {
			if events.ReasonOf(err) == "" {
				t.Fatalf("rejection without reason: %v", err)
			}
			return
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("accepted command does not validate: %v", err)
		}
		again, err := json.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		c2, err := events.DecodeCommand(again)
		if err != nil {
			t.Fatalf("re-decoding %s: %v", again, err)
		}
		if c2.MsgID() != c.MsgID() || !c2.Deadline.Equal(c.Deadline) || c2.FireSubject != c.FireSubject {
			t.Fatalf("round trip changed the command: %+v vs %+v", c, c2)
		}
	})
}

func FuzzDecodeExpiry(f *testing.F) {
	f.Add([]byte(`{"outcome":"fired","key":"k","version":1,"deadline":"2026-01-02T03:04:05Z","fired_at":"2026-01-02T03:04:05.001Z","lateness_ns":1000000}`))
	f.Add([]byte(`{"outcome":"missed","key":"k","version":2,"deadline":"2026-01-02T03:04:05Z","fired_at":"2026-01-03T03:04:05Z"}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		e, err := events.DecodeExpiry(data)
		if err != nil {
			if events.ReasonOf(err) == "" {
				t.Fatalf("rejection without reason: %v", err)
			}
			return
		}
		if e.FiredAt.Before(e.Deadline) {
			t.Fatalf("accepted an early expiry: %+v", e)
		}
	})
}

func FuzzDecodeOrderEvent(f *testing.F) {
	f.Add([]byte(`{"type":"cancelled","order_id":"o-1","version":2,"status":"cancelled","cancel_reason":"payment_timeout","at":"2026-01-02T03:04:05Z"}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		e, err := events.DecodeOrderEvent(data)
		if err != nil {
			if events.ReasonOf(err) == "" {
				t.Fatalf("rejection without reason: %v", err)
			}
			return
		}
		if !events.ValidKey(e.OrderID) || e.Version <= 0 {
			t.Fatalf("accepted an invalid event: %+v", e)
		}
	})
}
