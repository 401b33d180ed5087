package timeoutd

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ordertimeout/ordertimeout/pkg/events"
	"github.com/ordertimeout/ordertimeout/services/timeoutd/internal/lease"
	"github.com/ordertimeout/ordertimeout/services/timeoutd/internal/schedule"
)

// fakeStore is the Store and the Publisher of the unit tests: it records
// Apply calls, the events published and the timeouts marked fired.
// DueRows returns due as stored rows (with the fields of rows[key]).
// failRead, failPublish and failMark make that step of a fire fail.
type fakeStore struct {
	mu      sync.Mutex
	applied [][]events.Command
	fired   []Due   // marked fired
	built   []Event // published
	fences  uint64  // the fences given
	// lastSeq, lastOwner and lastEpoch are the expiry stream's last fence
	// (of every partition: the tests fire one key), which a fenced event
	// must name.
	lastSeq     uint64
	lastOwner   string
	lastEpoch   int64
	failRead    error
	failPublish error
	failMark    error
	rows        map[string]Timeout // what DueRows reads for a key
	// beforeFire, when set, runs once at the start of the next DueRows,
	// while the fire would be in flight.
	beforeFire func()
	fireCalls  int
	read       []string // the keys DueRows was asked for
	// markGate, when set, holds every MarkFired until it is closed;
	// markSizes records the rows of each MarkFired call.
	markGate  chan struct{}
	markSizes []int
	// pending is what LoadPending returns (one page).
	pending []Timeout
	// refuse is the partitions whose writes the fence refuses.
	refuse map[int]bool
}

func (f *fakeStore) Apply(_ context.Context, fence lease.Fence, cmds []events.Command, now time.Time) ([]Change, []int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.applied = append(f.applied, cmds)
	var out []Change
	var refused []int
	for _, c := range cmds {
		if p := events.PartitionOf(c.Key); f.refuse[p] {
			if !slices.Contains(refused, p) {
				refused = append(refused, p)
			}
			continue
		}
		ch := Change{Key: c.Key, Version: c.Version, Deadline: c.Deadline}
		if c.Kind == events.KindClear {
			ch.State, ch.Deadline = StateCleared, now
		}
		out = append(out, ch)
	}
	return out, refused, nil
}

func (f *fakeStore) DueRows(_ context.Context, due []Due) ([]Timeout, error) {
	f.mu.Lock()
	before := f.beforeFire
	f.beforeFire = nil
	f.mu.Unlock()
	if before != nil {
		before()
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fireCalls++
	for _, d := range due {
		f.read = append(f.read, d.Key)
	}
	if f.failRead != nil {
		return nil, f.failRead
	}
	var out []Timeout
	for _, d := range due {
		t := f.rows[d.Key]
		t.Key, t.Version, t.Deadline = d.Key, d.Version, d.Deadline
		t.FireSubject = cmp.Or(t.FireSubject, events.OrderCancelSubject(d.Key))
		out = append(out, t)
	}
	return out, nil
}

func (f *fakeStore) Publish(_ context.Context, evs []Event) (time.Time, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failPublish != nil {
		return time.Time{}, f.failPublish
	}
	for _, e := range evs {
		if e.Fence != 0 && e.Fence != f.lastSeq {
			return time.Time{}, fmt.Errorf("fake: %w", ErrFenced)
		}
	}
	f.built = append(f.built, evs...)
	return time.Now(), nil
}

func (f *fakeStore) Stored(_ context.Context, subject, msgID string) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, e := range slices.Backward(f.built) {
		if e.Subject == subject {
			return e.MsgID == msgID, nil
		}
	}
	return false, nil
}

// Fence gives each lease a sequence of its own, the stream's last fence,
// unless expect names another (the stream's rule is shown on JetStream
// and modelled in package sim).
func (f *fakeStore) Fence(_ context.Context, fence lease.Fence, expect []uint64) ([]uint64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	seqs := make([]uint64, len(fence.Leases))
	for i, l := range fence.Leases {
		if expect != nil && expect[i] != f.lastSeq {
			continue
		}
		f.fences++
		seqs[i], f.lastSeq, f.lastOwner, f.lastEpoch = f.fences+100, f.fences+100, fence.Owner, l.Epoch
	}
	return seqs, nil
}

func (f *fakeStore) LastFence(context.Context, int) (StreamFence, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return StreamFence{Seq: f.lastSeq, Owner: f.lastOwner, Epoch: f.lastEpoch}, nil
}

