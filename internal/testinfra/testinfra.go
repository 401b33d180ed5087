// Package testinfra starts the real Postgres and NATS JetStream the
// integration tests run against, as containers through testcontainers-go,
// from the images scripts/images.sh builds (no registry is needed).
//
// Postgres is one container per test binary; each test gets a database of
// its own, so tests run in parallel without seeing each other's rows. NATS
// is one container per test, because the platform's stream names are fixed
// and some tests restart or stop the server.
//
// A package that uses it runs its tests through Main so the shared
// containers are removed when the binary ends:
//
//	func TestMain(m *testing.M) { testinfra.Main(m) }
//
// Under -short every helper skips the test: those tests need Docker.
package testinfra

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/testcontainers/testcontainers-go"
	"github.com/testcontainers/testcontainers-go/wait"
)

// Images the helpers start; scripts/images.sh builds them. The environment
// variables ORDERTIMEOUT_POSTGRES_IMAGE and ORDERTIMEOUT_NATS_IMAGE override
// them (say, with the images of a second checkout).
var (
	PostgresImage = envOr("ORDERTIMEOUT_POSTGRES_IMAGE", "ordertimeout/postgres:15")
	NATSImage     = envOr("ORDERTIMEOUT_NATS_IMAGE", "ordertimeout/nats:latest")
)

const (
	pgUser     = "postgres"
	pgPassword = "postgres"
)

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

func init() {
	// The reaper image cannot be pulled without a registry; Main removes
	// the shared containers instead, and per-test ones go in t.Cleanup.
	if os.Getenv("TESTCONTAINERS_RYUK_DISABLED") == "" {
		os.Setenv("TESTCONTAINERS_RYUK_DISABLED", "true")
	}
	// In a sandbox testcontainers may take the default gateway for the
	// Docker host; the engine is local and publishes on loopback.
	if os.Getenv("TESTCONTAINERS_HOST_OVERRIDE") == "" && os.Getenv("DOCKER_HOST") == "" {
		os.Setenv("TESTCONTAINERS_HOST_OVERRIDE", "127.0.0.1")
	}
}

var (
	pgOnce sync.Once
	pgCtr  testcontainers.Container
	pgBase string // connection string of the postgres database
	pgErr  error
	dbSeq  atomic.Int64
)

// Main runs the tests and then removes the shared containers; call it from
// TestMain. It exits the process with the tests' code.
func Main(m *testing.M) {
	code := m.Run()
	if pgCtr != nil {
		_ = pgCtr.Terminate(context.Background())
	}
	os.Exit(code)
}

// skipShort skips t under -short: the test needs Docker.
func skipShort(t testing.TB) {
	t.Helper()
	if testing.Short() {
		t.Skip("integration test: needs Docker; run without -short (make test)")
	}
}

