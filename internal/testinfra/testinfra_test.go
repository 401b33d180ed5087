package testinfra_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ordertimeout/ordertimeout/internal/testinfra"
)

func TestMain(m *testing.M) { testinfra.Main(m) }

func TestPostgresDatabasesAreIsolated(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a, b := testinfra.Postgres(t), testinfra.Postgres(t)
	if a == b {
		t.Fatalf("two tests got the same database %q", a)
	}
	ca, err := pgx.Connect(ctx, a)
	if err != nil {
		t.Fatal(err)
	}
	defer ca.Close(ctx)
	if _, err := ca.Exec(ctx, "CREATE TABLE x (id int)"); err != nil {
		t.Fatal(err)
	}
	cb, err := pgx.Connect(ctx, b)
	if err != nil {
		t.Fatal(err)
	}
	defer cb.Close(ctx)
	var n int
	if err := cb.QueryRow(ctx, "SELECT count(*) FROM pg_tables WHERE tablename = 'x'").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatalf("table of one database is visible in the other")
	}
}

func TestNATSJetStreamSurvivesRestart(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv := testinfra.NATS(t)
	nc, err := nats.Connect(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	js, _ := jetstream.New(nc)
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "T", Subjects: []string{"t.>"}, Storage: jetstream.FileStorage}); err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, "t.1", []byte("x")); err != nil {
		t.Fatal(err)
	}
	nc.Close()
	url := srv.Restart(t)
	nc, err = nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ = jetstream.New(nc)
	var st *jetstream.StreamInfo
	for deadline := time.Now().Add(20 * time.Second); ; {
		s, err := js.Stream(ctx, "T")
		if err == nil {
			st, err = s.Info(ctx)
		}
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("stream after restart: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if st.State.Msgs != 1 {
		t.Fatalf("stream has %d messages after restart, want 1", st.State.Msgs)
	}
}
