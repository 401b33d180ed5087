package e2e

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go"
	"github.com/testcontainers/testcontainers-go"

	"github.com/ordertimeout/ordertimeout/deploy/natsconf"
	"github.com/ordertimeout/ordertimeout/internal/tenants"
	"github.com/ordertimeout/ordertimeout/internal/testcerts"
	"github.com/ordertimeout/ordertimeout/internal/tlsclient"
	"github.com/ordertimeout/ordertimeout/pkg/events"
	"github.com/ordertimeout/ordertimeout/pkg/ordersclient"
)

// TestTLS runs the stack with TLS switched on by configuration alone,
// with certificates made now: NATS as a 3-node cluster whose clients and
// routes need TLS (the compose configuration rendered with TLS by
// deploy/natsconf, mutual TLS for clients, the route user on routes),
// Postgres refusing plaintext (deploy/compose/initdb/20-tls.sh), and every
// client with verify-full. A plaintext NATS client, a NATS client without
// a certificate, and a Postgres connection with sslmode=disable are
// refused; an order with a short deadline is cancelled end to end, over
// connections that Postgres reports encrypted.
func TestTLS(t *testing.T) {
	t.Parallel()
	hosts := []string{svcPostgres, "localhost", "127.0.0.1"}
	hosts = append(hosts, names(svcNATS, 3)...)
	certs, err := testcerts.Write(t.TempDir(), hosts...)
	if err != nil {
		t.Fatal(err)
	}
	s := startStack(t, stackOptions{NATSNodes: 3, TLS: &certs})
	ctx := t.Context()

	t.Run("nats refuses plaintext", func(t *testing.T) {
		for _, addr := range strings.Split(strings.ReplaceAll(s.NATSURL, "nats://", ""), ",") {
			// The server's INFO, in plaintext, asks for TLS; then it closes.
			if answer := plaintextNATS(t, addr); strings.Contains(answer, "PONG") || !strings.Contains(answer, `"tls_required":true`) {
				t.Errorf("%s answered a plaintext client %q, want an INFO requiring TLS and no PONG", addr, answer)
			}
		}
	})
	t.Run("nats refuses a client without a certificate", func(t *testing.T) {
		opts, err := tlsclient.Files{CAFile: certs.CA}.NATS("")
		if err != nil {
			t.Fatal(err)
		}
		if nc, err := nats.Connect(natsUserURL(s.NATSURL, userObserver), opts...); err == nil {
			nc.Close()
			t.Fatal("connected without a client certificate")
		}
	})
	t.Run("nats accepts a client with the CA and a certificate", func(t *testing.T) {
		nc, err := nats.Connect(natsUserURL(s.NATSURL, userObserver), observerTLS(t, certs)...)
		if err != nil {
			t.Fatalf("connect over TLS: %v", err)
		}
		defer nc.Close()
		if !nc.TLSRequired() {
			t.Fatal("the server does not require TLS")
		}
	})
	t.Run("postgres refuses sslmode=disable", func(t *testing.T) {
		conn, err := pgx.Connect(ctx, s.pgURL("timeouts"))
		if err == nil {
			conn.Close(ctx)
			t.Fatal("connected with sslmode=disable")
		}
		t.Logf("sslmode=disable refused: %v", err)
	})

	cl := s.orders()
	o := createOrder(t, cl, within(2*time.Second))
	var got ordersclient.Order
	waitForExplained(t, time.Until(o.PayBy.Add(tlsCancelBound)), "the order to be cancelled", func() bool {
		got, err = ordersclient.OrderOf(cl.GetOrderWithResponse(ctx, o.ID))
		if err == nil && got.Status != events.StatusPendingPayment && time.Now().Before(o.PayBy) {
			t.Fatalf("order %s is %s before its deadline %s", o.ID, got.Status, o.PayBy)
		}
		return err == nil && got.Status == events.StatusCancelled
	}, func() string {
		return fmt.Sprintf("order %s, last read %+v, %v; %s", o.ID, got, err,
			s.cancelTrail(ctx, o, natsUserURL(s.NATSURL, userObserver), observerTLS(t, certs)...))
	})
	t.Logf("order cancelled %s after its deadline (read by polling every 50 ms)", time.Since(o.PayBy).Round(time.Millisecond))
	if got.CancelReason != events.CancelPaymentTimeout {
		t.Fatalf("order cancelled with reason %q, want %q", got.CancelReason, events.CancelPaymentTimeout)
	}

	// Every connection of the services to Postgres is encrypted.
	conn, err := pgx.Connect(ctx, strings.Replace(s.pgURL("timeouts"), "sslmode=disable", "sslmode=verify-full&sslrootcert="+certs.CA, 1))
	if err != nil {
		t.Fatalf("connect with verify-full: %v", err)
	}
	defer conn.Close(ctx)
	var services, plain int
	err = conn.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE NOT coalesce(s.ssl, false))
		FROM pg_stat_activity a LEFT JOIN pg_stat_ssl s USING (pid)
		WHERE a.datname IN ('orders', 'timeouts') AND a.backend_type = 'client backend' AND a.pid <> pg_backend_pid()`).Scan(&services, &plain)
	if err != nil {
		t.Fatal(err)
	}
	if services == 0 || plain != 0 {
		t.Fatalf("%d connections of the services to Postgres, %d of them in plaintext; want some, none in plaintext", services, plain)
	}
}

// tlsCancelBound bounds, after its deadline, the cancellation of TestTLS's
// order. The test proves the chain works over TLS, not how fast: the bound
// is generous for a loaded 2-core machine running another stack beside it
// (the lateness is measured by the benchmarks and the chaos run).
const tlsCancelBound = 30 * time.Second

// observerTLS is the observer's NATS options on a TLS stack: the CA, the
// client certificate and its inbox prefix.
func observerTLS(t *testing.T, certs testcerts.Files) []nats.Option {
	t.Helper()
	opts, err := tlsclient.Files{CAFile: certs.CA, CertFile: certs.ClientCert, KeyFile: certs.ClientKey}.NATS("")
	if err != nil {
		t.Fatal(err)
	}
	return append(opts, nats.CustomInboxPrefix(inboxOf[userObserver]))
}

// plaintextNATS speaks the NATS client protocol in plaintext to addr
// (CONNECT, then PING) and returns what the server answered until it
// closed the connection or went quiet for a second.
func plaintextNATS(t *testing.T, addr string) string {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := fmt.Fprintf(conn, "CONNECT {\"user\":%q,\"pass\":%q,\"verbose\":false}\r\nPING\r\n", userObserver, natsPassword(userObserver)); err != nil {
		return err.Error()
	}
	_ = conn.SetReadDeadline(time.Now().Add(time.Second))
	answer, err := io.ReadAll(conn)
	return string(answer) + " " + fmt.Sprint(err)
}

// natsUserURL returns urls (comma-separated nats://host:port) with user
// and its natsPassword in each.
func natsUserURL(urls, user string) string {
	return strings.ReplaceAll(urls, "nats://", fmt.Sprintf("nats://%s:%s@", user, natsPassword(user)))
}

// natsPassword is the password of a NATS user (one of
// deploy/compose/nats.conf, or route) of a stack with TLS or
// ShippedNATSConf.
func natsPassword(user string) string { return "tls-" + user + "-pw" }

// natsPasswordVar matches the password variables of a NATS configuration,
// NATS_<USER>_PASSWORD.
var natsPasswordVar = regexp.MustCompile(`\$NATS_([A-Z_]+)_PASSWORD`)

// tlsDir is where a TLS stack's containers find their certificates.
const tlsDir = "/tls"

// stackTLS makes the containers' options of a stack with TLS
// (stackOptions.TLS); without TLS (certs nil) each adds nothing but, with
// auth (stackOptions.ShippedNATSConf), NATS's configuration and its users.
type stackTLS struct {
	certs *testcerts.Files
	// tenants are the tenants whose users NATS has.
	tenants []tenants.Tenant
	// auth: NATS runs the shipped configuration, and clients connect as
	// their users.
	auth bool
}

func (o stackOptions) tls(ts []tenants.Tenant) stackTLS {
	return stackTLS{certs: o.TLS, tenants: ts, auth: o.TLS != nil || o.ShippedNATSConf}
}

// noop is an option that changes nothing.
func noop(*testcontainers.GenericContainerRequest) error { return nil }

// files copies the CA and the server's (or the client's) certificate and
// key into a container under tlsDir, readable by its user.
func (c stackTLS) files(server bool) []testcontainers.ContainerFile {
	cert, key := c.certs.ClientCert, c.certs.ClientKey
	if server {
		cert, key = c.certs.ServerCert, c.certs.ServerKey
	}
	var out []testcontainers.ContainerFile
	for _, f := range []string{c.certs.CA, cert, key} {
		out = append(out, testcontainers.ContainerFile{HostFilePath: f, ContainerFilePath: tlsDir + "/" + filepath.Base(f), FileMode: 0o644})
	}
	return out
}

// postgres turns TLS on in the Postgres container as the compose stack
// does: its init script, the server's certificate and their variables.
func (c stackTLS) postgres() testcontainers.CustomizeRequestOption {
	if c.certs == nil {
		return noop
	}
	return func(req *testcontainers.GenericContainerRequest) error {
		script := testcontainers.ContainerFile{HostFilePath: "../deploy/compose/initdb/20-tls.sh",
			ContainerFilePath: "/docker-entrypoint-initdb.d/20-tls.sh", FileMode: 0o755}
		if err := testcontainers.WithFiles(append(c.files(true), script)...)(req); err != nil {
			return err
		}
		return testcontainers.WithEnv(map[string]string{"POSTGRES_TLS_CERT_FILE": tlsDir + "/" + testcerts.ServerCertName,
			"POSTGRES_TLS_KEY_FILE": tlsDir + "/" + testcerts.ServerKeyName})(req)
	}
}

// nats returns the option of a NATS node: the compose configuration
// rendered with TLS (clients must present a certificate; with cluster,
// routes need TLS and the route user) at /etc/nats/tls.conf, the server's
// certificate, and the passwords of every user it names; with auth alone,
// deploy/compose/nats.conf in place of the image's /etc/nats/nats.conf and
// the passwords.
func (c stackTLS) nats(cluster bool) (testcontainers.CustomizeRequestOption, error) {
	if !c.auth {
		return noop, nil
	}
	var conf bytes.Buffer
	var files []testcontainers.ContainerFile
	path := "/etc/nats/nats.conf"
	tmpl, err := os.ReadFile("../deploy/compose/nats.conf.tmpl")
	if err != nil {
		return nil, err
	}
	if c.certs == nil {
		// The shipped deploy/compose/nats.conf, with the stack's tenants.
		if err := natsconf.Render(&conf, string(tmpl), c.tenants, nil); err != nil {
			return nil, err
		}
	} else {
		if err := natsconf.Render(&conf, string(tmpl), c.tenants, &natsconf.TLS{CertFile: tlsDir + "/" + testcerts.ServerCertName,
			KeyFile: tlsDir + "/" + testcerts.ServerKeyName, CAFile: tlsDir + "/" + testcerts.CAName, VerifyClients: true, Cluster: cluster}); err != nil {
			return nil, err
		}
		files, path = c.files(true), "/etc/nats/tls.conf"
	}
	return func(req *testcontainers.GenericContainerRequest) error {
		files := append(files, testcontainers.ContainerFile{Reader: bytes.NewReader(conf.Bytes()), ContainerFilePath: path, FileMode: 0o644})
		if err := testcontainers.WithFiles(files...)(req); err != nil {
			return err
		}
		passwords := map[string]string{}
		for _, m := range natsPasswordVar.FindAllStringSubmatch(conf.String(), -1) {
			passwords[m[0][1:]] = natsPassword(strings.ToLower(m[1]))
		}
		return testcontainers.WithEnv(passwords)(req)
	}, nil
}

// natsArgs are the command line of the NATS node name of nodes with TLS:
// its name and, in a cluster, its routes to the others as the route user
// (the configuration holds the rest of the cluster block).
func (c stackTLS) natsArgs(name string, nodes []string) []string {
	args := []string{"-c", "/etc/nats/tls.conf", "--server_name", name}
	var routes []string
	for _, peer := range nodes {
		if peer != name {
			routes = append(routes, fmt.Sprintf("nats://route:%s@%s:6222", natsPassword("route"), peer))
		}
	}
	if len(routes) > 0 {
		args = append(args, "--routes", strings.Join(routes, ","))
	}
	return args
}

// natsURL returns the NATS URL of a client of the stack from the nodes'
// host:port: as user (with its password) with TLS or auth, anonymous
// without.
func (c stackTLS) natsURL(hostPorts []string, user string) string {
	urls := "nats://" + strings.Join(hostPorts, ",nats://")
	if !c.auth {
		return urls
	}
	return natsUserURL(urls, user)
}

// pgQuery is the query of the services' Postgres URLs.
func (c stackTLS) pgQuery() string {
	if c.certs == nil {
		return "sslmode=disable"
	}
	return "sslmode=verify-full&sslrootcert=" + tlsDir + "/" + testcerts.CAName
}

// clientEnv is a NATS client's TLS settings under prefix (such as
// ORDERS_NATS_): the CA and the client certificate of clientFiles.
func (c stackTLS) clientEnv(prefix string) map[string]string {
	if c.certs == nil {
		return nil
	}
	return map[string]string{prefix + "CA_FILE": tlsDir + "/" + testcerts.CAName,
		prefix + "CERT_FILE": tlsDir + "/" + testcerts.ClientCertName, prefix + "KEY_FILE": tlsDir + "/" + testcerts.ClientKeyName}
}

// clientFiles copies the CA and the client certificate into a client's
// container.
func (c stackTLS) clientFiles() testcontainers.CustomizeRequestOption {
	if c.certs == nil {
		return noop
	}
	return testcontainers.WithFiles(c.files(false)...)
}

// client is the option of a NATS client container whose TLS settings are
// read under prefix: its files and its settings.
func (c stackTLS) client(prefix string) testcontainers.CustomizeRequestOption {
	return func(req *testcontainers.GenericContainerRequest) error {
		if err := c.clientFiles()(req); err != nil {
			return err
		}
		return testcontainers.WithEnv(c.clientEnv(prefix))(req)
	}
}
