package daemon_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ordertimeout/ordertimeout/internal/eventstest"
	"github.com/ordertimeout/ordertimeout/internal/streams"
	"github.com/ordertimeout/ordertimeout/internal/testinfra"
	"github.com/ordertimeout/ordertimeout/pkg/events"
	"github.com/ordertimeout/ordertimeout/services/timeoutd/daemon"
	"github.com/ordertimeout/ordertimeout/services/timeoutd/internal/lease"
	"github.com/ordertimeout/ordertimeout/services/timeoutd/postgres"
)

func TestMain(m *testing.M) { testinfra.Main(m) }

// env is one test's Postgres database and NATS server, with a client.
type env struct {
	dbURL string
	nats  *testinfra.NATSServer
	js    jetstream.JetStream
	pool  *pgxpool.Pool
}

func newEnv(t testing.TB) *env {
	t.Helper()
	e := &env{dbURL: testinfra.Postgres(t), nats: testinfra.NATS(t)}
	ctx := context.Background()
	nc, err := nats.Connect(e.nats.URL)
	if err != nil {
		t.Fatalf("connect nats: %v", err)
	}
	t.Cleanup(nc.Close)
	if e.js, err = jetstream.New(nc); err != nil {
		t.Fatal(err)
	}
	if err := streams.Ensure(ctx, e.js, streams.Config{}); err != nil {
		t.Fatal(err)
	}
	if e.pool, err = pgxpool.New(ctx, e.dbURL); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.pool.Close)
	if err := postgres.Migrate(ctx, e.pool); err != nil {
		t.Fatal(err)
	}
	return e
}

// started is a daemon running in-process.
type started struct {
	*daemon.Main
	cancel context.CancelFunc
	done   chan struct{} // closed when Run returned, with its error in err
	err    error
}

// stop shuts the daemon down gracefully and waits for Run.
func (s *started) stop(t testing.TB) {
	t.Helper()
	s.cancel()
	select {
	case <-s.done:
		if s.err != nil {
			t.Errorf("Run: %v", s.err)
		}
	case <-time.After(30 * time.Second):
		t.Error("Run did not return within 30s of cancel")
	}
}

// start runs a daemon on e until the test ends and waits for it to be ready.
func (e *env) start(t testing.TB, mutate func(*daemon.Config)) *started {
	t.Helper()
	cfg := daemon.Config{DatabaseURL: e.dbURL, NATSURL: e.nats.URL, HTTPAddr: "127.0.0.1:0",
		Logger: slog.New(slog.NewJSONHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))}
	cfg.Service.JanitorInterval = 200 * time.Millisecond
	cfg.Service.InstanceID = testInstance
	cfg.ShutdownDelay = 50 * time.Millisecond
	if mutate != nil {
		mutate(&cfg)
	}
	ctx, cancel := context.WithCancel(context.Background())
	// The bootstrap step: the streams with this daemon's fire subjects.
	if err := streams.Ensure(ctx, e.js, streams.Config{FireSubjectPrefixes: cfg.Service.FireSubjectPrefixes}); err != nil {
		cancel()
		t.Fatalf("streams bootstrap: %v", err)
	}
	m, err := daemon.New(ctx, cfg)
	if err != nil {
		cancel()
		t.Fatalf("daemon.New: %v", err)
	}
	s := &started{Main: m, cancel: cancel, done: make(chan struct{})}
	go func() {
		s.err = m.Run(ctx)
		close(s.done)
	}()
	t.Cleanup(func() {
		cancel()
		<-s.done
	})
	select {
	case <-m.Ready():
	case <-s.done:
		t.Fatalf("Run returned before ready: %v", s.err)
	case <-time.After(2 * time.Minute):
		t.Fatal("not ready within 2m")
	}
	return s
}

// testWriter sends logs to t.Log.
type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(string(p))
	return len(p), nil
}

// setCmd and clearCmd build commands.
func setCmd(key string, version int64, deadline time.Time) events.Command {
	return events.Command{Schema: 1, Kind: events.KindSet, Key: key, Version: version, Deadline: deadline.UTC(),
		FireSubject: events.OrderCancelSubject(key)}
}

func clearCmd(key string, version int64) events.Command {
	return events.Command{Schema: 1, Kind: events.KindClear, Key: key, Version: version}
}

