package e2e

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/network"
	"github.com/moby/moby/client"
	"github.com/testcontainers/testcontainers-go"
	tcnetwork "github.com/testcontainers/testcontainers-go/network"
	"github.com/testcontainers/testcontainers-go/wait"

	"github.com/ordertimeout/ordertimeout/internal/tenants"
	"github.com/ordertimeout/ordertimeout/internal/testcerts"
	"github.com/ordertimeout/ordertimeout/internal/testinfra"
	"github.com/ordertimeout/ordertimeout/pkg/ordersclient"
	ordersdaemon "github.com/ordertimeout/ordertimeout/services/orders/daemon"
	"github.com/ordertimeout/ordertimeout/services/timeoutd/daemon"
)

// Images of the stack, built by `make images`; the environment variables
// override them. Postgres and NATS are testinfra's (same overrides).
var (
	ordersImage   = cmp.Or(os.Getenv("ORDERTIMEOUT_ORDERS_IMAGE"), "ordertimeout/orders:dev")
	timeoutdImage = cmp.Or(os.Getenv("ORDERTIMEOUT_TIMEOUTD_IMAGE"), "ordertimeout/timeoutd:dev")
	// toxiproxyImage is the fault proxy of stackOptions.Proxied.
	toxiproxyImage = cmp.Or(os.Getenv("ORDERTIMEOUT_TOXIPROXY_IMAGE"), "ordertimeout/toxiproxy:latest")
)

// Container names of the stack; also their host names on its network.
const (
	svcPostgres = "postgres"
	svcNATS     = "nats"
	svcOrders   = "orders"
	svcTimeoutd = "timeoutd"
	svcProxy    = "toxiproxy"
	svcJaeger   = "jaeger"
)

// tenantsFile is where timeoutd finds the stack's tenant registry.
const tenantsFile = "/etc/ordertimeout/tenants.json"

// apiToken is the orders API token the stack is started with.
const apiToken = "e2e-token"

// operatorToken is the token timeoutd's operator actions require.
const operatorToken = "e2e-operator-token"

// logTailLines is how many lines of each container's log a failed test prints.
const logTailLines = 300

// stackOptions adjusts a stack.
type stackOptions struct {
	// OrdersEnv and TimeoutdEnv add to or override the services' environment.
	OrdersEnv, TimeoutdEnv map[string]string
	// NATSNodes above 1 runs NATS as a JetStream cluster of that many nodes
	// (nats-1, nats-2, …) with every stream at that many replicas; the
	// services get every node's URL.
	NATSNodes int
	// Timeoutds and Orders above 1 run that many instances of the service
	// (timeoutd-1, timeoutd-2, …; orders-1, …), each timeoutd with its
	// container name as its instance id.
	Timeoutds, Orders int
	// Proxied, when set, names the timeoutd instance whose connections to
	// Postgres and NATS go through a toxiproxy container of the stack
	// (faultProxy); the others connect directly. NATS then advertises no
	// cluster URLs to clients, so the proxied instance cannot reconnect
	// around the proxy.
	Proxied string
	// Tenants, when set, replace the tenant registry of the stack, the
	// compose stack's deploy/compose/tenants.json (orders and
	// reservations): timeoutd reads it (TIMEOUTD_TENANTS_FILE), the expiry
	// stream captures its fire subjects, and with ShippedNATSConf or TLS
	// NATS has its users (a tenant's password_env is set to its
	// natsPassword).
	Tenants []tenants.Tenant
	// Tracing starts the OTLP receiver (jaegerImage) on the stack's network
	// as svcJaeger and turns the services' tracing on, every span sampled
	// and exported within 100 ms; JaegerURL is its query API.
	Tracing bool
	// TLS, when set, runs the stack with TLS everywhere and these
	// certificates, made for the containers' names (stackTLS): NATS with
	// the compose configuration rendered with TLS, Postgres refusing
	// plaintext, every client with verify-full. Not with Proxied.
	TLS *testcerts.Files
	// ShippedNATSConf runs NATS, without TLS, with the configuration the
	// project ships, deploy/compose/nats.conf (its users and their
	// permissions), instead of the image's, which lets anyone do anything:
	// every service of the stack connects as its user, with natsPassword.
	// NATSURL stays anonymous, so a test connects with natsUserURL (or
	// passes a user and natsPassword to its client). TLS implies it.
	ShippedNATSConf bool
	// Patroni runs Postgres as a cluster of three members under Patroni
	// (pg-1, pg-2, pg-3; patroniImage) with a three-member etcd, as in
	// deploy/compose/compose.ha.yaml, and gives the services one
	// multi-host URL that follows the primary (through the fault proxy
	// for the Proxied instance). Not with TLS.
	Patroni bool
	// PGClockOffsets, with Patroni, sets the members' wall clocks that far
	// from the host's, in order (pg-1, pg-2, …; PATRONI_CLOCK_OFFSET, e.g.
	// "+0.25"; "" leaves one alone): members whose clocks differ.
	PGClockOffsets []string
}

