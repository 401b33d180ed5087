package e2e

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/testcontainers/testcontainers-go"
	tcexec "github.com/testcontainers/testcontainers-go/exec"
	"github.com/testcontainers/testcontainers-go/wait"
)

// The stack's Postgres as a cluster (stackOptions.Patroni): three members
// under Patroni (pg-1, pg-2, pg-3) with a three-member etcd, synchronous
// and strict as in deploy/compose/compose.ha.yaml, and the services given
// one multi-host URL that follows the primary.

// patroniImage is the Postgres cluster's image (scripts/images.sh patroni).
var patroniImage = cmp.Or(os.Getenv("ORDERTIMEOUT_PATRONI_IMAGE"), "ordertimeout/patroni:15")

// pgMultiHost is the query a multi-host URL adds: keep the host that
// accepts writes, and give a dead one a second.
const pgMultiHost = "target_session_attrs=read-write&connect_timeout=2"

// pgMember is a member of the Postgres cluster as Patroni's REST API
// (GET /cluster) lists it.
type pgMember struct {
	Name     string `json:"name"`
	Role     string `json:"role"`  // leader, sync_standby, replica
	State    string `json:"state"` // running, streaming, stopped, …
	Timeline int    `json:"timeline"`
}

// startPatroni starts the etcd members and the Postgres members of the
// stack, each with its clock offset (stackOptions.PGClockOffsets), and
// waits until a primary accepts writes with a synchronous standby
// attached.
func (s *stack) startPatroni(ctx context.Context, offsets []string) error {
	etcds := names("etcd", 3)
	var initial []string
	for _, e := range etcds {
		initial = append(initial, e+"=http://"+e+":2380")
	}
	var wg sync.WaitGroup
	errs := make([]error, len(etcds))
	for i, name := range etcds {
		wg.Go(func() {
			errs[i] = s.run(ctx, name, patroniImage, "2379/tcp",
				testcontainers.WithCmd("etcd"),
				testcontainers.WithEnv(map[string]string{"ETCD_NAME": name, "ETCD_INITIAL_CLUSTER": strings.Join(initial, ",")}),
				testcontainers.WithWaitStrategy(wait.ForExec([]string{"curl", "-fsS", "-o", "/dev/null", "http://127.0.0.1:2379/health"}).
					WithPollInterval(200*time.Millisecond).WithStartupTimeout(90*time.Second)))
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	var hosts []string
	for _, e := range etcds {
		hosts = append(hosts, e+":2379")
	}
	errs = make([]error, len(s.PGNodes))
	for i, name := range s.PGNodes {
		env := map[string]string{
			"PATRONI_NAME": name, "PATRONI_ETCD3_HOSTS": strings.Join(hosts, ","),
			"PATRONI_SUPERUSER_PASSWORD": "postgres", "PATRONI_MAX_CONNECTIONS": "300",
			"POSTGRES_DATABASES": "orders timeouts reservations",
		}
		if i < len(offsets) && offsets[i] != "" {
			env["PATRONI_CLOCK_OFFSET"] = offsets[i]
		}
		wg.Go(func() {
			errs[i] = s.run(ctx, name, patroniImage, "5432/tcp",
				testcontainers.WithCmd("patroni"),
				testcontainers.WithEnv(env),
				// /health answers once this member's Postgres runs, as
				// primary or replica.
				testcontainers.WithWaitStrategy(wait.ForExec([]string{"curl", "-fsS", "-o", "/dev/null", "http://127.0.0.1:8008/health"}).
					WithPollInterval(200*time.Millisecond).WithStartupTimeout(3*time.Minute)))
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	return s.waitPrimary(ctx, 0, 2*time.Minute)
}

// pgMembers asks the first member that answers for the cluster's members.
func (s *stack) pgMembers(ctx context.Context) ([]pgMember, error) {
	var errs []error
	for _, name := range s.PGNodes {
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		out, err := s.execOutput(ctx, name, "curl", "-fsS", "--max-time", "2", "http://127.0.0.1:8008/cluster")
		cancel()
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", name, err))
			continue
		}
		var c struct {
			Members []pgMember `json:"members"`
		}
		if err := json.Unmarshal([]byte(out), &c); err != nil {
			errs = append(errs, fmt.Errorf("%s: cluster %q: %w", name, out, err))
			continue
		}
		return c.Members, nil
	}
	return nil, errors.Join(errs...)
}

// etcdLeader returns the etcd member that leads etcd's raft, as each
// member's status says.
func (s *stack) etcdLeader(t *testing.T) string {
	t.Helper()
	var errs []error
	for _, name := range names("etcd", 3) {
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		out, err := s.execOutput(ctx, name, "etcdctl", "--endpoints=http://127.0.0.1:2379", "endpoint", "status", "-w", "json")
		cancel()
		var st []struct {
			Status struct {
				Header struct {
					MemberID uint64 `json:"member_id"`
				} `json:"header"`
				Leader uint64 `json:"leader"`
			}
		}
		if err == nil {
			err = json.Unmarshal([]byte(out), &st)
		}
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("%s: %w (%q)", name, err, out))
		case len(st) == 1 && st[0].Status.Leader != 0 && st[0].Status.Leader == st[0].Status.Header.MemberID:
			return name
		}
	}
	t.Fatalf("no etcd member leads: %v", errors.Join(errs...))
	return ""
}

// pgRole returns the member of role (leader, sync_standby) that runs on a
// timeline above after, or "".
func pgRole(ms []pgMember, role string, after int) string {
	for _, m := range ms {
		if m.Role == role && m.Timeline > after && (m.State == "running" || m.State == "streaming") {
			return m.Name
		}
	}
	return ""
}

// waitPrimary waits until a leader on a timeline above after accepts
// writes, with a synchronous standby on its timeline, and returns when.
func (s *stack) waitPrimary(ctx context.Context, after int, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	var last string
	for time.Now().Before(deadline) {
		ms, err := s.pgMembers(ctx)
		if err == nil {
			leader, sync := pgRole(ms, "leader", after), pgRole(ms, "sync_standby", after)
			if leader != "" && sync != "" {
				if _, err := s.pgWritable(ctx); err == nil {
					return nil
				}
			}
			last = fmt.Sprintf("members %+v", ms)
		} else {
			last = err.Error()
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	return fmt.Errorf("no primary with a synchronous standby on a timeline above %d after %s: %s", after, limit, last)
}

// pgWritable commits a write through the multi-host URL, as the services
// would, and returns the timeline of the primary that committed it (the
// first field of its WAL file's name), so that a failover is over when
// the services can write, not when Patroni's view says so a loop later.
func (s *stack) pgWritable(ctx context.Context) (timeline int, err error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, s.pgURL("postgres"))
	if err != nil {
		return 0, err
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, "CREATE TEMP TABLE e2e_writable (x int); DROP TABLE e2e_writable"); err != nil {
		return 0, err
	}
	err = conn.QueryRow(ctx, "SELECT ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::int").Scan(&timeline)
	return timeline, err
}

// execOutput runs cmd in the container name and returns its output; a
// non-zero exit is an error.
func (s *stack) execOutput(ctx context.Context, name string, cmd ...string) (string, error) {
	code, r, err := s.container(name).Exec(ctx, cmd, tcexec.Multiplexed())
	if err != nil {
		return "", err
	}
	b, err := io.ReadAll(r)
	if err != nil {
		return "", err
	}
	if code != 0 {
		return string(b), fmt.Errorf("%s exited %d: %s", strings.Join(cmd, " "), code, strings.TrimSpace(string(b)))
	}
	return string(b), nil
}

// pgHosts returns the Postgres hosts of a URL: inside the network, or from
// the host.
func (s *stack) pgHosts(inside bool) string {
	var out []string
	for _, name := range s.PGNodes {
		if inside {
			out = append(out, name+":5432")
		} else {
			out = append(out, s.hostPort(name))
		}
	}
	return strings.Join(out, ",")
}

// pgQuery returns the query a URL of the stack's Postgres adds to query.
func (s *stack) pgQuery(query string) string {
	if len(s.PGNodes) > 1 {
		return strings.TrimPrefix(query+"&"+pgMultiHost, "&")
	}
	return query
}

// pgSorted returns the members' names in order, with their roles, for a
// report.
func pgSorted(ms []pgMember) string {
	slices.SortFunc(ms, func(a, b pgMember) int { return strings.Compare(a.Name, b.Name) })
	var out []string
	for _, m := range ms {
		out = append(out, fmt.Sprintf("%s %s/%s tl %d", m.Name, m.Role, m.State, m.Timeline))
	}
	return strings.Join(out, ", ")
}