func (f *fakeStore) MarkFired(_ context.Context, _ lease.Fence, due []Due, _ time.Time) ([]int, error) {
	f.mu.Lock()
	f.markSizes = append(f.markSizes, len(due))
	gate := f.markGate
	f.mu.Unlock()
	if gate != nil {
		<-gate
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failMark != nil {
		return nil, f.failMark
	}
	var refused []int
	for _, d := range due {
		if p := events.PartitionOf(d.Key); f.refuse[p] {
			if !slices.Contains(refused, p) {
				refused = append(refused, p)
			}
			continue
		}
		f.fired = append(f.fired, d)
	}
	return refused, nil
}

func (f *fakeStore) LoadPending(_ context.Context, p int, after string, _ int) ([]Timeout, error) {
	if after != "" {
		return nil, nil
	}
	var out []Timeout
	for _, t := range f.pending {
		if events.PartitionOf(t.Key) == p {
			out = append(out, t)
		}
	}
	return out, nil
}
func (f *fakeStore) RetireTombstones(context.Context, lease.Fence, time.Time, int) (int, error) {
	return 0, nil
}
func (f *fakeStore) ForgetMarks(context.Context, lease.Fence, time.Time, int) (int, error) {
	return 0, nil
}
func (f *fakeStore) ListPending(context.Context, Query) ([]Timeout, error) { return nil, nil }
func (f *fakeStore) GetPending(context.Context, string) (Timeout, error) {
	return Timeout{}, ErrNotFound
}
func (f *fakeStore) CountDue(_ context.Context, h []time.Time) ([]int64, error) {
	return make([]int64, len(h)), nil
}
func (f *fakeStore) Ping(context.Context) error { return nil }

// fakeMsg is a delivered command that records its fate.
type fakeMsg struct {
	subject string
	data    []byte
	seq     uint64
	header  map[string]string
	fate    string // "", "ack", "term", "nak"
}

func (m *fakeMsg) Header(key string) string { return m.header[key] }

func (m *fakeMsg) Subject() string                  { return m.subject }
func (m *fakeMsg) Data() []byte                     { return m.data }
func (m *fakeMsg) Seq() uint64                      { return m.seq }
func (m *fakeMsg) Ack() error                       { m.fate = "ack"; return nil }
func (m *fakeMsg) Term() error                      { m.fate = "term"; return nil }
func (m *fakeMsg) NakWithDelay(time.Duration) error { m.fate = "nak"; return nil }

type nopSource struct{}

func (nopSource) Next(ctx context.Context) ([]Message, error)         { <-ctx.Done(); return nil, ctx.Err() }
func (nopSource) Add(context.Context, int) error                      { return nil }
func (nopSource) Remove(int)                                          {}
func (nopSource) Close() error                                        { return nil }
func (nopSource) Mark(context.Context, int) (uint64, error)           { return 0, nil }
func (nopSource) Consumed(context.Context, int, uint64) (bool, error) { return true, nil }

// soleLeases grants every partition to whoever asks, at epoch 1: a cluster
// of one.
type soleLeases struct{}

func (soleLeases) Heartbeat(context.Context, string, time.Duration, []byte, bool) (lease.Beat, error) {
	return lease.Beat{Live: 1}, nil
}
func (soleLeases) Probe(context.Context, string, time.Duration) (int, int, error) { return 1, 0, nil }
func (soleLeases) Acquire(_ context.Context, _ string, n int, held []int, _ time.Duration) ([]lease.Lease, error) {
	var out []lease.Lease
	for p := 0; p < events.Partitions && len(out) < n; p++ {
		if !slices.Contains(held, p) {
			out = append(out, lease.Lease{Partition: p, Epoch: 1})
		}
	}
	return out, nil
}
func (soleLeases) Renew(_ context.Context, _ string, held []lease.Lease, _ time.Duration) ([]lease.Lease, error) {
	return held, nil
}
func (soleLeases) Release(context.Context, string, []lease.Lease) error { return nil }
func (soleLeases) Leave(context.Context, string) error                  { return nil }
func (soleLeases) Instances(context.Context) ([]lease.Instance, error)  { return nil, nil }
func (soleLeases) Ownership(context.Context, time.Duration) ([]lease.PartitionLease, error) {
	return nil, nil
}

// ownAll makes s the owner of every partition, open, its leases trusted
// for an hour: as after the membership's first round, without running it.
func ownAll(s *Service) {
	for p := range events.Partitions {
		s.own.Gain(lease.Lease{Partition: p, Epoch: 1})
		s.own.OpenAt(p, 1)
	}
	s.own.Contacted(time.Now().Add(time.Hour), nil) // in contact with the database for an hour
	s.own.TrustUntil(time.Now().Add(time.Hour))
}

type fakeDLQ struct{ got []events.DeadLetter }

func (d *fakeDLQ) DeadLetter(_ context.Context, dl events.DeadLetter) error {
	d.got = append(d.got, dl)
	return nil
}

// fakeClock is a wall clock the test sets; safe for concurrent use.
type fakeClock struct{ ns atomic.Int64 }

func newClock(t time.Time) *fakeClock {
	c := &fakeClock{}
	c.Set(t)
	return c
}

func (c *fakeClock) Now() time.Time  { return time.Unix(0, c.ns.Load()).UTC() }
func (c *fakeClock) Set(t time.Time) { c.ns.Store(t.UnixNano()) }

// newTestService returns a Service on fakes whose wall clock is clk, past
// recovery (fires may go), retrying a failed fire after 10ms.
func newTestService(t *testing.T, clk *fakeClock) (*Service, *fakeStore, *fakeDLQ) {
	t.Helper()
	st, dlq := &fakeStore{rows: map[string]Timeout{}}, &fakeDLQ{}
	s, err := New(Config{Now: clk.Now, RetryDelay: 10 * time.Millisecond},
		Deps{Store: st, Source: nopSource{}, DeadLetters: dlq, Publisher: st, Leases: soleLeases{}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.sched.Stop)
	ownAll(s) // as after the first round: fires may go
	return s, st, dlq
}

// waitFor polls cond every 2ms until it holds, or fails after 5s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for limit := time.Now().Add(5 * time.Second); !cond(); time.Sleep(2 * time.Millisecond) {
		if time.Now().After(limit) {
			t.Fatalf("%s: not within 5s", what)
		}
	}
}

// fired returns the timeouts st has fired so far.
func (f *fakeStore) firedKeys() []Due {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]Due(nil), f.fired...)
}

func cmdMsg(t *testing.T, seq uint64, c events.Command) *fakeMsg {
	t.Helper()
	data, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	return &fakeMsg{subject: events.PartitionedCommandSubject(c.Key), data: data, seq: seq,
		header: map[string]string{events.HeaderMsgID: c.MsgID(events.NewNonce())}}
}