// names returns the container names of n instances of svc: svc alone for
// one, svc-1 … svc-n for more.
func names(svc string, n int) []string {
	if n <= 1 {
		return []string{svc}
	}
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%d", svc, i+1)
	}
	return out
}

// stack is Postgres, NATS, orders and timeoutd running as containers on one
// network. Host ports are fixed for the stack's life, so the URLs stay valid
// across Kill, Start and Restart.
type stack struct {
	// OrdersURL is the orders service's root, e.g. http://127.0.0.1:41234.
	OrdersURL string
	// TimeoutdURL is timeoutd's root: its API under /api/v1 and the
	// dashboard at /.
	TimeoutdURL string
	// NATSURL is the client URL of the stack's NATS server.
	NATSURL string
	// JaegerURL is the OTLP receiver's query API, with stackOptions.Tracing.
	JaegerURL string
	// APIToken is a bearer token the orders service accepts.
	APIToken string
	// NATSNodes, Timeoutds and Orders are the container names of the NATS
	// nodes and of the services' instances (see stackOptions).
	NATSNodes, Timeoutds, Orders []string
	// PGNodes are the Postgres containers: svcPostgres, or the members of
	// stackOptions.Patroni.
	PGNodes []string

	// roots maps a service container's name to its HTTP root.
	roots map[string]string
	// timeoutdEnv is the environment of a timeoutd instance, without its
	// instance id (addTimeoutd); instanceEnv adds to it for one instance
	// (the proxied one, a skewed one).
	timeoutdEnv map[string]string
	instanceEnv map[string]map[string]string
	// tenants is the stack's tenant registry (stackOptions.Tenants).
	tenants []tenants.Tenant
	// clientFiles copies the CA and the client certificate of
	// stackOptions.TLS into a service's container (nothing without).
	clientFiles testcontainers.CustomizeRequestOption
	// proxy drives the toxiproxy of stackOptions.Proxied (nil without).
	proxy   *faultProxy
	network *testcontainers.DockerNetwork
	mu      sync.Mutex
	ctrs    map[string]testcontainers.Container
	order   []string // container names in start order
}

// startStack starts a stack of t's own, removed when t ends; when t fails,
// every container's logs are printed first.
func startStack(t *testing.T, opts stackOptions) *stack {
	t.Helper()
	if testing.Short() {
		t.Skip("e2e test: needs Docker and the built images; run without -short (make test)")
	}
	s, err := newStack(context.Background(), opts)
	t.Cleanup(func() { s.terminate() })
	if err != nil {
		s.printLogs(t)
		t.Fatalf("start stack: %v", err)
	}
	s.printLogsOnFailure(t)
	return s
}

var (
	sharedOnce sync.Once
	sharedStk  *stack
	sharedErr  error
)

// sharedStack returns the stack shared by the scenarios that do not disturb
// each other (no kill, no restart), started at the first call and removed by
// TestMain. When t fails, the containers' logs are printed.
func sharedStack(t *testing.T) *stack {
	t.Helper()
	if testing.Short() {
		t.Skip("e2e test: needs Docker and the built images; run without -short (make test)")
	}
	sharedOnce.Do(func() { sharedStk, sharedErr = newStack(context.Background(), stackOptions{}) })
	if sharedErr != nil {
		sharedStk.printLogs(t)
		t.Fatalf("start shared stack: %v", sharedErr)
	}
	sharedStk.printLogsOnFailure(t)
	return sharedStk
}