// publish sends cmd on its subject with its Nats-Msg-Id and an optional id
// suffix (to get a duplicate past JetStream's dedupe). Its nonce is the
// command's own (eventstest.MsgID), so that the same command published twice is
// one message, as a producer's republish.
func (e *env) publish(t testing.TB, cmd events.Command, idSuffix ...string) {
	t.Helper()
	data, err := json.Marshal(cmd)
	if err != nil {
		t.Fatal(err)
	}
	id := eventstest.MsgID(cmd)
	for _, s := range idSuffix {
		id += s
	}
	e.publishRaw(t, cmd.Subject(), data, id)
}

func (e *env) publishRaw(t testing.TB, subject string, data []byte, msgID string) {
	t.Helper()
	m := &nats.Msg{Subject: subject, Data: data, Header: nats.Header{}}
	m.Header.Set(jetstream.MsgIDHeader, msgID)
	if _, err := e.js.PublishMsg(context.Background(), m); err != nil {
		t.Fatalf("publish %s: %v", subject, err)
	}
}

// eventually polls cond every 20ms until it returns true or timeout passes.
func eventually(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// count returns how many messages stream holds on subject.
func (e *env) count(t testing.TB, stream, subject string) uint64 {
	t.Helper()
	return testinfra.Count(t, e.js, stream, subject)
}

// last returns the last message on subject, or nil when there is none.
func (e *env) last(t testing.TB, stream, subject string) *jetstream.RawStreamMsg {
	t.Helper()
	s, err := e.js.Stream(context.Background(), stream)
	if err != nil {
		t.Fatal(err)
	}
	m, err := s.GetLastMsgForSubject(context.Background(), subject)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// expiry waits for the one event on subject and checks its invariants: the
// Nats-Msg-Id, fired_at ≥ deadline and stored (publish) time ≥ deadline.
func (e *env) expiry(t testing.TB, subject string, want events.Outcome, key string, version int64, deadline time.Time) events.Expiry {
	t.Helper()
	var m *jetstream.RawStreamMsg
	eventually(t, 15*time.Second, "expiry on "+subject, func() bool { m = e.last(t, events.StreamExpiries, subject); return m != nil })
	ex, err := events.DecodeExpiry(m.Data)
	if err != nil {
		t.Fatalf("decode expiry: %v", err)
	}
	if id := m.Header.Get(jetstream.MsgIDHeader); id != ex.MsgID() || ex.MsgID() != fmt.Sprintf("%s:%s:%d", want, key, version) {
		t.Errorf("Nats-Msg-Id = %q, event %+v, want %s:%s:%d", id, ex, want, key, version)
	}
	if !ex.Deadline.Equal(deadline) {
		t.Errorf("event deadline = %v, want %v", ex.Deadline, deadline)
	}
	if ex.FiredAt.Before(deadline) || m.Time.Before(deadline) {
		t.Errorf("early: deadline %v, fired_at %v, published %v", deadline, ex.FiredAt, m.Time)
	}
	return ex
}

// state returns the stored state and version of key (-1 when absent).
func (e *env) state(t testing.TB, key string) (state int16, version int64) {
	t.Helper()
	err := e.pool.QueryRow(context.Background(), `SELECT state, version FROM timeouts WHERE key = timeout_key($1)`, key).Scan(&state, &version)
	if err != nil {
		return -1, 0
	}
	return state, version
}

// unpublished returns the number of timeouts whose deadline passed and
// whose event is not known to be published: the timeout rows are the
// outbox, a row stays pending until its event has a PubAck.
func (e *env) unpublished(t testing.TB) int {
	t.Helper()
	var n int
	if err := e.pool.QueryRow(context.Background(), `SELECT count(*) FROM timeouts WHERE state = 0 AND deadline_ns <= $1`,
		time.Now().UnixNano()).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// get fetches url and returns the status and body.
func get(t testing.TB, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// testInstance is the instance id of the daemons a test starts: a daemon
// started after another one in the same test takes its leases over at
// once, as a restarted process does.
const testInstance = "daemon-test"

// previous takes every partition's lease as the daemon's previous process
// did, and returns its fence, for writes made as that process.
func (e *env) previous(t testing.TB) lease.Fence {
	t.Helper()
	leases, err := postgres.NewLeases(e.pool).Acquire(context.Background(), testInstance, events.Partitions, nil, time.Minute)
	if err != nil || len(leases) != events.Partitions {
		t.Fatalf("acquire the leases: %d, %v", len(leases), err)
	}
	return lease.Fence{Owner: testInstance, Leases: leases}
}
