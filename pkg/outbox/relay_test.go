package outbox_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ordertimeout/ordertimeout/internal/migrate"
	"github.com/ordertimeout/ordertimeout/internal/testinfra"
	"github.com/ordertimeout/ordertimeout/pkg/events"
	"github.com/ordertimeout/ordertimeout/pkg/outbox"
)

func TestMain(m *testing.M) { testinfra.Main(m) }

type env struct {
	pool *pgxpool.Pool
	js   jetstream.JetStream
	nats *testinfra.NATSServer
}

// newPool returns a pool on a database of the test's own, not migrated.
func newPool(t *testing.T) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), testinfra.Postgres(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

func newEnv(t *testing.T) env {
	t.Helper()
	ctx := context.Background()
	pool := newPool(t)
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
	if err := outbox.Insert(ctx, tx, outbox.TableDefault, msgs); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
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
	if st, err := relay.Stats(context.Background()); err != nil || st.Duplicates != 50 {
		t.Fatalf("Stats = %+v, %v; want the 50 republished counted as duplicates", st, err)
	}
}

// TestPackPublishesWhatItReturns: with a Pack, the relay publishes the
// messages it makes of each batch's rows (here one message per batch),
// and deletes the rows once those are acknowledged.
func TestPackPublishesWhatItReturns(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	pack := func(rows []outbox.Message) []*nats.Msg {
		data := make([]string, len(rows))
		for i, r := range rows {
			data[i] = string(r.Data)
		}
		m := outbox.Message{Subject: rows[0].Subject, MsgID: "packed-" + rows[0].MsgID, Data: []byte(strings.Join(data, ","))}
		return []*nats.Msg{m.Msg()}
	}
	relay, err := outbox.NewRelay(e.pool, e.js, outbox.Config{BatchSize: 10, Pack: pack})
	if err != nil {
		t.Fatal(err)
	}
	e.insert(t, 0, 25)
	if n, err := relay.Flush(context.Background()); err != nil || n != 25 {
		t.Fatalf("Flush = %d, %v; want 25 rows, nil", n, err)
	}
	if got := e.rows(t); got != 0 {
		t.Fatalf("%d rows left in the outbox after Flush", got)
	}
	s, err := e.js.Stream(context.Background(), "T")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for seq := uint64(1); seq <= e.streamMsgs(t); seq++ {
		m, err := s.GetMsg(context.Background(), seq)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, m.Header.Get(jetstream.MsgIDHeader)+"="+string(m.Data))
	}
	want := []string{"packed-m-0=0,1,2,3,4,5,6,7,8,9", "packed-m-10=10,11,12,13,14,15,16,17,18,19", "packed-m-20=20,21,22,23,24"}
	if !slices.Equal(got, want) {
		t.Fatalf("stream holds %q, want %q", got, want)
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
// by exactly one batch, counted by a core subscriber, which sees every
// publication (JetStream's dedupe would hide a double one from the
// stream's count).
func TestWorkersPublishEveryRowOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	nc := e.js.Conn()
	sub, err := nc.SubscribeSync("t.>")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	relay, err := outbox.NewRelay(e.pool, e.js, outbox.Config{BatchSize: 50, Workers: 4})
	if err != nil {
		t.Fatal(err)
	}
	e.insert(t, 0, 2000)
	n, err := relay.Flush(context.Background())
	if err != nil || n != 2000 {
		t.Fatalf("Flush = %d, %v; want 2000, nil", n, err)
	}
	// The relay publishes on nc too: once the server answered a ping sent
	// after the last publication, every message is queued on sub.
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	queued, _, err := sub.Pending()
	if err != nil {
		t.Fatal(err)
	}
	if queued != 2000 {
		t.Fatalf("%d messages published, want 2000", queued)
	}
	seen := map[string]int{}
	for range queued {
		m, err := sub.NextMsg(time.Second)
		if err != nil {
			t.Fatal(err)
		}
		seen[m.Header.Get(jetstream.MsgIDHeader)]++
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

// TestRunPublishesKickedRows: a running relay publishes rows committed
// after it started as soon as it is kicked, not a PollInterval later.
func TestRunPublishesKickedRows(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	relay, err := outbox.NewRelay(e.pool, e.js, outbox.Config{BatchSize: 50, Workers: 4, PollInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	relay.Start(context.Background())
	t.Cleanup(relay.Stop)
	for i := range 20 {
		e.insert(t, i*100, 100)
		relay.Kick()
	}
	for deadline := time.Now().Add(10 * time.Second); e.rows(t) != 0; {
		if time.Now().After(deadline) {
			t.Fatalf("%d rows left in the outbox 10s after the last Kick", e.rows(t))
		}
		time.Sleep(10 * time.Millisecond)
	}
	if got := e.streamMsgs(t); got != 2000 {
		t.Fatalf("stream holds %d messages, want 2000", got)
	}
}

// TestMigrationGivesPendingCommandsANonce: a command row written before
// command ids ended in a nonce gets one, so timeoutd accepts it once it
// is published; other rows and ids that have one keep theirs.
func TestMigrationGivesPendingCommandsANonce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := newPool(t)
	db := stdlib.OpenDBFromPool(pool)
	t.Cleanup(func() { db.Close() })
	p, err := migrate.Provider(db, outbox.Migrations)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.UpTo(ctx, 3); err != nil {
		t.Fatal(err)
	}
	nonced := "set:o-3:1:" + events.NewNonce()
	rows := []outbox.Message{
		{Subject: "timeouts.cmd.o-1", MsgID: "set:o-1:1", Data: []byte(`{}`)},
		{Subject: "timeouts.cmd.reservations.r-1", MsgID: "clear:reservations.r-1:12", Data: []byte(`{}`)},
		{Subject: "timeouts.cmd.o-3", MsgID: nonced, Data: []byte(`{}`)},
		{Subject: "orders.paid.o-1", MsgID: "order.paid:o-1:2", Data: []byte(`{}`)},
	}
	if err := outbox.Insert(ctx, pool, "outbox", rows); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Up(ctx); err != nil {
		t.Fatal(err)
	}
	got, err := pool.Query(ctx, `SELECT msg_id FROM outbox ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	ids, err := pgx.CollectRows(got, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	for i, id := range ids {
		switch want := rows[i].MsgID; {
		case i < 2:
			if !strings.HasPrefix(id, want+":") || events.CheckMsgID(id) != nil {
				t.Errorf("row %d: msg id %q, want %q and a nonce", i, id, want)
			}
		case id != want:
			t.Errorf("row %d: msg id %q, want it kept as %q", i, id, want)
		}
	}
}