func TestMain(m *testing.M) {
	code := m.Run()
	if sharedStk != nil {
		sharedStk.terminate()
	}
	os.Exit(code)
}

func newStack(ctx context.Context, opts stackOptions) (*stack, error) {
	s := &stack{APIToken: apiToken, ctrs: map[string]testcontainers.Container{}, roots: map[string]string{},
		instanceEnv: map[string]map[string]string{},
		NATSNodes:   names(svcNATS, opts.NATSNodes), Timeoutds: names(svcTimeoutd, opts.Timeoutds), Orders: names(svcOrders, opts.Orders)}
	imgs := []string{testinfra.PostgresImage, testinfra.NATSImage, ordersImage, timeoutdImage}
	s.PGNodes = []string{svcPostgres}
	if opts.Patroni {
		if opts.TLS != nil {
			return s, errors.New("stackOptions.Patroni: not with TLS")
		}
		imgs[0], s.PGNodes = patroniImage, names("pg", 3)
	}
	if opts.Proxied != "" {
		imgs = append(imgs, toxiproxyImage)
	}
	if opts.Tracing {
		imgs = append(imgs, jaegerImage)
	}
	if err := requireImages(ctx, imgs...); err != nil {
		return s, err
	}
	nw, err := tcnetwork.New(ctx)
	if err != nil {
		return s, fmt.Errorf("create network: %w", err)
	}
	s.network = nw

	initSQL, err := os.ReadFile("../deploy/compose/initdb/10-databases.sql")
	if err != nil {
		return s, fmt.Errorf("read the compose stack's init script: %w", err)
	}
	if s.tenants = opts.Tenants; s.tenants == nil {
		if s.tenants, err = tenants.Load("../deploy/compose/tenants.json"); err != nil {
			return s, err
		}
	}
	tlsOpts := opts.tls(s.tenants)
	if opts.Patroni {
		if err := s.startPatroni(ctx, opts.PGClockOffsets); err != nil {
			return s, err
		}
	} else if err := s.run(ctx, svcPostgres, testinfra.PostgresImage, "5432/tcp",
		testcontainers.WithEnv(map[string]string{"POSTGRES_PASSWORD": "postgres"}),
		testcontainers.WithFiles(testcontainers.ContainerFile{
			Reader: strings.NewReader(string(initSQL)), ContainerFilePath: "/docker-entrypoint-initdb.d/10-databases.sql", FileMode: 0o644,
		}),
		tlsOpts.postgres(),
		// The data of the e2e runs is disposable: trade durability for speed.
		testcontainers.WithCmdArgs("-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off", "-c", "max_connections=300"),
		testcontainers.WithWaitStrategy(wait.ForExec([]string{"pg_isready", "-h", "127.0.0.1", "-U", "postgres", "-d", "timeouts"}).
			WithPollInterval(100*time.Millisecond).WithStartupTimeout(60*time.Second)),
	); err != nil {
		return s, err
	}
	// The nodes of a cluster start together: each waits for its routes.
	var wg sync.WaitGroup
	errs := make([]error, len(s.NATSNodes))
	var inside, outside []string // client URLs on the network and from the host
	natsTLS, err := tlsOpts.nats(len(s.NATSNodes) > 1)
	if err != nil {
		return s, err
	}
	for i, name := range s.NATSNodes {
		args := []string{"-c", "/etc/nats/nats.conf"}
		if opts.TLS != nil {
			args = tlsOpts.natsArgs(name, s.NATSNodes)
		} else if len(s.NATSNodes) > 1 {
			var routes []string
			for _, peer := range s.NATSNodes {
				if peer != name {
					routes = append(routes, "nats://"+peer+":6222")
				}
			}
			args = append(args, "--server_name", name, "--cluster_name", "ordertimeout",
				"--cluster", "nats://0.0.0.0:6222", "--routes", strings.Join(routes, ","))
			if opts.Proxied != "" {
				args = append(args, "--no_advertise")
			}
		}
		wg.Go(func() {
			errs[i] = s.run(ctx, name, testinfra.NATSImage, "4222/tcp",
				testcontainers.WithCmdArgs(args...), natsTLS,
				testcontainers.WithWaitStrategy(wait.ForExec([]string{"/healthcheck", "http://127.0.0.1:8222/healthz?js-enabled-only=true"}).
					WithPollInterval(100*time.Millisecond).WithStartupTimeout(60*time.Second)),
			)
		})
		inside = append(inside, name+":4222")
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return s, err
	}
	for _, name := range s.NATSNodes {
		outside = append(outside, "nats://"+s.hostPort(name))
	}
	s.NATSURL = strings.Join(outside, ",")
	// The services no longer create streams: the bootstrap step does, as in
	// compose.
	prefixes := strings.Join(tenants.FirePrefixes(s.tenants), ",")
	if err := runStreamsBootstrap(ctx, s.network, tlsOpts.natsURL(inside, userBootstrap), len(s.NATSNodes), prefixes, tlsOpts.client("NATS_")); err != nil {
		return s, err
	}

	pg := "postgres://postgres:postgres@" + s.pgHosts(true) + "/"
	orders := map[string]string{
		"ORDERS_DATABASE_URL": pg + "orders?" + s.pgQuery(tlsOpts.pgQuery()),
		"ORDERS_NATS_URL":     tlsOpts.natsURL(inside, userOrders),
		"ORDERS_HTTP_ADDR":    ":8081",
		"ORDERS_API_TOKENS":   apiToken,
		"ORDERS_LOG_LEVEL":    "info",
	}
	timeoutd := map[string]string{
		"TIMEOUTD_DATABASE_URL":  pg + "timeouts?" + s.pgQuery(tlsOpts.pgQuery()),
		"TIMEOUTD_NATS_URL":      tlsOpts.natsURL(inside, userTimeoutd),
		"TIMEOUTD_HTTP_ADDR":     ":8080",
		"TIMEOUTD_DASHBOARD_DIR": "/assets/dashboard",
		"TIMEOUTD_LOG_LEVEL":     "info",
		// Operator actions from the dashboard, forwarded to orders.
		"TIMEOUTD_OPERATOR_TOKEN": operatorToken,
		"TIMEOUTD_ORDERS_URL":     "http://" + s.Orders[0] + ":8081",
		"TIMEOUTD_ORDERS_TOKEN":   apiToken,
	}
	if level := os.Getenv("E2E_SERVICE_LOG_LEVEL"); level != "" { // debug, to read a replay
		orders["ORDERS_LOG_LEVEL"], timeoutd["TIMEOUTD_LOG_LEVEL"] = level, level
	}
	maps.Copy(orders, tlsOpts.clientEnv(ordersdaemon.NATSTLSPrefix))
	maps.Copy(timeoutd, tlsOpts.clientEnv(daemon.NATSTLSPrefix))
	for k, v := range opts.OrdersEnv {
		orders[k] = v
	}
	timeoutd["TIMEOUTD_TENANTS_FILE"] = tenantsFile
	if opts.Tracing {
		if err := s.run(ctx, svcJaeger, jaegerImage, "16686/tcp", testcontainers.WithWaitStrategy(
			wait.ForExec([]string{"/healthcheck", "http://127.0.0.1:13133/status"}).
				WithPollInterval(100*time.Millisecond).WithStartupTimeout(60*time.Second))); err != nil {
			return s, err
		}
		s.JaegerURL = "http://" + s.hostPort(svcJaeger)
		for _, env := range []map[string]string{orders, timeoutd} {
			env["OTEL_EXPORTER_OTLP_ENDPOINT"] = "http://" + svcJaeger + ":4318"
			env["OTEL_TRACES_SAMPLER"] = "always_on"
			env["OTEL_BSP_SCHEDULE_DELAY"] = "100"
		}
	}
	for k, v := range opts.TimeoutdEnv {
		timeoutd[k] = v
	}
	s.timeoutdEnv = timeoutd
	s.clientFiles = tlsOpts.clientFiles()
	if opts.Proxied != "" {
		p, err := s.startFaultProxy(ctx)
		if err != nil {
			return s, err
		}
		s.proxy = p
		s.instanceEnv[opts.Proxied] = p.env(pg + "timeouts?" + s.pgQuery("sslmode=disable"))
	}
	errs = make([]error, len(s.Orders)+len(s.Timeoutds))
	for i, name := range s.Orders {
		wg.Go(func() {
			errs[i] = s.run(ctx, name, ordersImage, "8081/tcp", testcontainers.WithEnv(orders), s.clientFiles, readyz("8081/tcp"))
		})
	}
	for i, name := range s.Timeoutds {
		wg.Go(func() { errs[len(s.Orders)+i] = s.startTimeoutd(ctx, name) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return s, err
	}
	for _, name := range s.Orders {
		s.roots[name] = "http://" + s.hostPort(name)
	}
	s.OrdersURL = s.roots[s.Orders[0]]
	s.TimeoutdURL = s.roots[s.Timeoutds[0]]
	return s, nil
}

// startTimeoutd starts a timeoutd instance named name (its instance id)
// and waits until it is ready.
func (s *stack) startTimeoutd(ctx context.Context, name string) error {
	env := map[string]string{"TIMEOUTD_INSTANCE_ID": name}
	for k, v := range s.timeoutdEnv {
		env[k] = v
	}
	s.mu.Lock()
	for k, v := range s.instanceEnv[name] {
		env[k] = v
	}
	s.mu.Unlock()
	registry := testcontainers.WithFiles(testcontainers.ContainerFile{Reader: bytes.NewReader(tenants.Marshal(s.tenants)), ContainerFilePath: tenantsFile, FileMode: 0o644})
	if err := s.run(ctx, name, timeoutdImage, "8080/tcp", testcontainers.WithEnv(env), s.clientFiles, registry, readyz("8080/tcp")); err != nil {
		return err
	}
	s.mu.Lock()
	s.roots[name] = "http://" + s.hostPortLocked(name)
	s.mu.Unlock()
	return nil
}

// runStreamsBootstrap runs the streams bootstrap of the NATS image
// (/streams, deploy/streams) on nw against natsURL, with every stream at
// replicas and the fire subject prefixes given (comma-separated; "" for
// the default), as compose's "streams" service does before the services
// start, and returns an error with its log unless it exited 0. opts adjust
// its container (TLS files and settings).
func runStreamsBootstrap(ctx context.Context, nw *testcontainers.DockerNetwork, natsURL string, replicas int, prefixes string, opts ...testcontainers.ContainerCustomizer) error {
	env := map[string]string{"NATS_URL": natsURL, "STREAMS_TIMEOUT": "45s", "STREAMS_REPLICAS": fmt.Sprint(replicas)}
	if prefixes != "" {
		env["STREAMS_FIRE_SUBJECT_PREFIXES"] = prefixes
	}
	ctr, err := testcontainers.Run(ctx, testinfra.NATSImage, append([]testcontainers.ContainerCustomizer{
		tcnetwork.WithNetwork([]string{"streams"}, nw),
		testcontainers.WithEntrypoint("/streams"),
		testcontainers.WithEnv(env),
		testcontainers.WithWaitStrategy(wait.ForExit().WithPollInterval(100 * time.Millisecond).WithExitTimeout(60 * time.Second)),
	}, opts...)...)
	if ctr != nil {
		defer func() { _ = ctr.Terminate(context.Background()) }()
	}
	if err != nil {
		var logs string
		if ctr != nil {
			logs = testinfra.Logs(ctr)
		}
		return fmt.Errorf("run the streams bootstrap (%s /streams): %w\n%s", testinfra.NATSImage, err, logs)
	}
	st, err := ctr.State(ctx)
	if err != nil {
		return fmt.Errorf("streams bootstrap state: %w", err)
	}
	if st.ExitCode != 0 {
		return fmt.Errorf("streams bootstrap exited %d:\n%s", st.ExitCode, testinfra.Logs(ctr))
	}
	return nil
}

// readyz waits until the service's /readyz answers 2xx.
func readyz(port string) testcontainers.CustomizeRequestOption {
	return testcontainers.WithWaitStrategy(wait.ForHTTP("/readyz").WithPort(port).
		WithPollInterval(100 * time.Millisecond).WithStartupTimeout(90 * time.Second))
}

// run starts the container name from img on the stack's network, with port
// published on a free loopback port chosen now and kept across restarts.
func (s *stack) run(ctx context.Context, name, img, port string, opts ...testcontainers.ContainerCustomizer) error {
	hostPort, err := freePort()
	if err != nil {
		return err
	}
	p := network.MustParsePort(port)
	opts = append([]testcontainers.ContainerCustomizer{
		tcnetwork.WithNetwork([]string{name}, s.network),
		testcontainers.WithExposedPorts(port),
		testcontainers.WithHostConfigModifier(func(hc *container.HostConfig) {
			hc.PortBindings = network.PortMap{p: {{HostIP: netip.MustParseAddr("127.0.0.1"), HostPort: hostPort}}}
		}),
		testcontainers.WithLabels(map[string]string{"ordertimeout.e2e.port": hostPort}),
	}, opts...)
	ctr, err := testcontainers.Run(ctx, img, opts...)
	if ctr != nil {
		s.mu.Lock()
		s.ctrs[name] = ctr
		s.order = append(s.order, name)
		s.mu.Unlock()
	}
	if err != nil {
		return fmt.Errorf("start %s (%s): %w", name, img, err)
	}
	return nil
}

// hostPort returns 127.0.0.1:<published port> of a container of the stack.
func (s *stack) hostPort(name string) string {
	return hostPortOf(s.container(name))
}

func (s *stack) hostPortLocked(name string) string { return hostPortOf(s.ctrs[name]) }

func hostPortOf(ctr testcontainers.Container) string {
	info, err := ctr.Inspect(context.Background())
	if err != nil {
		return "127.0.0.1:0"
	}
	return "127.0.0.1:" + info.Config.Labels["ordertimeout.e2e.port"]
}

func (s *stack) container(name string) testcontainers.Container {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ctrs[name]
}

// freePort returns a TCP port free on the loopback interface right now.
func freePort() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("find a free port: %w", err)
	}
	defer l.Close()
	_, port, _ := net.SplitHostPort(l.Addr().String())
	return port, nil
}