func TestIngestDedupesValidatesAndAcks(t *testing.T) {
	t.Parallel()
	now := time.Now().Add(time.Hour).UTC()
	s, st, dlq := newTestService(t, newClock(now))
	dl := now.Add(time.Hour)
	set := func(key string, v int64) events.Command {
		return events.Command{Schema: 1, Kind: events.KindSet, Key: key, Version: v, Deadline: dl, FireSubject: events.OrderCancelSubject(key)}
	}
	msgs := []*fakeMsg{
		cmdMsg(t, 1, set("a", 2)),
		cmdMsg(t, 2, set("a", 3)),
		cmdMsg(t, 3, set("a", 1)),
		cmdMsg(t, 4, events.Command{Schema: 1, Kind: events.KindClear, Key: "b", Version: 9}),
		{subject: events.PartitionedCommandSubject("c"), data: []byte(`{"kind":"clear","key":"other","version":1}`), seq: 5},
		{subject: events.PartitionedCommandSubject("d"), data: []byte(`nope`), seq: 6},
	}
	batch := make([]Message, len(msgs))
	for i, m := range msgs {
		batch[i] = m
	}
	if err := s.ingest.ingestOnce(context.Background(), batch); err != nil {
		t.Fatal(err)
	}
	if len(st.applied) != 1 || len(st.applied[0]) != 2 {
		t.Fatalf("applied = %+v, want one batch of 2 (a@3, b@9)", st.applied)
	}
	if a := st.applied[0][0]; a.Key != "a" || a.Version != 3 {
		t.Fatalf("a deduped to %+v, want version 3", a)
	}
	wantFates := []string{"ack", "ack", "ack", "ack", "term", "term"}
	for i, m := range msgs {
		if m.fate != wantFates[i] {
			t.Errorf("msg %d fate = %q, want %q", m.seq, m.fate, wantFates[i])
		}
	}
	if len(dlq.got) != 2 || dlq.got[0].Reason != events.ReasonSubjectMismatch || dlq.got[1].Reason != events.ReasonMalformed {
		t.Fatalf("dead letters = %+v", dlq.got)
	}
	if s.Pending() != 1 || s.stats.scheduled.Load() != 1 || s.stats.cleared.Load() != 1 || s.stats.deadLettered.Load() != 2 {
		t.Fatalf("pending %d, stats %+v", s.Pending(), s.stats.totals())
	}
}

// TestIngestHandsBackTheCommandsOfARefusedPartition: the commands of a
// partition the fence refused (its lease moved) are handed back to
// JetStream for their owner, never acked, and nothing of them reaches the
// schedule; the others of the batch are acked and scheduled.
func TestIngestHandsBackTheCommandsOfARefusedPartition(t *testing.T) {
	t.Parallel()
	now := time.Now().Add(time.Hour).UTC()
	s, st, _ := newTestService(t, newClock(now))
	lost, kept := "r-lost", "r-kept"
	for i := 0; events.PartitionOf(kept) == events.PartitionOf(lost); i++ {
		kept = fmt.Sprintf("r-kept-%d", i)
	}
	st.refuse = map[int]bool{events.PartitionOf(lost): true}
	set := func(key string) events.Command {
		return events.Command{Schema: 1, Kind: events.KindSet, Key: key, Version: 1, Deadline: now.Add(time.Hour), FireSubject: events.OrderCancelSubject(key)}
	}
	msgs := []*fakeMsg{cmdMsg(t, 1, set(lost)), cmdMsg(t, 2, set(kept))}
	if err := s.ingest.ingestOnce(context.Background(), []Message{msgs[0], msgs[1]}); err != nil {
		t.Fatal(err)
	}
	if msgs[0].fate != "nak" || msgs[1].fate != "ack" {
		t.Fatalf("fates: refused %q, granted %q; want nak and ack", msgs[0].fate, msgs[1].fate)
	}
	if _, ok := s.sched.Version(lost); ok {
		t.Fatal("a refused command reached the schedule")
	}
	if _, ok := s.sched.Version(kept); !ok || s.Pending() != 1 {
		t.Fatalf("the granted command was not scheduled (pending %d)", s.Pending())
	}
}

func TestDecodeRules(t *testing.T) {
	t.Parallel()
	now := time.Now().Add(time.Hour).UTC()
	tests := []struct {
		name    string
		subject string
		cmd     events.Command
		reason  events.Reason // empty: accepted
	}{
		{"valid set", events.PartitionedCommandSubject("k"), events.Command{Schema: 1, Kind: events.KindSet, Key: "k", Version: 1, Deadline: now.Add(time.Minute), FireSubject: "orders.cancel.k"}, ""},
		{"past deadline accepted", events.PartitionedCommandSubject("k"), events.Command{Schema: 1, Kind: events.KindSet, Key: "k", Version: 1, Deadline: now.Add(-time.Hour), FireSubject: "orders.cancel.k"}, ""},
		{"other key on subject", events.PartitionedCommandSubject("j"), events.Command{Schema: 1, Kind: events.KindClear, Key: "k", Version: 1}, events.ReasonSubjectMismatch},
		{"prefix not allowed", events.PartitionedCommandSubject("k"), events.Command{Schema: 1, Kind: events.KindSet, Key: "k", Version: 1, Deadline: now.Add(time.Minute), FireSubject: "orders.cancelled.k"}, events.ReasonSubjectNotAllowed},
		{"deadline before 1678", events.PartitionedCommandSubject("k"), events.Command{Schema: 1, Kind: events.KindSet, Key: "k", Version: 1, Deadline: time.Date(1500, 1, 1, 0, 0, 0, 0, time.UTC), FireSubject: "orders.cancel.k"}, events.ReasonDeadlineOutOfRange},
		{"unpartitioned subject", "timeouts.cmd.k", events.Command{Schema: 1, Kind: events.KindClear, Key: "k", Version: 1}, events.ReasonSubjectMismatch},
		{"wrong partition", "timeouts.cmd.3.k", events.Command{Schema: 1, Kind: events.KindClear, Key: "k", Version: 1}, events.ReasonSubjectMismatch},
		{"beyond horizon", events.PartitionedCommandSubject("k"), events.Command{Schema: 1, Kind: events.KindSet, Key: "k", Version: 1, Deadline: now.Add(MaxHorizonDefault + time.Second), FireSubject: "orders.cancel.k"}, events.ReasonDeadlineOutOfRange},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s, _, dlq := newTestService(t, newClock(now))
			checkCommandFate(t, s, dlq, tt.subject, tt.cmd, now, tt.reason)
		})
	}
}

