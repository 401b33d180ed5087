package events_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/ordertimeout/ordertimeout/pkg/events"
)

// The fuzz targets check that decoders never panic, that every rejection is
// an *events.Error with a reason, and that whatever they accept re-encodes
// to a message that decodes to an equivalent value (the oracle: nothing the
// decoder let through is lost or changed by the encoding the services use).
// TestHostileSeedsAreRefused checks every hostile seed of the corpora is
// refused.

// rejected fails unless err is an *events.Error with a reason.
func rejected(t *testing.T, err error) {
	t.Helper()
	var e *events.Error
	if !errors.As(err, &e) || e.Reason == "" {
		t.Fatalf("rejection is not an *events.Error with a reason: %v", err)
	}
}

// sameJSON reports whether a and b are the same JSON text but for spaces.
// sameJSON reports whether a and b hold the same JSON value: encodings may
// differ in spacing and escapes (Go's encoder writes "&" as "\u0026"),
// numbers are compared as written.
func sameJSON(a, b []byte) bool {
	if len(a) == 0 || len(b) == 0 {
		return len(a) == len(b)
	}
	va, errA := decodeUseNumber(a)
	vb, errB := decodeUseNumber(b)
	return errA == nil && errB == nil && reflect.DeepEqual(va, vb)
}

func decodeUseNumber(data []byte) (any, error) {
	d := json.NewDecoder(bytes.NewReader(data))
	d.UseNumber()
	var v any
	err := d.Decode(&v)
	return v, err
}

func sameCommand(a, b events.Command) bool {
	return a.Schema == b.Schema && a.Kind == b.Kind && a.Key == b.Key && a.Version == b.Version &&
		a.Deadline.Equal(b.Deadline) && a.FireSubject == b.FireSubject && a.MaxLatenessMs == b.MaxLatenessMs &&
		sameJSON(a.Payload, b.Payload)
}

func FuzzDecodeCommand(f *testing.F) {
	for _, s := range []string{
		`{"schema":1,"kind":"set","key":"o-1","version":3,"deadline":"2026-01-02T03:04:05.123456789Z","fire_subject":"orders.cancel.o-1","payload":{"a":1}}`,
		`{"kind":"clear","key":"k","version":1}`,
		`{"kind":"set","key":"k","version":1,"deadline":"2262-04-11T23:47:16Z","fire_subject":"a.b","max_lateness_ms":5}`,
		`{"kind":"set","key":"k","version":1,"deadline":"2026-01-02T05:04:05+02:00","fire_subject":"a.b","payload":{ "x" : [1, 2] }}`,
		`{"schema":2}`, `[]`, `null`, ``,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := events.DecodeCommand(data)
		if err != nil {
			rejected(t, err)
			return
		}
		again, err := json.Marshal(c)
		if err != nil {
			t.Fatalf("encoding %+v: %v", c, err)
		}
		c2, err := events.DecodeCommand(again)
		if err != nil {
			t.Fatalf("re-decoding %s: %v", again, err)
		}
		if !sameCommand(c, c2) {
			t.Fatalf("round trip changed the command: %+v, then %+v", c, c2)
		}
	})
}

func FuzzDecodeExpiry(f *testing.F) {
	f.Add([]byte(`{"outcome":"fired","key":"k","version":1,"deadline":"2026-01-02T03:04:05Z","fired_at":"2026-01-02T03:04:05.001Z","lateness_ns":1000000}`))
	f.Add([]byte(`{"outcome":"missed","key":"k","version":2,"deadline":"2026-01-02T03:04:05Z","fired_at":"2026-01-03T03:04:05Z","payload":{"a":1}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		e, err := events.DecodeExpiry(data)
		if err != nil {
			rejected(t, err)
			return
		}
		again, err := json.Marshal(e)
		if err != nil {
			t.Fatalf("encoding %+v: %v", e, err)
		}
		e2, err := events.DecodeExpiry(again)
		if err != nil {
			t.Fatalf("re-decoding %s: %v", again, err)
		}
		if e2.Schema != e.Schema || e2.MsgID() != e.MsgID() || !e2.Deadline.Equal(e.Deadline) || !e2.FiredAt.Equal(e.FiredAt) ||
			e2.LatenessNs != e.LatenessNs || !sameJSON(e2.Payload, e.Payload) {
			t.Fatalf("round trip changed the expiry: %+v, then %+v", e, e2)
		}
	})
}

func FuzzDecodeOrderEvent(f *testing.F) {
	f.Add([]byte(`{"type":"cancelled","order_id":"o-1","version":2,"status":"cancelled","cancel_reason":"payment_timeout","at":"2026-01-02T03:04:05Z"}`))
	f.Add([]byte(`{"schema":1,"type":"created","order_id":"o","version":1,"status":"pending_payment","customer_id":"c","amount_minor":1,"currency":"EUR","pay_by":"2026-01-02T03:04:05Z","at":"2026-01-02T03:04:05Z"}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		e, err := events.DecodeOrderEvent(data)
		if err != nil {
			rejected(t, err)
			return
		}
		again, err := json.Marshal(e)
		if err != nil {
			t.Fatalf("encoding %+v: %v", e, err)
		}
		e2, err := events.DecodeOrderEvent(again)
		if err != nil {
			t.Fatalf("re-decoding %s: %v", again, err)
		}
		if !e2.PayBy.Equal(e.PayBy) || !e2.At.Equal(e.At) {
			t.Fatalf("round trip changed the times: %+v, then %+v", e, e2)
		}
		e2.PayBy, e2.At = e.PayBy, e.At
		if e2 != e {
			t.Fatalf("round trip changed the event: %+v, then %+v", e, e2)
		}
	})
}

// TestHostileSeedsAreRefused decodes every seed named hostile_* under
// testdata/fuzz with its target's decoder and requires a rejection: a
// seed is in the corpus because the decoder must refuse it.
func TestHostileSeedsAreRefused(t *testing.T) {
	t.Parallel()
	decoders := map[string]func([]byte) error{
		"FuzzDecodeCommand":    func(b []byte) error { _, err := events.DecodeCommand(b); return err },
		"FuzzDecodeExpiry":     func(b []byte) error { _, err := events.DecodeExpiry(b); return err },
		"FuzzDecodeOrderEvent": func(b []byte) error { _, err := events.DecodeOrderEvent(b); return err },
	}
	files, err := filepath.Glob("testdata/fuzz/*/hostile_*")
	if err != nil || len(files) < len(decoders) {
		t.Fatalf("hostile seeds: %v (%v)", files, err)
	}
	for _, f := range files {
		decode := decoders[filepath.Base(filepath.Dir(f))]
		if decode == nil {
			t.Fatalf("%s: no fuzz target of that name", f)
		}
		t.Run(strings.TrimPrefix(f, "testdata/fuzz/"), func(t *testing.T) {
			t.Parallel()
			raw, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			// The corpus format: a header line, then []byte("…") quoted as Go.
			header, value, ok := strings.Cut(strings.TrimSpace(string(raw)), "\n")
			lit, isBytes := strings.CutPrefix(value, "[]byte(")
			if !ok || header != "go test fuzz v1" || !isBytes {
				t.Fatalf("not a one-value []byte corpus file: %q", raw)
			}
			data, err := strconv.Unquote(strings.TrimSuffix(lit, ")"))
			if err != nil {
				t.Fatalf("value %s: %v", lit, err)
			}
			err = decode([]byte(data))
			if err == nil {
				t.Fatalf("accepted %s", data)
			}
			rejected(t, err)
		})
	}
}
