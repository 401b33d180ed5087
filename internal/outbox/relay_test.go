package outbox_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ordertimeout/ordertimeout/internal/migrate"
	"github.com/ordertimeout/ordertimeout/internal/outbox"
	"github.com/ordertimeout/ordertimeout/internal/testinfra"
)

func TestMain(m *testing.M) { testinfra.Main(m) }

type env struct {
	pool *pgxpool.Pool
	js   jetstream.JetStream
	nats *testinfra.NATSServer
}

func newEnv(t *testing.T) env {
	t.Helper()
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, testinfra.Postgres(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if err := migrate.Up(ctx, pool, outbox.Migrations); err != nil {
		t.Fatal(err)
	}
	srv := testinfra.NATS(t)
	nc, err := nats.Connect(srv.URL, nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "T", Subjects: []string{"t.>"}, Duplicates: time.Minute}); err != nil {
		t.Fatal(err)
	}
	return env{pool: pool, js: js, nats: srv}
}

// insert commits n messages t.<i> with ids m-<i>, starting at from.
func (e env) insert(t *testing.T, from, n int) {
	t.Helper()
	e.commit(t, from, n, func(ctx context.Context, tx pgx.Tx, msgs []outbox.Message) error {
		return outbox.Insert(ctx, tx, outbox.TableDefault, msgs)
	})
}

// commit builds n messages t.<i> with ids m-<i>, starting at from, writes
// them with write in one transaction, commits it and returns them.
func (e env) commit(t *testing.T, from, n int, write func(context.Context, pgx.Tx, []outbox.Message) error) []outbox.Message {
	t.Helper()
	ctx := context.Background()
	msgs := make([]outbox.Message, n)
	for i := range msgs {
		k := from + i
		msgs[i] = outbox.Message{Subject: fmt.Sprintf("t.%d", k), MsgID: fmt.Sprintf("m-%d", k), Data: []byte(fmt.Sprint(k))}
	}
	tx, err := e.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := write(ctx, tx, msgs); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	return msgs
}

func (e env) streamMsgs(t *testing.T) uint64 {
	t.Helper()
	s, err := e.js.Stream(context.Background(), "T")
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Msgs
}