// checkCommandFate decodes cmd published on subject through s's ingest and
// checks that it was accepted (reason "") or dead-lettered alone, its
// message terminated, as reason.
func checkCommandFate(t *testing.T, s *Service, dlq *fakeDLQ, subject string, cmd events.Command, now time.Time, reason events.Reason) {
	t.Helper()
	m := cmdMsg(t, 1, cmd)
	m.subject = subject
	got, err := s.ingest.commands(context.Background(), m, now)
	if err != nil {
		t.Fatal(err)
	}
	if reason == "" {
		if len(got) != 1 || len(dlq.got) != 0 {
			t.Fatalf("got %+v, dead letters %+v; want the command accepted", got, dlq.got)
		}
		return
	}
	if len(got) != 0 || len(dlq.got) != 1 || dlq.got[0].Reason != reason || m.fate != "term" {
		t.Fatalf("got %+v, dead letters %+v, fate %q; want it dead-lettered as %s", got, dlq.got, m.fate, reason)
	}
}

// TestMarkRetentionRules: while versions of keys are forgotten after
// MarkRetention, a command must say when it was issued, and one issued
// longer ago is refused; without it, neither rule applies.
func TestMarkRetentionRules(t *testing.T) {
	t.Parallel()
	now := time.Now().Add(time.Hour).UTC()
	retention := 30 * 24 * time.Hour
	clear := func(issued time.Time) events.Command {
		return events.Command{Schema: 1, Kind: events.KindClear, Key: "k", Version: 1, IssuedAt: issued}
	}
	tests := []struct {
		name      string
		retention time.Duration
		cmd       events.Command
		reason    events.Reason // empty: accepted
	}{
		{"issued within the retention", retention, clear(now.Add(-retention + time.Minute)), ""},
		{"issued in the future (a clock ahead)", retention, clear(now.Add(time.Hour)), ""},
		{"issued before the retention", retention, clear(now.Add(-retention - time.Minute)), events.ReasonCommandTooOld},
		{"a set issued before the retention", retention, events.Command{Schema: 1, Kind: events.KindSet, Key: "k", Version: 1,
			Deadline: now.Add(time.Minute), FireSubject: "orders.cancel.k", IssuedAt: now.Add(-2 * retention)}, events.ReasonCommandTooOld},
		{"not stamped", retention, clear(time.Time{}), events.ReasonInvalidField},
		{"not stamped, marks kept", 0, clear(time.Time{}), ""},
		{"old, marks kept", 0, clear(now.Add(-10 * retention)), ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			st, dlq := &fakeStore{rows: map[string]Timeout{}}, &fakeDLQ{}
			s, err := New(Config{Now: func() time.Time { return now }, MarkRetention: tt.retention},
				Deps{Store: st, Source: nopSource{}, DeadLetters: dlq, Publisher: st, Leases: soleLeases{}})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(s.sched.Stop)
			got, err := s.ingest.commands(context.Background(), cmdMsg(t, 1, tt.cmd), now)
			if err != nil {
				t.Fatal(err)
			}
			if tt.reason == "" {
				if len(got) != 1 {
					t.Fatalf("refused: %+v", dlq.got)
				}
				return
			}
			if len(got) != 0 || len(dlq.got) != 1 || dlq.got[0].Reason != tt.reason || dlq.got[0].Field != "issued_at" {
				t.Fatalf("got %+v, dead letters %+v; want refused as %s on issued_at", got, dlq.got, tt.reason)
			}
		})
	}
}

// TestPlainTimeoutsFireWithoutARead: a plain timeout's event is made from
// what the schedule holds, with no read of its row; one that is not plain,
// fired in the same batch, is read for its payload.
func TestPlainTimeoutsFireWithoutARead(t *testing.T) {
	t.Parallel()
	deadline := time.Now().UTC()
	s, st, _ := newTestService(t, newClock(deadline.Add(time.Millisecond)))
	st.rows["with-payload"] = Timeout{Payload: []byte(`{"sku":"x"}`)}
	applyOwned(s, []Change{{Key: "plain", Version: 3, Deadline: deadline, Plain: true},
		{Key: "with-payload", Version: 1, Deadline: deadline}})
	waitFor(t, "both fired", func() bool { return len(st.firedKeys()) == 2 && s.Pending() == 0 })
	st.mu.Lock()
	defer st.mu.Unlock()
	if !slices.Equal(st.read, []string{"with-payload"}) {
		t.Fatalf("DueRows read %v, want only with-payload", st.read)
	}
	for _, ev := range st.built {
		var e events.Expiry
		if err := json.Unmarshal(ev.Data, &e); err != nil {
			t.Fatal(err)
		}
		switch e.Key {
		case "plain":
			if ev.Subject != "orders.cancel.plain" || ev.MsgID != "fired:plain:3" || e.Version != 3 || !e.Deadline.Equal(deadline) ||
				e.FiredAt.Before(deadline) || e.Outcome != events.OutcomeFired || len(e.Payload) != 0 {
				t.Errorf("plain's event: %s %s %+v", ev.Subject, ev.MsgID, e)
			}
		case "with-payload":
			if string(e.Payload) != `{"sku":"x"}` {
				t.Errorf("with-payload's event carries %s, want its stored payload", e.Payload)
			}
		}
	}
	if len(st.built) != 2 {
		t.Fatalf("published %d events, want 2", len(st.built))
	}
}