// Postgres returns the connection string of a new, empty database on the
// shared Postgres container, dropped when t ends.
func Postgres(t testing.TB) string {
	t.Helper()
	skipShort(t)
	pgOnce.Do(func() { pgCtr, pgBase, pgErr = startPostgres(context.Background()) })
	if pgErr != nil {
		t.Fatalf("start postgres: %v", pgErr)
	}
	ctx := context.Background()
	name := fmt.Sprintf("t%d_%d", os.Getpid(), dbSeq.Add(1))
	conn, err := pgx.Connect(ctx, pgBase)
	if err != nil {
		t.Fatalf("connect postgres: %v", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatalf("create database: %v", err)
	}
	t.Cleanup(func() {
		c, err := pgx.Connect(ctx, pgBase)
		if err != nil {
			return
		}
		defer c.Close(ctx)
		_, _ = c.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
	})
	return strings.Replace(pgBase, "/postgres?", "/"+name+"?", 1)
}

// PostgresServer is a Postgres container of one test, for a test that
// restarts the database (the shared one is every test's).
type PostgresServer struct {
	ctr testcontainers.Container
	url string
}

// OwnPostgres starts a Postgres container for t, removed when t ends.
func OwnPostgres(t testing.TB) *PostgresServer {
	t.Helper()
	skipShort(t)
	ctr, url, err := startPostgres(context.Background())
	if err != nil {
		t.Fatalf("start postgres: %v", err)
	}
	t.Cleanup(func() { _ = ctr.Terminate(context.Background()) })
	return &PostgresServer{ctr: ctr, url: url}
}

// URL is the connection string of the server's postgres database; it
// changes with a restart (the host port is drawn again).
func (s *PostgresServer) URL() string { return s.url }

// Restart stops the server (a fast shutdown: every session is closed) and
// starts it again, and returns once it accepts connections; its
// pg_postmaster_start_time() is then the restart's.
func (s *PostgresServer) Restart(t testing.TB) {
	t.Helper()
	ctx := context.Background()
	restart(t, s.ctr, "postgres")
	host, err := s.ctr.Host(ctx)
	if err != nil {
		t.Fatal(err)
	}
	port, err := s.ctr.MappedPort(ctx, "5432/tcp")
	if err != nil {
		t.Fatal(err)
	}
	s.url = fmt.Sprintf("postgres://%s:%s@%s:%s/postgres?sslmode=disable", pgUser, pgPassword, host, port.Port())
	for end := time.Now().Add(60 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		conn, err := pgx.Connect(ctx, s.url)
		if err == nil {
			conn.Close(ctx)
			return
		}
		if time.Now().After(end) {
			t.Fatalf("postgres not back within 60s of its restart: %v", err)
		}
	}
}

func startPostgres(ctx context.Context) (testcontainers.Container, string, error) {
	ctr, err := testcontainers.Run(ctx, PostgresImage,
		testcontainers.WithEnv(map[string]string{"POSTGRES_PASSWORD": pgPassword, "POSTGRES_USER": pgUser}),
		testcontainers.WithExposedPorts("5432/tcp"),
		testcontainers.WithCmdArgs("-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off", "-c", "max_connections=500"),
		testcontainers.WithWaitStrategy(wait.ForAll(
			wait.ForLog("database system is ready to accept connections"),
			wait.ForListeningPort("5432/tcp"),
		).WithDeadline(60*time.Second)),
	)
	if err != nil {
		if ctr != nil {
			_ = ctr.Terminate(ctx)
		}
		return nil, "", err
	}
	host, err := ctr.Host(ctx)
	if err != nil {
		return ctr, "", err
	}
	port, err := ctr.MappedPort(ctx, "5432/tcp")
	if err != nil {
		return ctr, "", err
	}
	return ctr, fmt.Sprintf("postgres://%s:%s@%s:%s/postgres?sslmode=disable", pgUser, pgPassword, host, port.Port()), nil
}

// NATSServer is a NATS JetStream container of one test.
type NATSServer struct {
	// URL is the client URL, nats://host:port.
	URL       string
	Container testcontainers.Container
}

// NATS starts a NATS server for t with the image's configuration
// (deploy/images/nats/nats.conf: JetStream on file storage, the command
// mapping of every platform server, no users), removed when t ends.
func NATS(t testing.TB) *NATSServer {
	t.Helper()
	skipShort(t)
	ctx := context.Background()
	ctr, err := testcontainers.Run(ctx, NATSImage,
		testcontainers.WithExposedPorts("4222/tcp", "8222/tcp"),
		testcontainers.WithCmdArgs("-c", "/etc/nats/nats.conf"),
		testcontainers.WithWaitStrategy(wait.ForHTTP("/healthz?js-enabled-only=true").WithPort("8222/tcp").WithStartupTimeout(30*time.Second)),
	)
	testcontainers.CleanupContainer(t, ctr)
	if err != nil {
		t.Fatalf("start nats: %v", err)
	}
	s := &NATSServer{Container: ctr}
	s.URL = s.url(t)
	return s
}

func (s *NATSServer) url(t testing.TB) string {
	t.Helper()
	ctx := context.Background()
	host, err := s.Container.Host(ctx)
	if err != nil {
		t.Fatalf("nats host: %v", err)
	}
	port, err := s.Container.MappedPort(ctx, "4222/tcp")
	if err != nil {
		t.Fatalf("nats port: %v", err)
	}
	return fmt.Sprintf("nats://%s:%s", host, port.Port())
}

// JetStream connects to the server and returns a JetStream client on the
// connection, which is closed when t ends.
func (s *NATSServer) JetStream(t testing.TB) jetstream.JetStream {
	t.Helper()
	return JetStream(t, s.URL)
}

// JetStream connects to the NATS servers of url (comma-separated) and
// returns a JetStream client on the connection, which is closed when t
// ends.
func JetStream(t testing.TB, url string) jetstream.JetStream {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatalf("connect to nats: %v", err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatalf("jetstream: %v", err)
	}
	return js
}

// Restart stops and starts the NATS container, keeping its JetStream data.
// The mapped port may change: Restart returns and stores the new URL.
func (s *NATSServer) Restart(t testing.TB) string {
	t.Helper()
	restart(t, s.Container, "nats")
	s.URL = s.url(t)
	return s.URL
}

// restart stops ctr (its process gets 10 s) and starts it again, keeping
// its data.
func restart(t testing.TB, ctr testcontainers.Container, what string) {
	t.Helper()
	ctx := context.Background()
	timeout := 10 * time.Second
	if err := ctr.Stop(ctx, &timeout); err != nil {
		t.Fatalf("stop %s: %v", what, err)
	}
	if err := ctr.Start(ctx); err != nil {
		t.Fatalf("start %s again: %v", what, err)
	}
}

// Logs returns the container's logs, for failure reports.
func Logs(ctr testcontainers.Container) string {
	r, err := ctr.Logs(context.Background())
	if err != nil {
		return "logs: " + err.Error()
	}
	defer r.Close()
	b, _ := io.ReadAll(r)
	return string(b)
}

// Count returns how many messages stream holds on subject.
func Count(t testing.TB, js jetstream.JetStream, stream, subject string) uint64 {
	t.Helper()
	s, err := js.Stream(context.Background(), stream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(context.Background(), jetstream.WithSubjectFilter(subject))
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Subjects[subject]
}