// requireImages fails with the command to run when an image is missing: the
// suite never builds or pulls images itself.
func requireImages(ctx context.Context, imgs ...string) error {
	cli, err := testcontainers.NewDockerClientWithOpts(ctx)
	if err != nil {
		return fmt.Errorf("docker: %w (run scripts/ensure-docker.sh)", err)
	}
	defer cli.Close()
	var missing []string
	for _, img := range imgs {
		if _, err := cli.ImageInspect(ctx, img); err != nil {
			missing = append(missing, img)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("missing image(s) %s: build them with `make images` (scripts/images.sh)", strings.Join(missing, ", "))
	}
	return nil
}

// orders returns a client of the stack's orders service.
func (s *stack) orders() *ordersclient.ClientWithResponses {
	return newOrdersClient(s.OrdersURL, s.APIToken, ordersHTTP)
}

// ordersHTTP is the HTTP client of the suite's orders clients: a timeout,
// and idle connections for the load tests' concurrency.
var ordersHTTP = &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 64}}

// newOrdersClient returns a client of the orders API at baseURL through hc
// that sends token as its bearer token, or none when token is empty.
func newOrdersClient(baseURL, token string, hc *http.Client) *ordersclient.ClientWithResponses {
	opts := []ordersclient.ClientOption{ordersclient.WithHTTPClient(hc)}
	if token != "" {
		opts = append(opts, ordersclient.WithBearerToken(token))
	}
	cl, err := ordersclient.NewClientWithResponses(baseURL, opts...)
	if err != nil {
		panic(err) // only an option can fail, and these do not
	}
	return cl
}