// TestAnEventsFireTimeIsNeverBeforeItsDeadline: the fire path's reading
// of the clock, taken after the schedule handed a timeout out at its
// deadline, may be earlier than that hand-out's (the bound loosened by a
// heartbeat meanwhile); the event then carries its deadline as its fire
// time, never an earlier one, which every consumer's decoder refuses.
func TestAnEventsFireTimeIsNeverBeforeItsDeadline(t *testing.T) {
	t.Parallel()
	deadline := time.Date(2026, 12, 2, 8, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name string
		now  time.Time
		want time.Time
	}{
		{"read after the deadline", deadline.Add(3 * time.Millisecond), deadline.Add(3 * time.Millisecond)},
		{"read at the deadline", deadline, deadline},
		{"read before it, the bound loosened since the hand-out", deadline.Add(-2 * time.Millisecond), deadline},
	} {
		got := firedAt(tc.now, deadline)
		if !got.Equal(tc.want) {
			t.Errorf("%s: firedAt = %v, want %v", tc.name, got, tc.want)
		}
		e := events.Expiry{Schema: events.SchemaVersion, Outcome: events.OutcomeFired, Key: "k", Version: 1, Deadline: deadline,
			FiredAt: got, LatenessNs: int64(got.Sub(deadline))}
		data, _ := json.Marshal(e)
		if _, err := events.DecodeExpiry(data); err != nil {
			t.Errorf("%s: the event is refused by the consumers' decoder: %v", tc.name, err)
		}
	}
}

func TestMisfireOutcome(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		lateness time.Duration // now - deadline
		bound    time.Duration
		want     events.Outcome
		subject  string
	}{
		{"no bound fires however late", time.Hour, 0, events.OutcomeFired, "orders.cancel.k"},
		{"within bound fires", 50 * time.Millisecond, 100 * time.Millisecond, events.OutcomeFired, "orders.cancel.k"},
		{"beyond bound is missed", 150 * time.Millisecond, 100 * time.Millisecond, events.OutcomeMissed, "timeouts.missed.k"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			deadline := time.Now().UTC()
			s, st, _ := newTestService(t, newClock(deadline.Add(tt.lateness)))
			st.rows["k"] = Timeout{MaxLateness: tt.bound}
			applyOwned(s, []Change{{Key: "k", Version: 1, Deadline: deadline}})
			waitFor(t, "k fired", func() bool { return len(st.firedKeys()) == 1 })
			st.mu.Lock()
			defer st.mu.Unlock()
			if len(st.built) != 1 || st.built[0].Subject != tt.subject || !strings.HasPrefix(st.built[0].MsgID, string(tt.want)+":") {
				t.Fatalf("built = %+v, want %s on %s", st.built, tt.want, tt.subject)
			}
		})
	}
}

// TestFiredIsNotFollowedByMissed: a fired event is stored, its mark fails,
// and the retry comes past the timeout's misfire bound: the row is marked
// fired and no missed event is published after the fired one.
func TestFiredIsNotFollowedByMissed(t *testing.T) {
	t.Parallel()
	deadline := time.Now().UTC()
	clk := newClock(deadline.Add(time.Millisecond))
	s, st, _ := newTestService(t, clk)
	st.mu.Lock()
	st.rows["k"] = Timeout{MaxLateness: 100 * time.Millisecond}
	st.failMark = errors.New("connection reset")
	st.mu.Unlock()
	applyOwned(s, []Change{{Key: "k", Version: 1, Deadline: deadline}})
	waitFor(t, "the fired event published", func() bool { st.mu.Lock(); defer st.mu.Unlock(); return len(st.built) > 0 })
	clk.Set(deadline.Add(time.Second)) // the retries come past the bound
	time.Sleep(30 * time.Millisecond)
	st.mu.Lock()
	st.failMark = nil
	st.mu.Unlock()
	waitFor(t, "k marked", func() bool { return len(st.firedKeys()) == 1 && s.Pending() == 0 })
	st.mu.Lock()
	defer st.mu.Unlock()
	for _, e := range st.built {
		if e.MsgID != "fired:k:1" {
			t.Fatalf("published %s after fired:k:1", e.MsgID)
		}
	}
	if s.stats.fired.Load() != 1 || s.stats.missed.Load() != 0 {
		t.Fatalf("fired %d, missed %d; want 1, 0", s.stats.fired.Load(), s.stats.missed.Load())
	}
}

