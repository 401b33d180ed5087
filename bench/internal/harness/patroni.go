package harness

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// PatroniImage is the image of the Postgres cluster's members and of its
// etcd (deploy/images/patroni; scripts/images.sh patroni builds it).
const PatroniImage = "ordertimeout/patroni:15"

// patroniSize is the number of the Postgres cluster's members and of its
// etcd's.
const patroniSize = 3

// patroniRestart are the PostgresArgs parameters that a member applies only
// at a restart of its server.
var patroniRestart = []string{"shared_buffers", "wal_buffers", "shared_preload_libraries"}

// PatroniCluster is a Postgres cluster under Patroni, as the HA stack runs
// it: three etcd members and three Postgres members (synchronous_mode and
// synchronous_mode_strict on: a commit returns once the synchronous standby
// has flushed it), on a docker network of their own, reached from the host
// at their address on that network.
type PatroniCluster struct {
	// Network is the docker network the members share.
	Network string
	// Etcd and Members are the containers, pg-1… and etcd-1… on Network.
	Etcd, Members []*Container
	// URL is the multi-host connection string of the postgres database as
	// superuser: every member, target_session_attrs=read-write, so a
	// client keeps the member that accepts writes.
	URL string
	// Leader is the member that led when the cluster became ready.
	Leader *Container
	// Parameters are the PostgresArgs set in the cluster's configuration,
	// key=value each.
	Parameters []string
	addrs      []string // each member's host:port, in Members' order
	api        []string // each member's REST API root, http://host:8008
}

// StartPatroni starts a PatroniCluster named after prefix and waits until
// a leader accepts writes with a synchronous standby; it then sets
// PostgresArgs in the cluster's configuration (max_connections at the
// bootstrap, which Patroni keeps equal on every member), restarts the
// members whose parameters wait for a restart and waits again. The
// caller removes it, also after an error.
func StartPatroni(ctx context.Context, prefix string) (*PatroniCluster, error) {
	params, err := pgParameters(PostgresArgs)
	if err != nil {
		return nil, err
	}
	c := &PatroniCluster{Network: prefix + "-net"}
	if out, err := exec.CommandContext(ctx, "docker", "network", "create", c.Network).CombinedOutput(); err != nil {
		c.Network = ""
		return c, fmt.Errorf("docker network create: %w: %s", err, out)
	}
	var initial, hosts []string
	for i := range patroniSize {
		name := fmt.Sprintf("etcd-%d", i+1)
		initial = append(initial, name+"=http://"+name+":2380")
		hosts = append(hosts, name+":2379")
	}
	for i := range patroniSize {
		name := fmt.Sprintf("etcd-%d", i+1)
		e, err := run(ctx, prefix+"-"+name, PatroniImage, nil, "--network", c.Network, "--network-alias", name, "--hostname", name,
			"-e", "ETCD_NAME="+name, "-e", "ETCD_INITIAL_CLUSTER="+strings.Join(initial, ","), PatroniImage, "etcd")
		if err != nil {
			return c, err
		}
		c.Etcd = append(c.Etcd, e)
	}
	maxConn := "100"
	var rest []string
	for _, p := range params {
		if v, ok := strings.CutPrefix(p, "max_connections="); ok {
			maxConn = v
			continue
		}
		rest = append(rest, p)
	}
	c.Parameters = params
	for i := range patroniSize {
		name := fmt.Sprintf("pg-%d", i+1)
		m, err := run(ctx, prefix+"-"+name, PatroniImage, nil, "--network", c.Network, "--network-alias", name, "--hostname", name,
			"--shm-size=1g", "-e", "PATRONI_NAME="+name, "-e", "PATRONI_ETCD3_HOSTS="+strings.Join(hosts, ","),
			"-e", "PATRONI_SUPERUSER_PASSWORD=postgres", "-e", "PATRONI_MAX_CONNECTIONS="+maxConn,
			"-e", "POSTGRES_DATABASES=", PatroniImage, "patroni")
		if err != nil {
			return c, err
		}
		c.Members = append(c.Members, m)
		addr, err := m.addr(ctx, "5432/tcp")
		if err != nil {
			return c, err
		}
		host, _, _ := net.SplitHostPort(addr)
		c.addrs = append(c.addrs, addr)
		c.api = append(c.api, "http://"+net.JoinHostPort(host, "8008"))
	}
	c.URL = "postgres://postgres:postgres@" + strings.Join(c.addrs, ",") +
		"/postgres?sslmode=disable&target_session_attrs=read-write&connect_timeout=2"
	if err := c.waitReady(ctx, 3*time.Minute); err != nil {
		return c, err
	}
	if err := c.configure(ctx, rest); err != nil {
		return c, err
	}
	if err := c.waitReady(ctx, 3*time.Minute); err != nil {
		return c, err
	}
	ms, err := c.State(ctx)
	if err != nil {
		return c, err
	}
	for i, m := range c.Members {
		if ms.role(fmt.Sprintf("pg-%d", i+1)) == "leader" {
			c.Leader = m
		}
	}
	if c.Leader == nil {
		return c, fmt.Errorf("patroni: no leader among %s", ms)
	}
	return c, nil
}

