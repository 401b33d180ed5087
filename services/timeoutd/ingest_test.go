package timeoutd

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/ordertimeout/ordertimeout/pkg/events"
)

// batchSource delivers its batches in order, then closes drained on the
// next call to Next (so every batch has been processed) and blocks.
type batchSource struct {
	nopSource
	batches [][]Message
	drained chan struct{}
}

func (b *batchSource) Next(ctx context.Context) ([]Message, error) {
	if len(b.batches) == 0 {
		close(b.drained)
		<-ctx.Done()
		return nil, ctx.Err()
	}
	next := b.batches[0]
	b.batches = b.batches[1:]
	return next, nil
}

func setCmd(key string, version int64, deadline time.Time) events.Command {
	return events.Command{Schema: 1, Kind: events.KindSet, Key: key, Version: version,
		Deadline: deadline, FireSubject: events.OrderCancelSubject(key)}
}

func clearCmd(key string, version int64) events.Command {
	return events.Command{Schema: 1, Kind: events.KindClear, Key: key, Version: version}
}

// TestIngestNeverWaitsForRoom is issue 14 item 2.1: ingest used to wait
// while pending plus the batch size exceeded MaxPending, for good when
// MaxPending was below the batch size, and even for batches of clears.
// Now only the sets of keys not held in memory need room; the ones that do
// not fit are deferred (redelivered later), and everything else goes on.
func TestIngestNeverWaitsForRoom(t *testing.T) {
	t.Parallel()
	now := time.Now().Add(time.Hour).UTC() // deadlines the real wheel never reaches
	tests := []struct {
		name       string
		maxPending int
		held       []string // pending in memory before the batch
		batch      []events.Command
		mustApply  []string // keys that must be upserted
		applied    int      // keys upserted (the lanes race for the room)
		pending    int      // in memory after the batch
	}{
		{
			name:       "MaxPending below the batch size",
			maxPending: 1,
			batch:      []events.Command{setCmd("a", 1, now.Add(time.Hour)), setCmd("b", 1, now.Add(time.Hour)), setCmd("c", 1, now.Add(time.Hour))},
			applied:    1,
			pending:    1,
		},
		{
			name:       "clears and moves pass a full memory",
			maxPending: 2,
			held:       []string{"a", "b"},
			batch:      []events.Command{clearCmd("a", 2), setCmd("b", 2, now.Add(2*time.Hour)), setCmd("c", 1, now.Add(time.Hour))},
			mustApply:  []string{"a", "b"},
			applied:    2,
			pending:    1,
		},
		{
			name:       "a stale set of a held key passes a full memory",
			maxPending: 1,
			held:       []string{"a"},
			batch:      []events.Command{setCmd("a", 1, now.Add(time.Hour)), clearCmd("x", 1)},
			mustApply:  []string{"a", "x"},
			applied:    2,
			pending:    1,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			st := &fakeStore{rows: map[string]Timeout{}}
			var msgs []*fakeMsg
			var batch []Message
			for i, c := range tt.batch {
				m := cmdMsg(t, uint64(i+1), c)
				msgs, batch = append(msgs, m), append(batch, m)
			}
			src := &batchSource{batches: [][]Message{batch}, drained: make(chan struct{})}
			s, err := New(Config{MaxPending: tt.maxPending, Now: func() time.Time { return now }, RetryDelay: time.Hour},
				Deps{Store: st, Source: src, DeadLetters: &fakeDLQ{}, Publisher: st, Leases: soleLeases{}})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(s.sched.Stop)
			ownAll(s)
			for _, k := range tt.held {
				s.ingest.apply([]Change{{Key: k, Version: 1, Deadline: now.Add(time.Hour)}})
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			s.ingest.Start(ctx)
			defer s.ingest.Stop()
			select {
			case <-src.drained:
			case <-time.After(5 * time.Second):
				t.Fatalf("ingest did not finish the batch (pending %d, MaxPending %d)", s.Pending(), tt.maxPending)
			}
			var applied []string
			for _, b := range st.applied {
				for _, c := range b {
					applied = append(applied, c.Key)
				}
			}
			if len(applied) != tt.applied {
				t.Errorf("applied %v, want %d keys", applied, tt.applied)
			}
			for _, k := range tt.mustApply {
				if !slices.Contains(applied, k) {
					t.Errorf("applied %v, want %s among them", applied, k)
				}
			}
			// Acked when applied, deferred (nak with delay) otherwise.
			for i, m := range msgs {
				want := "nak"
				if slices.Contains(applied, tt.batch[i].Key) {
					want = "ack"
				}
				if m.fate != want {
					t.Errorf("%s %s: fate %q, want %q", tt.batch[i].Kind, tt.batch[i].Key, m.fate, want)
				}
			}
			if got := s.Pending(); got != tt.pending {
				t.Errorf("pending = %d, want %d", got, tt.pending)
			}
		})
	}
}