func TestFailedFireIsRequeued(t *testing.T) {
	t.Parallel()
	reset := errors.New("connection reset")
	tests := []struct {
		name string
		fail func(st *fakeStore, s *Service, on bool)
		// published is how many times k's event was published before the
		// retry that succeeds.
		published int
	}{
		{"read", func(st *fakeStore, _ *Service, on bool) { st.failRead = errIf(on, reset) }, 0},
		{"publish", func(st *fakeStore, _ *Service, on bool) { st.failPublish = errIf(on, reset) }, 0},
		{"mark, after the event was published", func(st *fakeStore, _ *Service, on bool) { st.failMark = errIf(on, reset) }, 1},
		{"mark refused by the fence of a partition still held (a lapse)", func(st *fakeStore, _ *Service, on bool) {
			st.refuse = map[int]bool{events.PartitionOf("k"): on}
		}, 1},
		{"leases not renewed in time", func(_ *fakeStore, s *Service, on bool) {
			if on {
				s.own.TrustUntil(time.Now())
			} else {
				s.own.TrustUntil(time.Now().Add(time.Hour))
			}
		}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			deadline := time.Now().UTC()
			s, st, _ := newTestService(t, newClock(deadline.Add(time.Millisecond)))
			st.mu.Lock()
			tt.fail(st, s, true)
			st.mu.Unlock()
			applyOwned(s, []Change{{Key: "k", Version: 1, Deadline: deadline}})
			waitFor(t, "a first fire attempt", func() bool { st.mu.Lock(); defer st.mu.Unlock(); return st.fireCalls > 0 })
			time.Sleep(30 * time.Millisecond) // a few retries
			st.mu.Lock()
			published := len(st.built)
			st.mu.Unlock()
			if s.Pending() != 1 || s.stats.fired.Load() != 0 || len(st.firedKeys()) != 0 || (published > 0) != (tt.published > 0) {
				t.Fatalf("while failing: pending %d, fired %d, marked %v, published %d times; want 1, 0, none, %d+",
					s.Pending(), s.stats.fired.Load(), st.firedKeys(), published, tt.published)
			}
			st.mu.Lock()
			tt.fail(st, s, false)
			st.mu.Unlock()
			waitFor(t, "the retry fired k", func() bool { return len(st.firedKeys()) == 1 && s.stats.fired.Load() == 1 && s.Pending() == 0 })
			st.mu.Lock()
			defer st.mu.Unlock()
			for _, e := range st.built {
				if e.MsgID != "fired:k:1" {
					t.Fatalf("published %s, want every copy under fired:k:1", e.MsgID)
				}
			}
		})
	}
}

// TestAFenceRefusalFencesAgain: a batch the stream refuses for its
// partition's fence is fenced again on the condition that the last fence
// is still the one read, then retried, when that fence is one of an older
// epoch (a former owner's that landed late) or none is left (aged out of
// the stream); never over a fence of a newer epoch (the partition moved),
// and one of this epoch is adopted only when it names this instance: one
// naming another owner means the epoch was handed out twice (a failover
// lost an acquisition), and this instance publishes nothing under it.
func TestAFenceRefusalFencesAgain(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name      string
		lastSeq   uint64
		lastOwner string
		lastEpoch int64
		fires     bool
	}{
		{"a former owner's fence landed late", 7, "old", 0, true},
		{"the fence aged out", 0, "", 0, true},
		{"a newer owner fenced", 9, "new", 2, false},
		{"another owner fenced at this epoch", 9, "twin", 1, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			deadline := time.Now().UTC()
			s, st, _ := newTestService(t, newClock(deadline.Add(time.Millisecond)))
			p := events.PartitionOf("k")
			s.own.Fenced(p, 1, 5) // this instance fenced k's partition at epoch 1, sequence 5
			st.mu.Lock()
			st.lastSeq, st.lastOwner, st.lastEpoch = tt.lastSeq, tt.lastOwner, tt.lastEpoch
			st.mu.Unlock()
			applyOwned(s, []Change{{Key: "k", Version: 1, Deadline: deadline}})
			if !tt.fires {
				waitFor(t, "a refused attempt", func() bool { st.mu.Lock(); defer st.mu.Unlock(); return st.fireCalls > 1 })
				st.mu.Lock()
				defer st.mu.Unlock()
				if len(st.built) != 0 || st.lastSeq != tt.lastSeq || st.fences != 0 {
					t.Fatalf("published %d, last fence %d, %d fenced; want nothing published and the newer fence %d left alone", len(st.built), st.lastSeq, st.fences, tt.lastSeq)
				}
				return
			}
			waitFor(t, "k fired under a new fence", func() bool { return len(st.firedKeys()) == 1 })
			st.mu.Lock()
			defer st.mu.Unlock()
			if st.fences != 1 || len(st.built) != 1 || st.built[0].Fence != st.lastSeq || s.own.StreamFence(p) != st.lastSeq {
				t.Fatalf("%d fenced, published %+v, stream fence %d, last %d; want one fence, k published under it", st.fences, st.built, s.own.StreamFence(p), st.lastSeq)
			}
		})
	}
}