// configure sets params in the cluster's configuration (patronictl
// edit-config) and restarts the members that wait for a restart.
func (c *PatroniCluster) configure(ctx context.Context, params []string) error {
	if len(params) == 0 {
		return nil
	}
	args := []string{"patronictl", "-c", "/etc/patroni/patroni.yml", "edit-config", "--force", "--quiet"}
	for _, p := range params {
		args = append(args, "-p", p)
	}
	if _, err := c.Members[0].Exec(ctx, "", args...); err != nil {
		return fmt.Errorf("patroni: set parameters: %w", err)
	}
	restart := slices.ContainsFunc(params, func(p string) bool {
		k, _, _ := strings.Cut(p, "=")
		return slices.Contains(patroniRestart, k)
	})
	if !restart {
		return nil
	}
	// Patroni marks pending_restart within a loop (loop_wait, 1 s) of the
	// change; wait for every member to see it, then restart them.
	err := Poll(ctx, time.Minute, 500*time.Millisecond, func() (bool, error) {
		ms, err := c.State(ctx)
		if err != nil {
			return false, nil
		}
		return len(ms) == patroniSize && !slices.ContainsFunc(ms, func(m PatroniMember) bool { return !m.PendingRestart }), nil
	})
	if err != nil {
		return fmt.Errorf("patroni: wait for pending restarts: %w", err)
	}
	if _, err := c.Members[0].Exec(ctx, "", "patronictl", "-c", "/etc/patroni/patroni.yml", "restart", "ordertimeout", "--pending", "--force"); err != nil {
		return fmt.Errorf("patroni: restart: %w", err)
	}
	err = Poll(ctx, 2*time.Minute, 500*time.Millisecond, func() (bool, error) {
		ms, err := c.State(ctx)
		if err != nil {
			return false, nil
		}
		return !slices.ContainsFunc(ms, func(m PatroniMember) bool { return m.PendingRestart }), nil
	})
	if err != nil {
		return fmt.Errorf("patroni: wait for the restarts: %w", err)
	}
	return nil
}