// Kill sends SIGKILL to the container name (svcTimeoutd, svcOrders, …) and
// waits until it has exited.
func (s *stack) Kill(t *testing.T, name string) {
	t.Helper()
	s.docker(t, func(ctx context.Context, cli *client.Client, id string) error {
		_, err := cli.ContainerKill(ctx, id, client.ContainerKillOptions{Signal: "KILL"})
		return err
	}, "kill "+name, name)
	waitFor(t, 30*time.Second, name+" to exit", func() bool {
		st, err := s.container(name).State(context.Background())
		return err == nil && !st.Running
	})
}

// Start starts the stopped or killed container name again, without waiting
// for it to be ready, and returns the time its process started.
func (s *stack) Start(t *testing.T, name string) time.Time {
	t.Helper()
	s.docker(t, func(ctx context.Context, cli *client.Client, id string) error {
		_, err := cli.ContainerStart(ctx, id, client.ContainerStartOptions{})
		return err
	}, "start "+name, name)
	info, err := s.container(name).Inspect(context.Background())
	if err != nil {
		t.Fatalf("inspect %s: %v", name, err)
	}
	started, err := time.Parse(time.RFC3339Nano, info.State.StartedAt)
	if err != nil {
		t.Fatalf("%s start time %q: %v", name, info.State.StartedAt, err)
	}
	return started
}

