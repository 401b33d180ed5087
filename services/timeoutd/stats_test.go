package timeoutd

import (
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/ordertimeout/ordertimeout/internal/outbox"
	"github.com/ordertimeout/ordertimeout/pkg/events"
)

// latencies records FireLateness observations.
type latencies struct {
	NopMetrics
	mu  sync.Mutex
	got []time.Duration
}

func (l *latencies) FireLateness(d time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.got = append(l.got, d)
}

func TestPublishedReadsTaggedAndClaimedEvents(t *testing.T) {
	t.Parallel()
	deadline := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	expiry := func(key string) events.Expiry {
		return events.Expiry{Schema: events.SchemaVersion, Outcome: events.OutcomeFired, Key: key, Version: 1,
			Deadline: deadline, FiredAt: deadline, Payload: json.RawMessage(`{"big":true}`)}
	}
	message := func(t *testing.T, e events.Expiry, tagged bool) outbox.Message {
		t.Helper()
		data, err := json.Marshal(e)
		if err != nil {
			t.Fatal(err)
		}
		m := outbox.Message{Subject: events.OrderCancelSubject(e.Key), MsgID: e.MsgID(), Data: data}
		if tagged {
			e.Payload = nil
			m.Tag = &e
		}
		return m
	}
	tests := []struct {
		name   string
		tagged bool
	}{
		{"handed over, read from the tag", true},
		{"claimed from the table, decoded", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			m := &latencies{}
			s, err := New(Config{}, Deps{Store: &fakeStore{rows: map[string]Timeout{}}, Source: nopSource{},
				DeadLetters: &fakeDLQ{}, Relay: &fakeRelay{}, Leases: soleLeases{}, Metrics: m})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(s.sched.Stop)
			batch := []outbox.Message{message(t, expiry("o-1"), tc.tagged), message(t, expiry("o-2"), tc.tagged),
				{Subject: "not.an.expiry", Data: []byte("not json")}}
			s.Published(batch, deadline.Add(7*time.Millisecond))
			if len(m.got) != 2 || m.got[0] != 7*time.Millisecond || m.got[1] != 7*time.Millisecond {
				t.Errorf("lateness observed = %v, want 7ms twice", m.got)
			}
			recent := s.Recent(10)
			if len(recent) != 2 || recent[0].Key != "o-2" || recent[1].Key != "o-1" {
				t.Fatalf("recent = %+v, want o-2 then o-1", recent)
			}
			for _, e := range recent {
				if e.Payload != nil || !e.Deadline.Equal(deadline) {
					t.Errorf("recent %s: payload %s, deadline %v; want no payload and the deadline", e.Key, e.Payload, e.Deadline)
				}
			}
		})
	}
}