// waitReady waits until the cluster lists a running leader and a streaming
// synchronous standby and the multi-host URL commits a write.
func (c *PatroniCluster) waitReady(ctx context.Context, limit time.Duration) error {
	var last string
	err := Poll(ctx, limit, 250*time.Millisecond, func() (bool, error) {
		ms, err := c.State(ctx)
		if err != nil {
			last = err.Error()
			return false, nil
		}
		last = ms.String()
		if ms.running("leader") == "" || ms.running("sync_standby") == "" {
			return false, nil
		}
		if err := c.writable(ctx); err != nil {
			last += "; write: " + err.Error()
			return false, nil
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("patroni: no leader with a synchronous standby accepting writes: %w (last: %s)", err, last)
	}
	return nil
}

// writable reports whether the multi-host URL reaches a member that
// commits a write.
func (c *PatroniCluster) writable(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, c.URL)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	_, err = conn.Exec(ctx, "CREATE TEMP TABLE loadgen_writable (x int); DROP TABLE loadgen_writable")
	return err
}

// PatroniMember is a member as Patroni's REST API (GET /cluster) lists it.
type PatroniMember struct {
	Name           string `json:"name"`
	Role           string `json:"role"`  // leader, sync_standby, replica
	State          string `json:"state"` // running, streaming, stopped, …
	Timeline       int    `json:"timeline"`
	PendingRestart bool   `json:"pending_restart"`
}

// PatroniMembers are a cluster's members.
type PatroniMembers []PatroniMember

// String lists the members in name order: name role/state timeline.
func (ms PatroniMembers) String() string {
	s := slices.Clone(ms)
	slices.SortFunc(s, func(a, b PatroniMember) int { return strings.Compare(a.Name, b.Name) })
	var out []string
	for _, m := range s {
		out = append(out, fmt.Sprintf("%s:%s/%s/tl%d", m.Name, m.Role, m.State, m.Timeline))
	}
	return strings.Join(out, ",")
}

// running returns the member of role that runs (a leader) or streams (a
// standby), or "".
func (ms PatroniMembers) running(role string) string {
	for _, m := range ms {
		if m.Role == role && (m.State == "running" || m.State == "streaming") {
			return m.Name
		}
	}
	return ""
}

func (ms PatroniMembers) role(name string) string {
	for _, m := range ms {
		if m.Name == name {
			return m.Role
		}
	}
	return ""
}

// State asks the first member's REST API that answers for the cluster's
// members.
func (c *PatroniCluster) State(ctx context.Context) (PatroniMembers, error) {
	var errs []error
	for _, api := range c.api {
		ms, err := members(ctx, api)
		if err == nil {
			return ms, nil
		}
		errs = append(errs, err)
	}
	return nil, errors.Join(errs...)
}

func members(ctx context.Context, api string) (PatroniMembers, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, api+"/cluster", nil)
	if err != nil {
		return nil, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s/cluster: %s", api, resp.Status)
	}
	var body struct {
		Members PatroniMembers `json:"members"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return nil, fmt.Errorf("GET %s/cluster: %w", api, err)
	}
	return body.Members, nil
}

// CreateDatabase creates database name on the leader and returns its
// multi-host connection string.
func (c *PatroniCluster) CreateDatabase(ctx context.Context, name string) (string, error) {
	return createDatabase(ctx, c.URL, name)
}

// CPU returns the CPU time of the Postgres members together (each
// container's Postgres and its Patroni agent) and of the etcd members
// together.
func (c *PatroniCluster) CPU(ctx context.Context) (postgres, etcd CPUTime, err error) {
	if postgres, err = sumCPU(ctx, c.Members); err != nil {
		return nil, nil, err
	}
	if etcd, err = sumCPU(ctx, c.Etcd); err != nil {
		return nil, nil, err
	}
	return postgres, etcd, nil
}

func sumCPU(ctx context.Context, cs []*Container) (CPUTime, error) {
	var ts []CPUTime
	for _, c := range cs {
		t, err := c.CPU(ctx)
		if err != nil {
			return nil, err
		}
		ts = append(ts, t)
	}
	return func() (time.Duration, error) {
		var sum time.Duration
		for _, t := range ts {
			d, err := t()
			if err != nil {
				return 0, err
			}
			sum += d
		}
		return sum, nil
	}, nil
}

// Remove force-removes the containers and the network; errors are ignored
// because it runs on the way out.
func (c *PatroniCluster) Remove() {
	for _, m := range append(slices.Clone(c.Members), c.Etcd...) {
		m.Remove()
	}
	if c.Network != "" {
		_ = exec.Command("docker", "network", "rm", c.Network).Run()
	}
}

// pgParameters returns the parameters of args, a list of "-c" "key=value"
// pairs such as PostgresArgs, as key=value each.
func pgParameters(args []string) ([]string, error) {
	if len(args)%2 != 0 {
		return nil, fmt.Errorf("postgres args %q: want -c key=value pairs", args)
	}
	var out []string
	for i := 0; i < len(args); i += 2 {
		if args[i] != "-c" || !strings.Contains(args[i+1], "=") {
			return nil, fmt.Errorf("postgres args %q: want -c key=value pairs", args[i:i+2])
		}
		out = append(out, args[i+1])
	}
	return out, nil
}

// settingsShown are the server settings ShowSettings reads beside those of
// PostgresArgs: what else differs between a single server and a cluster's
// member.
var settingsShown = []string{"server_version", "wal_level", "wal_log_hints", "data_checksums", "full_page_writes",
	"synchronous_standby_names", "hot_standby", "lc_collate"}

// ShowSettings returns the settings in force on the server url reaches,
// those of PostgresArgs and settingsShown, as key=value each.
func ShowSettings(ctx context.Context, url string) ([]string, error) {
	params, err := pgParameters(PostgresArgs)
	if err != nil {
		return nil, err
	}
	names := slices.Clone(settingsShown)
	for _, p := range params {
		k, _, _ := strings.Cut(p, "=")
		names = append(names, k)
	}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return nil, fmt.Errorf("show settings: %w", err)
	}
	defer conn.Close(ctx)
	var out []string
	for _, n := range names {
		var v string
		if err := conn.QueryRow(ctx, "SELECT current_setting($1)", n).Scan(&v); err != nil {
			return nil, fmt.Errorf("show %s: %w", n, err)
		}
		if v == "" {
			v = strconv.Quote(v)
		}
		out = append(out, n+"="+strings.ReplaceAll(v, " ", ""))
	}
	return out, nil
}

// createDatabase creates database name on the server of url, the
// connection string of its postgres database, and returns name's.
func createDatabase(ctx context.Context, url, name string) (string, error) {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return "", fmt.Errorf("connect postgres: %w", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		return "", fmt.Errorf("create database %s: %w", name, err)
	}
	return strings.Replace(url, "/postgres?", "/"+name+"?", 1), nil
}