// Restart stops the container name (SIGTERM, then SIGKILL after 10 s) and
// starts it again, waiting until it is ready. Data volumes are kept.
func (s *stack) Restart(t *testing.T, name string) {
	t.Helper()
	ctx := context.Background()
	timeout := 10 * time.Second
	if err := s.container(name).Stop(ctx, &timeout); err != nil {
		t.Fatalf("stop %s: %v", name, err)
	}
	if err := s.container(name).Start(ctx); err != nil {
		t.Fatalf("start %s again: %v", name, err)
	}
}

// Stop stops the container name gracefully (SIGTERM, then SIGKILL after
// 20 s) and waits until it has exited.
func (s *stack) Stop(t *testing.T, name string) {
	t.Helper()
	timeout := 20 * time.Second
	if err := s.container(name).Stop(context.Background(), &timeout); err != nil {
		t.Fatalf("stop %s: %v", name, err)
	}
}

// Pause freezes every process of the container name (docker pause): it
// keeps its connections and its state, and does nothing until Unpause.
func (s *stack) Pause(t *testing.T, name string) {
	t.Helper()
	s.docker(t, func(ctx context.Context, cli *client.Client, id string) error {
		// The cgroup freezer gives up when the container's processes do
		// not stop in time (runc: "unable to freeze"), as on a loaded
		// machine: the container runs on, and the pause is tried again.
		for attempt := 1; ; attempt++ {
			_, err := cli.ContainerPause(ctx, id, client.ContainerPauseOptions{})
			if err == nil || attempt == 5 || !strings.Contains(err.Error(), "unable to freeze") {
				return err
			}
			t.Logf("pause %s: %v; trying again", name, err)
		}
	}, "pause "+name, name)
}