// TestSlowMarkDoesNotHoldPublishing checks that a batch's fire slot is
// free once its events are stored: while the first mark waits for its
// commit, the next batches publish, and their marks go in one transaction.
func TestSlowMarkDoesNotHoldPublishing(t *testing.T) {
	t.Parallel()
	deadline := time.Now().UTC()
	st := &fakeStore{rows: map[string]Timeout{}, markGate: make(chan struct{})}
	s, err := New(Config{Now: newClock(deadline.Add(time.Millisecond)).Now, FireBatch: 1, FireConcurrency: 1, MarkDelay: time.Nanosecond},
		Deps{Store: st, Source: nopSource{}, DeadLetters: &fakeDLQ{}, Publisher: st, Leases: soleLeases{}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.sched.Stop)
	ownAll(s)
	applyOwned(s, []Change{{Key: "a", Version: 1, Deadline: deadline}, {Key: "b", Version: 1, Deadline: deadline},
		{Key: "c", Version: 1, Deadline: deadline}})
	waitFor(t, "three batches of one published while the first mark waits", func() bool {
		st.mu.Lock()
		defer st.mu.Unlock()
		return len(st.built) == 3
	})
	st.mu.Lock()
	if len(st.markSizes) != 1 || len(st.fired) != 0 || s.Pending() != 3 {
		t.Fatalf("before the first commit: marks %v, marked %v, pending %d; want [1], none, 3", st.markSizes, st.fired, s.Pending())
	}
	st.mu.Unlock()
	close(st.markGate)
	waitFor(t, "every timeout marked", func() bool { return len(st.firedKeys()) == 3 && s.Pending() == 0 })
	st.mu.Lock()
	defer st.mu.Unlock()
	if !slices.Equal(st.markSizes, []int{1, 2}) || s.stats.fired.Load() != 3 {
		t.Fatalf("marks of %v rows, fired %d; want [1 2] (the two batches published meanwhile in one), 3", st.markSizes, s.stats.fired.Load())
	}
}

// TestMarksGatherForMarkDelay: batches published within MarkDelay of the
// first are marked fired in one transaction, after the delay; none is
// marked before it.
func TestMarksGatherForMarkDelay(t *testing.T) {
	t.Parallel()
	deadline := time.Now().UTC()
	st := &fakeStore{rows: map[string]Timeout{}}
	s, err := New(Config{Now: time.Now, FireBatch: 1, MarkDelay: time.Second},
		Deps{Store: st, Source: nopSource{}, DeadLetters: &fakeDLQ{}, Publisher: st, Leases: soleLeases{}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.sched.Stop)
	ownAll(s)
	start := time.Now()
	applyOwned(s, []Change{{Key: "a", Version: 1, Deadline: deadline}, {Key: "b", Version: 1, Deadline: deadline.Add(20 * time.Millisecond)},
		{Key: "c", Version: 1, Deadline: deadline.Add(40 * time.Millisecond)}})
	waitFor(t, "three timeouts published", func() bool {
		st.mu.Lock()
		defer st.mu.Unlock()
		return len(st.built) == 3
	})
	st.mu.Lock()
	early := slices.Clone(st.markSizes)
	st.mu.Unlock()
	waitFor(t, "every timeout marked", func() bool { return len(st.firedKeys()) == 3 && s.Pending() == 0 })
	st.mu.Lock()
	defer st.mu.Unlock()
	if took := time.Since(start); len(early) != 0 || !slices.Equal(st.markSizes, []int{3}) || took < time.Second {
		t.Fatalf("marks of %v rows (%v when the three were published), done after %v; want [3], none before, after MarkDelay (1s)",
			st.markSizes, early, took)
	}
}

// errIf returns err if on, else nil.
func errIf(on bool, err error) error {
	if on {
		return err
	}
	return nil
}

func TestConfigValidationNamesTheField(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		cfg   Config
		field string
	}{
		{"prefix without dot", Config{FireSubjectPrefixes: []string{"orders.cancel"}}, "FireSubjectPrefixes"},
		{"default fire subject not allowed", Config{DefaultFireSubjectPrefix: "reservations.expire."}, "DefaultFireSubjectPrefix"},
		{"default fire subject without dot", Config{FireSubjectPrefixes: []string{"a."}, DefaultFireSubjectPrefix: "a.b"}, "DefaultFireSubjectPrefix"},
		{"max pending", Config{MaxPending: -5}, "MaxPending"},
		{"mark retention below a day", Config{MarkRetention: time.Hour}, "MarkRetention"},
		{"fire batch", Config{FireBatch: -1}, "FireBatch"},
		{"mark delay beyond a second", Config{MarkDelay: 2 * time.Second}, "MarkDelay"},
		{"recovery catch-up", Config{RecoveryCatchupMax: -time.Second}, "RecoveryCatchupMax"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := tt.cfg.withDefaults()
			if err == nil || !strings.Contains(err.Error(), tt.field) {
				t.Fatalf("err = %v, want one naming %s", err, tt.field)
			}
		})
	}
}

// backlogSource reports the backlog consumed from the n-th Consumed call
// on (never when n is 0), and counts the calls made after st fired
// something (there must be none: the overdue are held until then).
type backlogSource struct {
	nopSource
	st                 *fakeStore
	n, calls, tooEarly int
}

func (b *backlogSource) Consumed(context.Context, int, uint64) (bool, error) {
	b.calls++
	b.st.mu.Lock()
	if len(b.st.fired) > 0 {
		b.tooEarly++
	}
	b.st.mu.Unlock()
	return b.n > 0 && b.calls >= b.n, nil
}

