package harness

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go"
)

// Images the harness starts; scripts/images.sh in the root module builds them.
const (
	PostgresImage = "ordertimeout/postgres:15"
	NATSImage     = "ordertimeout/nats:latest"
)

// PostgresArgs are the server settings of every benchmark run, the same for
// every peer measured against it. Commits stay durable (fsync and
// synchronous_commit on, the defaults); memory and WAL sizing are raised so a
// checkpoint does not land in the middle of a short measurement; the time
// spent writing and syncing WAL is tracked (pg_stat_wal), a clock read per
// WAL write.
var PostgresArgs = []string{
	"-c", "max_connections=300",
	"-c", "shared_buffers=1GB",
	"-c", "work_mem=16MB",
	"-c", "maintenance_work_mem=256MB",
	"-c", "max_wal_size=8GB",
	"-c", "checkpoint_timeout=30min",
	"-c", "wal_buffers=64MB",
	"-c", "fsync=on",
	"-c", "synchronous_commit=on",
	"-c", "track_wal_io_timing=on",
}

// StatementsArgs preload pg_stat_statements, for a run that reports what
// Postgres's statements cost (loadgen -storm-profiles); the other runs
// leave them out, unslowed by its bookkeeping.
var StatementsArgs = []string{"-c", "shared_preload_libraries=pg_stat_statements"}

// Container is a running container started by the harness.
type Container struct {
	// Name is the docker container name.
	Name string
}

// Remove force-removes the container; errors are ignored because it runs
// on the way out.
func (c *Container) Remove() {
	_ = exec.Command("docker", "rm", "-f", "-v", c.Name).Run()
}

// PID returns the process id, as the host sees it, of the container's main
// process (for its RSS, see ReadMemory).
func (c *Container) PID(ctx context.Context) (int, error) {
	out, err := exec.CommandContext(ctx, "docker", "inspect", "-f", "{{.State.Pid}}", c.Name).Output()
	if err != nil {
		return 0, fmt.Errorf("docker inspect %s: %w", c.Name, err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(out)))
	if err != nil || pid <= 0 {
		return 0, fmt.Errorf("container %s: no process (pid %q)", c.Name, strings.TrimSpace(string(out)))
	}
	return pid, nil
}

// Exec runs a command inside the container with stdin and returns its
// combined output.
func (c *Container) Exec(ctx context.Context, stdin string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "docker", append([]string{"exec", "-i", c.Name}, args...)...)
	cmd.Stdin = strings.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("docker exec %s: %w: %s", strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

// addr returns the host:port to reach the container's port p (e.g.
// "5432/tcp") at: its address on docker's bridge network, so that the
// traffic does not pass through docker-proxy, the userland proxy behind
// published ports, which cost about a tenth of the machine's CPU in the
// expiry storm and is no part of a deployment (containers reach each other
// over the bridge); or, where the container has no bridge address, the
// 127.0.0.1 port docker published.
func (c *Container) addr(ctx context.Context, p string) (string, error) {
	out, err := exec.CommandContext(ctx, "docker", "inspect", "-f", "{{range .NetworkSettings.Networks}}{{.IPAddress}} {{end}}", c.Name).Output()
	if err != nil {
		return "", fmt.Errorf("docker inspect %s: %w", c.Name, err)
	}
	if ips := strings.Fields(string(out)); len(ips) > 0 {
		return net.JoinHostPort(ips[0], strings.TrimSuffix(p, "/tcp")), nil
	}
	out, err = exec.CommandContext(ctx, "docker", "port", c.Name, p).Output()
	if err != nil {
		return "", fmt.Errorf("docker port %s: %w", p, err)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if strings.HasPrefix(line, "127.0.0.1:") {
			return line, nil
		}
	}
	return "", fmt.Errorf("docker port %s: no 127.0.0.1 binding in %q", p, out)
}

func run(ctx context.Context, name, image string, ports []string, args ...string) (*Container, error) {
	full := []string{"run", "-d", "--name", name}
	for _, p := range ports {
		full = append(full, "-p", "127.0.0.1::"+p)
	}
	full = append(full, args...)
	cmd := exec.CommandContext(ctx, "docker", full...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("docker run %s: %w: %s", image, err, stderr.String())
	}
	return &Container{Name: name}, nil
}

// Postgres is a Postgres container with its admin connection string.
type Postgres struct {
	*Container
	// URL is the connection string of the postgres database as superuser.
	URL string
}

// StartPostgres runs PostgresImage with PostgresArgs and waits until it
// accepts connections. The caller removes it.
func StartPostgres(ctx context.Context, name string) (*Postgres, error) {
	args := append([]string{"-e", "POSTGRES_PASSWORD=postgres", "-e", "POSTGRES_USER=postgres", "--shm-size=1g", PostgresImage}, PostgresArgs...)
	c, err := run(ctx, name, PostgresImage, []string{"5432"}, args...)
	if err != nil {
		return nil, err
	}
	pg := &Postgres{Container: c}
	addr, err := c.addr(ctx, "5432/tcp")
	if err != nil {
		return pg, err
	}
	pg.URL = fmt.Sprintf("postgres://postgres:postgres@%s/postgres?sslmode=disable", addr)
	err = Poll(ctx, 90*time.Second, 100*time.Millisecond, func() (bool, error) {
		conn, err := pgx.Connect(ctx, pg.URL)
		if err != nil {
			return false, nil
		}
		defer conn.Close(ctx)
		// The image's entrypoint runs a temporary server during init; wait
		// for the final one, which is the only one listening on TCP.
		return conn.Ping(ctx) == nil, nil
	})
	if err != nil {
		return pg, fmt.Errorf("wait for postgres: %w", err)
	}
	return pg, nil
}

// CreateDatabase creates database name and returns its connection string.
func (p *Postgres) CreateDatabase(ctx context.Context, name string) (string, error) {
	return createDatabase(ctx, p.URL, name)
}

// natsProfilePort is nats-server's profiling port (its --profile): it
// serves net/http/pprof and costs nothing until a profile is asked for.
const natsProfilePort = "6062"

// NATS is a NATS JetStream container with its client URL.
type NATS struct {
	*Container
	// URL is nats://host:port (see Container.addr).
	URL string
	// ProfileURL is nats-server's net/http/pprof root,
	// http://host:port/debug/pprof/ (see FetchCPUProfile).
	ProfileURL string
}

// StartNATS runs NATSImage with its configuration (JetStream on file
// storage, the command mapping of every platform server) and its profiling
// port, and waits until a client connects and JetStream answers. The caller
// removes it.
func StartNATS(ctx context.Context, name string) (*NATS, error) {
	c, err := run(ctx, name, NATSImage, []string{"4222", natsProfilePort}, NATSImage, "-c", "/etc/nats/nats.conf", "--profile", natsProfilePort)
	if err != nil {
		return nil, err
	}
	n := &NATS{Container: c}
	addr, err := c.addr(ctx, "4222/tcp")
	if err != nil {
		return n, err
	}
	n.URL = "nats://" + addr
	prof, err := c.addr(ctx, natsProfilePort+"/tcp")
	if err != nil {
		return n, err
	}
	n.ProfileURL = "http://" + prof + "/debug/pprof/"
	err = Poll(ctx, 30*time.Second, 100*time.Millisecond, func() (bool, error) {
		nc, err := nats.Connect(n.URL)
		if err != nil {
			return false, nil
		}
		defer nc.Close()
		_, err = nc.Request("$JS.API.INFO", nil, time.Second)
		return err == nil, nil
	})
	if err != nil {
		return n, fmt.Errorf("wait for nats: %w", err)
	}
	return n, nil
}