// Unpause thaws the container name frozen by Pause.
func (s *stack) Unpause(t *testing.T, name string) {
	t.Helper()
	s.docker(t, func(ctx context.Context, cli *client.Client, id string) error {
		_, err := cli.ContainerUnpause(ctx, id, client.ContainerUnpauseOptions{})
		return err
	}, "unpause "+name, name)
}

// docker runs op on the container name with a Docker client, failing t
// with what on an error.
func (s *stack) docker(t *testing.T, op func(context.Context, *client.Client, string) error, what, name string) {
	t.Helper()
	ctx := context.Background()
	cli, err := testcontainers.NewDockerClientWithOpts(ctx)
	if err != nil {
		t.Fatalf("docker: %v", err)
	}
	defer cli.Close()
	if err := op(ctx, cli.Client, s.container(name).GetContainerID()); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// Disconnect cuts the container name off the stack's network (docker
// network disconnect): its connections hang, nothing reaches it, it reaches
// nothing, and it keeps running.
func (s *stack) Disconnect(t *testing.T, name string) {
	t.Helper()
	s.docker(t, func(ctx context.Context, cli *client.Client, id string) error {
		_, err := cli.NetworkDisconnect(ctx, s.network.ID, client.NetworkDisconnectOptions{Container: id, Force: true})
		return err
	}, "disconnect "+name, name)
}

// Reconnect connects the container name, cut off by Disconnect, to the
// stack's network again under its name.
func (s *stack) Reconnect(t *testing.T, name string) {
	t.Helper()
	s.docker(t, func(ctx context.Context, cli *client.Client, id string) error {
		_, err := cli.NetworkConnect(ctx, s.network.ID, client.NetworkConnectOptions{Container: id,
			EndpointConfig: &network.EndpointSettings{Aliases: []string{name}}})
		return err
	}, "reconnect "+name, name)
}

// replaceTimeoutd removes the timeoutd instance name (SIGKILL) and starts
// a new container of the same name with env added to its environment (for
// this and every later start), waiting until it is ready.
func (s *stack) replaceTimeoutd(ctx context.Context, name string, env map[string]string) error {
	s.mu.Lock()
	old := s.ctrs[name]
	delete(s.ctrs, name)
	s.order = slices.DeleteFunc(s.order, func(n string) bool { return n == name })
	merged := maps.Clone(s.instanceEnv[name])
	if merged == nil {
		merged = map[string]string{}
	}
	maps.Copy(merged, env)
	s.instanceEnv[name] = merged
	s.mu.Unlock()
	if err := old.Terminate(ctx, testcontainers.StopTimeout(0)); err != nil {
		return fmt.Errorf("remove %s: %w", name, err)
	}
	return s.startTimeoutd(ctx, name)
}

// waitReady polls url (a /readyz) until it answers 2xx and returns when it
// did; it fails t after timeout.
func waitReady(t *testing.T, url string, timeout time.Duration) time.Time {
	t.Helper()
	c := http.Client{Timeout: time.Second}
	var at time.Time
	waitFor(t, timeout, url+" to answer 2xx", func() bool {
		resp, err := c.Get(url)
		if err != nil {
			return false
		}
		resp.Body.Close()
		at = time.Now()
		return resp.StatusCode/100 == 2
	})
	return at
}

func (s *stack) terminate() {
	s.mu.Lock()
	defer s.mu.Unlock()
	ctx := context.Background()
	for i := len(s.order) - 1; i >= 0; i-- {
		_ = s.ctrs[s.order[i]].Terminate(ctx, testcontainers.StopTimeout(time.Second))
	}
	s.ctrs = map[string]testcontainers.Container{}
	s.order = nil
	if s.network != nil {
		_ = s.network.Remove(ctx)
		s.network = nil
	}
}

// printLogsOnFailure prints the containers' logs when t fails. With
// E2E_LOGS_DIR set it writes every container's whole log to
// <dir>/<test>/<name>.log instead, whatever the outcome (to read what the
// services did in a run that passed), and prints only where: CI sets it, so
// that a failing test's own errors stay at the end of its output.
func (s *stack) printLogsOnFailure(t *testing.T) {
	t.Helper()
	t.Cleanup(func() {
		if dir := os.Getenv("E2E_LOGS_DIR"); dir != "" {
			s.saveLogs(t, filepath.Join(dir, t.Name()))
			return
		}
		if t.Failed() {
			s.printLogs(t)
		}
	})
}

// saveLogs writes every container's whole log to dir/<name>.log.
func (s *stack) saveLogs(t *testing.T, dir string) {
	t.Helper()
	if s == nil {
		return
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Logf("save logs: %v", err)
		return
	}
	s.mu.Lock()
	names := append([]string(nil), s.order...)
	s.mu.Unlock()
	for _, name := range names {
		if err := os.WriteFile(filepath.Join(dir, name+".log"), []byte(testinfra.Logs(s.container(name))), 0o644); err != nil {
			t.Logf("save logs of %s: %v", name, err)
		}
	}
	t.Logf("container logs in %s", dir)
}

// printLogs logs the last logTailLines lines of every container of s.
func (s *stack) printLogs(t *testing.T) {
	t.Helper()
	if s == nil {
		return
	}
	s.mu.Lock()
	names := append([]string(nil), s.order...)
	s.mu.Unlock()
	for _, name := range names {
		t.Logf("==== logs of %s (last %d lines) ====\n%s", name, logTailLines, tail(testinfra.Logs(s.container(name)), logTailLines))
	}
}

// tail returns the last n lines of text.
func tail(text string, n int) string {
	var lines []string
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// waitFor polls cond every 50 ms until it holds, failing t with what after
// timeout.
func waitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	waitForExplained(t, timeout, what, cond, nil)
}

// waitForExplained is waitFor whose failure also says what explain, when
// given, finds (where the awaited thing stands).
func waitForExplained(t testing.TB, timeout time.Duration, what string, cond func() bool, explain func() string) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			if explain != nil {
				t.Fatalf("timed out after %s waiting for %s: %s", timeout, what, explain())
			}
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