func TestOverdueHeldUntilBacklogConsumed(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		consumed  int // Consumed call that reports true; 0: never
		minWaited time.Duration
	}{
		{"backlog consumed", 3, 2 * catchupPoll},
		{"bounded by RecoveryCatchupMax", 0, 150 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			st := &fakeStore{rows: map[string]Timeout{}}
			src := &backlogSource{st: st, n: tt.consumed}
			// No membership runs here to renew trust after a gap in contact.
			s, err := New(Config{RecoveryCatchupMax: 150 * time.Millisecond, CrashGrace: time.Hour},
				Deps{Store: st, Source: src, DeadLetters: &fakeDLQ{}, Publisher: st, Leases: soleLeases{}})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(s.sched.Stop)
			// a and b share a partition, taken over: one Consumed call a
			// poll.
			p := events.PartitionOf("a")
			b := "b"
			for i := 0; events.PartitionOf(b) != p; i++ {
				b = fmt.Sprintf("b%d", i)
			}
			l := lease.Lease{Partition: p, Epoch: 1}
			s.own.Gain(l)
			s.own.TrustUntil(time.Now().Add(time.Hour))
			overdue := time.Now().Add(-time.Minute)
			held, err := s.sched.Load([]schedule.Entry{{Key: "a", Version: 1, Deadline: overdue}, {Key: b, Version: 1, Deadline: overdue}}, time.Now())
			if err != nil || len(held) != 2 {
				t.Fatalf("held %d, err %v; want 2", len(held), err)
			}
			// A newer command replaces b while it is held.
			applyOwned(s, []Change{{Key: b, Version: 2, Deadline: time.Now().Add(time.Hour)}})
			tk := &takeover{leases: []lease.Lease{l}, parts: []int{p}, held: held, marks: []uint64{7}}
			start := time.Now()
			s.recovery.release(context.Background(), tk)
			if waited := time.Since(start); waited < tt.minWaited {
				t.Fatalf("released after %v, want at least %v", waited, tt.minWaited)
			}
			if !s.own.Open(p) {
				t.Fatalf("partition %d not open after release", p)
			}
			if src.tooEarly > 0 {
				t.Fatal("an overdue timeout fired while the backlog was not consumed")
			}
			// a's mark is recorded before the fire path takes a out of the
			// schedule (Done): both are waited for.
			for deadline := time.Now().Add(5 * time.Second); ; {
				st.mu.Lock()
				fired := append([]Due(nil), st.fired...)
				st.mu.Unlock()
				if len(fired) == 1 && fired[0].Key == "a" && s.Pending() == 1 {
					break
				}
				if len(fired) > 1 || time.Now().After(deadline) {
					t.Fatalf("fired = %+v, pending = %d; want a only fired, 1 pending (b at version 2)", fired, s.Pending())
				}
				time.Sleep(5 * time.Millisecond)
			}
		})
	}
}

// TestFailedFireKeepsItsRoom is issue 14 item 2.2: the due keys used to
// leave the index before their fire committed, so ingest could fill their
// room during the failed transaction and the requeue met `wheel: full`,
// leaving the timeout pending in Postgres only, fired at the next restart.
func TestFailedFireKeepsItsRoom(t *testing.T) {
	t.Parallel()
	deadline := time.Now().UTC()
	now := deadline.Add(time.Millisecond)
	st := &fakeStore{rows: map[string]Timeout{}, failRead: errors.New("connection reset")}
	s, err := New(Config{MaxPending: 2, Now: newClock(now).Now, RetryDelay: 20 * time.Millisecond},
		Deps{Store: st, Source: nopSource{}, DeadLetters: &fakeDLQ{}, Publisher: st, Leases: soleLeases{}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.sched.Stop)
	ownAll(s) // as after the first round: fires may go
	// While the first fire transaction is in flight, ingest takes two new
	// sets.
	a, b := cmdMsg(t, 1, setCmd("a", 1, now.Add(time.Hour))), cmdMsg(t, 2, setCmd("b", 1, now.Add(time.Hour)))
	st.beforeFire = func() {
		if err := s.ingest.ingestOnce(context.Background(), []Message{a, b}); err != nil {
			t.Error(err)
		}
	}
	applyOwned(s, []Change{{Key: "k", Version: 1, Deadline: deadline}})
	waitFor(t, "the first fire attempt", func() bool { st.mu.Lock(); defer st.mu.Unlock(); return st.fireCalls > 0 })
	if a.fate != "ack" || b.fate != "nak" {
		t.Fatalf("during the fire: a %q, b %q; want a acked, b deferred (k keeps its room)", a.fate, b.fate)
	}
	st.mu.Lock()
	st.failRead = nil
	st.mu.Unlock()
	// k was re-armed, not lost: the retry fires it.
	waitFor(t, "the retry fired k", func() bool { f := st.firedKeys(); return len(f) == 1 && f[0].Key == "k" })
	waitFor(t, "k left memory", func() bool { return s.Pending() == 1 })
}

// TestAMarkRefusedForAPartitionGoneIsNotCounted: a batch published, whose
// mark the fence refuses because its partition was lost meanwhile, is not
// counted as fired here nor shown as recent: its row stays pending, and the
// new owner publishes it again (deduplicated), marks it and counts it.
func TestAMarkRefusedForAPartitionGoneIsNotCounted(t *testing.T) {
	t.Parallel()
	deadline := time.Now().UTC()
	s, st, _ := newTestService(t, newClock(deadline.Add(time.Millisecond)))
	gate := make(chan struct{})
	st.mu.Lock()
	st.markGate = gate
	st.mu.Unlock()
	applyOwned(s, []Change{{Key: "k", Version: 1, Deadline: deadline}})
	waitFor(t, "k published, its mark waiting", func() bool {
		st.mu.Lock()
		defer st.mu.Unlock()
		return len(st.built) == 1 && len(st.markSizes) == 1
	})
	p := events.PartitionOf("k")
	s.own.Lose(p)
	st.mu.Lock()
	st.refuse = map[int]bool{p: true}
	st.mu.Unlock()
	close(gate)
	waitFor(t, "k's mark done", func() bool { n, _ := s.fire.backlog(time.Now()); return n == 0 })
	if s.stats.fired.Load() != 0 || len(s.Recent(10)) != 0 {
		t.Fatalf("fired %d, recent %v; want 0, none: the partition's new owner counts it", s.stats.fired.Load(), s.Recent(10))
	}
}

// applyOwned applies changes to s's schedule as ingest does once they are
// committed under the fence of the partitions s owns now.
func applyOwned(s *Service, changes []Change) {
	var parts []int
	for _, c := range changes {
		parts = appendPartitions(parts, events.PartitionOf(c.Key))
	}
	s.ingest.apply(changes, s.own.Gate(parts).Fence())
}