func (e env) rows(t *testing.T) int64 {
	t.Helper()
	var n int64
	if err := e.pool.QueryRow(context.Background(), "SELECT count(*) FROM outbox").Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestFlushPublishesWithMsgIDThenDeletes: every row reaches JetStream once,
// carrying its Nats-Msg-Id, and the table is empty afterwards; a second
// publication of the same ids (a crash between PubAck and delete) is
// dropped by JetStream's duplicate window.
func TestFlushPublishesWithMsgIDThenDeletes(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	relay, err := outbox.NewRelay(e.pool, e.js, outbox.Config{BatchSize: 7})
	if err != nil {
		t.Fatal(err)
	}
	e.insert(t, 0, 50)
	n, err := relay.Flush(context.Background())
	if err != nil || n != 50 {
		t.Fatalf("Flush = %d, %v; want 50, nil", n, err)
	}
	if got := e.rows(t); got != 0 {
		t.Fatalf("%d rows left in the outbox after Flush", got)
	}
	if got := e.streamMsgs(t); got != 50 {
		t.Fatalf("stream holds %d messages, want 50", got)
	}
	s, _ := e.js.Stream(context.Background(), "T")
	m, err := s.GetMsg(context.Background(), 1)
	if err != nil {
		t.Fatal(err)
	}
	if m.Header.Get(jetstream.MsgIDHeader) != "m-0" || string(m.Data) != "0" {
		t.Fatalf("first message = %q with id %q, want 0 with m-0", m.Data, m.Header.Get(jetstream.MsgIDHeader))
	}
	// The same ids again, as after a crash before the delete committed.
	e.insert(t, 0, 50)
	if _, err := relay.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := e.streamMsgs(t); got != 50 {
		t.Fatalf("republished batch: stream holds %d messages, want 50 (deduplicated)", got)
	}
}

// TestRowsSurviveAnUnreachableBroker: a batch whose PubAcks do not arrive is
// rolled back, and the rows are published once the broker is back.
func TestRowsSurviveAnUnreachableBroker(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	relay, err := outbox.NewRelay(e.pool, e.js, outbox.Config{AckTimeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	e.insert(t, 0, 10)
	timeout := time.Second
	if err := e.nats.Container.Stop(context.Background(), &timeout); err != nil {
		t.Fatal(err)
	}
	if _, err := relay.Flush(context.Background()); err == nil {
		t.Fatal("Flush succeeded with the broker stopped")
	}
	if got := e.rows(t); got != 10 {
		t.Fatalf("%d rows in the outbox after a failed publish, want all 10", got)
	}
	// The restarted container gets a new host port: connect again.
	nc, err := nats.Connect(e.nats.Restart(t))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if e.js, err = jetstream.New(nc); err != nil {
		t.Fatal(err)
	}
	relay, err = outbox.NewRelay(e.pool, e.js, outbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); ; {
		n, err := relay.Flush(context.Background())
		if err == nil && n == 10 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Flush after the broker came back = %d, %v; want 10 published", n, err)
		}
		time.Sleep(100 * time.Millisecond) // JetStream recovers its stream after a restart
	}
	if got := e.rows(t); got != 0 {
		t.Fatalf("%d rows left after the broker came back", got)
	}
	if got := e.streamMsgs(t); got != 10 {
		t.Fatalf("stream holds %d messages, want 10", got)
	}
}

// TestWorkersPublishEveryRowOnce: with several workers each row is claimed
// by exactly one batch, counted by OnPublished (JetStream's dedupe would
// hide a double publication from the stream's count).
func TestWorkersPublishEveryRowOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var mu sync.Mutex
	seen := map[string]int{}
	relay, err := outbox.NewRelay(e.pool, e.js, outbox.Config{BatchSize: 50, Workers: 4,
		OnPublished: func(b []outbox.Message, _ time.Time) {
			mu.Lock()
			defer mu.Unlock()
			for _, m := range b {
				seen[m.MsgID]++
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	e.insert(t, 0, 2000)
	n, err := relay.Flush(context.Background())
	if err != nil || n != 2000 {
		t.Fatalf("Flush = %d, %v; want 2000, nil", n, err)
	}
	if len(seen) != 2000 {
		t.Fatalf("%d distinct messages published, want 2000", len(seen))
	}
	for id, c := range seen {
		if c != 1 {
			t.Fatalf("%s published %d times", id, c)
		}
	}
	if got := e.streamMsgs(t); got != 2000 {
		t.Fatalf("stream holds %d messages, want 2000", got)
	}
}

// insertReturning commits n messages like insert and returns them with their
// row ids.
func (e env) insertReturning(t *testing.T, from, n int) []outbox.Message {
	t.Helper()
	msgs := e.commit(t, from, n, func(ctx context.Context, tx pgx.Tx, msgs []outbox.Message) error {
		b := &pgx.Batch{}
		outbox.QueueInsertReturning(b, outbox.TableDefault, msgs)
		return tx.SendBatch(ctx, b).Close()
	})
	ctx := context.Background()
	var sum int64
	if err := e.pool.QueryRow(ctx, "SELECT coalesce(sum(id), 0) FROM outbox WHERE msg_id = ANY($1)", msgIDs(msgs)).Scan(&sum); err != nil {
		t.Fatal(err)
	}
	var want int64
	for _, m := range msgs {
		want += m.ID
	}
	if want == 0 || sum != want {
		t.Fatalf("QueueInsertReturning ids sum to %d, the rows' to %d", want, sum)
	}
	return msgs
}

func msgIDs(msgs []outbox.Message) []string {
	ids := make([]string, len(msgs))
	for i, m := range msgs {
		ids[i] = m.MsgID
	}
	return ids
}

// runRelay runs relay until the test ends.
func runRelay(t *testing.T, relay *outbox.Relay) {
	t.Helper()
	relay.Start(context.Background())
	t.Cleanup(relay.Stop)
}

func poll(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 10s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestHandoffPublishesThenDeletes: handed-over rows are published with
// their Nats-Msg-Id and deleted after their PubAcks, while the polls (whose
// ClaimMinAge they are younger than) leave them alone: each is published
// once.
func TestHandoffPublishesThenDeletes(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var mu sync.Mutex
	seen := map[string]int{}
	relay, err := outbox.NewRelay(e.pool, e.js, outbox.Config{Workers: 4, PollInterval: time.Millisecond, ClaimMinAge: time.Hour,
		OnPublished: func(b []outbox.Message, _ time.Time) {
			mu.Lock()
			defer mu.Unlock()
			for _, m := range b {
				seen[m.MsgID]++
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	runRelay(t, relay)
	for i := range 20 {
		if !relay.Handoff(context.Background(), e.insertReturning(t, i*100, 100)) {
			t.Fatal("Handoff refused 100 messages with HandoffMax at its default")
		}
	}
	poll(t, "outbox emptied", func() bool { return e.rows(t) == 0 })
	poll(t, "OnPublished called for every message", func() bool { mu.Lock(); defer mu.Unlock(); return len(seen) == 2000 })
	mu.Lock()
	defer mu.Unlock()
	for id, c := range seen {
		if c != 1 {
			t.Fatalf("%s published %d times", id, c)
		}
	}
	if got := e.streamMsgs(t); got != 2000 {
		t.Fatalf("stream holds %d messages, want 2000", got)
	}
}

// TestHandedOverRowsSurviveACrash: rows handed to a relay that dies before
// publishing them (its Run never ran) are still in the table, and the next
// process's Flush publishes them once.
func TestHandedOverRowsSurviveACrash(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	dead, err := outbox.NewRelay(e.pool, e.js, outbox.Config{ClaimMinAge: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if !dead.Handoff(context.Background(), e.insertReturning(t, 0, 30)) {
		t.Fatal("Handoff refused")
	}
	if got := e.rows(t); got != 30 {
		t.Fatalf("%d rows after the hand-off, want 30", got)
	}
	next, err := outbox.NewRelay(e.pool, e.js, outbox.Config{ClaimMinAge: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	// Flush ignores ClaimMinAge: at start nothing is in flight.
	if n, err := next.Flush(context.Background()); err != nil || n != 30 {
		t.Fatalf("Flush = %d, %v; want 30, nil", n, err)
	}
	if got, rows := e.streamMsgs(t), e.rows(t); got != 30 || rows != 0 {
		t.Fatalf("stream holds %d messages and the outbox %d rows, want 30 and 0", got, rows)
	}
}

// TestFullHandoffWaits: beyond HandoffMax a hand-off waits for room; if its
// context ends first the rows are left to the relay's poll, which takes them
// once ClaimMinAge old.
func TestFullHandoffWaits(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	relay, err := outbox.NewRelay(e.pool, e.js, outbox.Config{HandoffMax: 10, PollInterval: 10 * time.Millisecond, ClaimMinAge: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	// Run is not running yet: the first batch stays in flight.
	if !relay.Handoff(context.Background(), e.insertReturning(t, 0, 8)) {
		t.Fatal("Handoff refused 8 messages with HandoffMax 10")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if relay.Handoff(ctx, e.insertReturning(t, 8, 5)) {
		t.Fatal("Handoff took 13 messages with HandoffMax 10")
	}
	start := time.Now()
	runRelay(t, relay)
	// Room comes back as the first batch is published: the next waits, then
	// goes through.
	if !relay.Handoff(context.Background(), e.insertReturning(t, 13, 7)) {
		t.Fatal("Handoff gave up without a deadline")
	}
	poll(t, "outbox emptied", func() bool { return e.rows(t) == 0 })
	if took := time.Since(start); took < 150*time.Millisecond {
		t.Fatalf("the poll claimed rows younger than ClaimMinAge (after %s)", took)
	}
	if got := e.streamMsgs(t); got != 20 {
		t.Fatalf("stream holds %d messages, want 20", got)
	}
}

// TestHandoffSettlesWhenTheBrokerIsGone: with the broker gone, handed-over
// batches fail (at the send, or at their PubAck deadline, which runs from
// the send so that queued batches time out together), room comes back
// within about one AckTimeout, and every row stays in the table for the
// polls.
func TestHandoffSettlesWhenTheBrokerIsGone(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	relay, err := outbox.NewRelay(e.pool, e.js, outbox.Config{HandoffMax: 20, AckTimeout: 300 * time.Millisecond, ClaimMinAge: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	runRelay(t, relay)
	timeout := time.Second
	if err := e.nats.Container.Stop(context.Background(), &timeout); err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		if !relay.Handoff(context.Background(), e.insertReturning(t, i, 1)) {
			t.Fatal("Handoff refused with room")
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if !relay.Handoff(ctx, e.insertReturning(t, 20, 1)) {
		t.Fatal("no room within 3s of 20 lost batches with AckTimeout 300ms")
	}
	if got := e.rows(t); got != 21 {
		t.Fatalf("%d rows in the outbox, want all 21 left for the polls", got)
	}
}

// TestHandoffAckTimeoutRunsFromTheSend: when PubAcks stop coming (here a
// core subscriber takes the messages and never replies), the batches in
// flight time out AckTimeout after their own send, together, not one
// AckTimeout after another as the acker reaches each in turn; so room for a
// new hand-off comes back about one AckTimeout after the sends, not five.
func TestHandoffAckTimeoutRunsFromTheSend(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	sub, err := e.js.Conn().Subscribe("silent.>", func(*nats.Msg) {})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	const ackTimeout, batches = 400 * time.Millisecond, 5
	relay, err := outbox.NewRelay(e.pool, e.js, outbox.Config{AckTimeout: ackTimeout, HandoffMax: batches, PollInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	runRelay(t, relay)
	start := time.Now()
	for i := range batches {
		m := outbox.Message{ID: int64(i + 1), Subject: fmt.Sprintf("silent.%d", i), MsgID: fmt.Sprintf("s-%d", i), Data: []byte("x")}
		if !relay.Handoff(ctx, []outbox.Message{m}) {
			t.Fatal("Handoff refused")
		}
	}
	// A batch of HandoffMax messages waits until every batch in flight
	// settled.
	all := make([]outbox.Message, batches)
	for i := range all {
		all[i] = outbox.Message{ID: int64(100 + i), Subject: "t.all", MsgID: fmt.Sprintf("all-%d", i), Data: []byte("x")}
	}
	if !relay.Handoff(ctx, all) {
		t.Fatal("Handoff refused")
	}
	switch waited := time.Since(start); {
	case waited < ackTimeout:
		t.Fatalf("room after %v, before AckTimeout (%v): the silent batches did not wait for their PubAcks", waited, ackTimeout)
	case waited > 3*ackTimeout:
		t.Fatalf("room after %v: the silent batches timed out one after another, not together about %v after their sends", waited, ackTimeout)
	}
}
