package natsconf

import (
	"bytes"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/ordertimeout/ordertimeout/internal/tenants"
	"github.com/ordertimeout/ordertimeout/internal/testcerts"
	"github.com/ordertimeout/ordertimeout/internal/tlsclient"
	"github.com/ordertimeout/ordertimeout/pkg/events"
)

// TestConfIsGenerated keeps deploy/compose/nats.conf in step with its
// template and with pkg/events: run go generate ./deploy/natsconf when it
// fails.
func TestConfIsGenerated(t *testing.T) {
	t.Parallel()
	text, err := os.ReadFile("../compose/nats.conf.tmpl")
	if err != nil {
		t.Fatal(err)
	}
	var want bytes.Buffer
	if err := Render(&want, string(text), shippedTenants(t), nil); err != nil {
		t.Fatal(err)
	}
	have, err := os.ReadFile("../compose/nats.conf")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(have, want.Bytes()) {
		t.Fatal("deploy/compose/nats.conf differs from its template: run go generate ./deploy/natsconf")
	}
	for _, s := range []string{events.CommandStream(0), events.CommandStream(events.Partitions - 1)} {
		if !strings.Contains(want.String(), `"$JS.ACK.`+s+`.*.>"`) {
			t.Errorf("nats.conf gives timeoutd no ack right on %s", s)
		}
	}
}

// TestImageConfDeclaresTheMapping checks that the NATS image's default
// configuration, which the integration tests run, files commands under
// their partition as the compose stack's does.
func TestImageConfDeclaresTheMapping(t *testing.T) {
	t.Parallel()
	conf, err := os.ReadFile("../images/nats/nats.conf")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"` + events.CommandMappingSource + `": "` + events.CommandMappingDestination + `"`,
		`"` + events.TenantCommandMappingSource + `": "` + events.TenantCommandMappingDestination + `"`} {
		if !strings.Contains(string(conf), want) {
			t.Fatalf("deploy/images/nats/nats.conf lacks the mapping %s", want)
		}
	}
}

// shippedTenants returns the tenant registry of the compose stack,
// deploy/compose/tenants.json.
func shippedTenants(t *testing.T) []tenants.Tenant {
	t.Helper()
	ts, err := tenants.Load("../compose/tenants.json")
	if err != nil {
		t.Fatal(err)
	}
	return ts
}

// routePassword is NATS_ROUTE_PASSWORD while the configuration is parsed.
const routePassword = "route-pw"

// passwordVar matches the password variables of a configuration.
var passwordVar = regexp.MustCompile(`\$(NATS_[A-Z_]+_PASSWORD)`)

// parse renders the template with tls into a file and parses it with
// nats-server's own configuration parser, every password variable it
// names set (NATS_ROUTE_PASSWORD to routePassword).
func parse(t *testing.T, tls *TLS) (string, *server.Options) {
	t.Helper()
	text, err := os.ReadFile("../compose/nats.conf.tmpl")
	if err != nil {
		t.Fatal(err)
	}
	var conf bytes.Buffer
	if err := Render(&conf, string(text), shippedTenants(t), tls); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "nats.conf")
	if err := os.WriteFile(path, conf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, m := range passwordVar.FindAllStringSubmatch(conf.String(), -1) {
		t.Setenv(m[1], strings.ToLower(m[1]))
	}
	t.Setenv("NATS_ROUTE_PASSWORD", routePassword)
	opts, err := server.ProcessConfigFile(path)
	if err != nil {
		t.Fatalf("nats-server refuses the rendered configuration: %v", err)
	}
	return conf.String(), opts
}

// TestTLSBlocks renders the template with each TLS input and checks what
// nats-server reads from it: no TLS and no cluster block without input,
// client TLS (verifying clients when asked), and routes with TLS both ways
// and the route user with Cluster.
func TestTLSBlocks(t *testing.T) {
	certs, err := testcerts.Write(t.TempDir(), "nats")
	if err != nil {
		t.Fatal(err)
	}
	files := TLS{CertFile: certs.ServerCert, KeyFile: certs.ServerKey, CAFile: certs.CA}
	withVerify, withCluster := files, files
	withVerify.VerifyClients = true
	withCluster.Cluster = true
	tests := []struct {
		name                            string
		tls                             *TLS
		wantTLS, wantVerify, wantRoutes bool
	}{
		{name: "plaintext"},
		{name: "clients", tls: &files, wantTLS: true},
		{name: "clients with certificates", tls: &withVerify, wantTLS: true, wantVerify: true},
		{name: "cluster", tls: &withCluster, wantTLS: true, wantRoutes: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			text, o := parse(t, tt.tls)
			if got := o.TLSConfig != nil; got != tt.wantTLS {
				t.Errorf("client TLS = %v, want %v", got, tt.wantTLS)
			}
			if got := o.TLSConfig != nil && o.TLSConfig.ClientAuth == tls.RequireAndVerifyClientCert; got != tt.wantVerify {
				t.Errorf("clients' certificates verified = %v, want %v", got, tt.wantVerify)
			}
			if got := o.Cluster.Port != 0; got != tt.wantRoutes {
				t.Errorf("cluster listens = %v, want %v", got, tt.wantRoutes)
			}
			if tt.wantRoutes {
				if o.Cluster.TLSConfig == nil || o.Cluster.TLSConfig.ClientAuth != tls.RequireAndVerifyClientCert {
					t.Errorf("routes' TLS = %+v, want TLS verifying the peer", o.Cluster.TLSConfig)
				}
				if o.Cluster.Username != "route" || o.Cluster.Password != routePassword {
					t.Errorf("cluster authorization = %q/%q, want the route user and NATS_ROUTE_PASSWORD", o.Cluster.Username, o.Cluster.Password)
				}
			}
			if want := strings.Count(text, "{ user: "); len(o.Users) != want || want == 0 || strings.Contains(text, "[[") {
				t.Errorf("users = %d, want the %d of the template; leftover actions: %v", len(o.Users), want, strings.Contains(text, "[["))
			}
		})
	}
	if err := Render(io.Discard, "", shippedTenants(t), &TLS{CertFile: "c"}); err == nil || !strings.Contains(err.Error(), "KeyFile") {
		t.Errorf("TLS without its key: err = %v, want one naming KeyFile", err)
	}
}

// TestRoutesNeedTLSAndTheRouteUser runs two nodes of the rendered cluster
// configuration in-process: the second joins the first over TLS as the
// route user; a route connection in plaintext, or over TLS with a wrong
// password, is refused.
func TestRoutesNeedTLSAndTheRouteUser(t *testing.T) {
	certs, err := testcerts.Write(t.TempDir(), "localhost", "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	_, opts := parse(t, &TLS{CertFile: certs.ServerCert, KeyFile: certs.ServerKey, CAFile: certs.CA, Cluster: true})
	node := func(name string, routes ...string) *server.Server {
		o := opts.Clone()
		o.ServerName, o.Host, o.Port, o.HTTPPort, o.JetStream = name, "127.0.0.1", -1, 0, false
		o.Cluster.Host, o.Cluster.Port, o.NoSigs = "127.0.0.1", -1, true
		o.Routes = server.RoutesFromStr(strings.Join(routes, ","))
		s, err := server.NewServer(o)
		if err != nil {
			t.Fatal(err)
		}
		s.Start()
		t.Cleanup(s.Shutdown)
		if !s.ReadyForConnections(10 * time.Second) {
			t.Fatalf("node %s did not start", name)
		}
		return s
	}
	a := node("a")
	addr := a.ClusterAddr().String()
	node("b", "nats://route:"+routePassword+"@"+addr)
	deadline := time.Now().Add(10 * time.Second)
	for a.NumRoutes() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("b did not route to a over TLS as the route user")
		}
		time.Sleep(20 * time.Millisecond)
	}

	clientTLS, err := tlsclient.Files{CAFile: certs.CA, CertFile: certs.ServerCert, KeyFile: certs.ServerKey}.Config("")
	if err != nil {
		t.Fatal(err)
	}
	clientTLS.ServerName = "localhost"
	tests := []struct {
		name string
		tls  *tls.Config
		pass string
		want string // in the answer; PONG only when accepted
	}{
		{"plaintext", nil, routePassword, ""},
		{"TLS, wrong password", clientTLS, "guess", "Authorization Violation"},
		{"TLS, the route user", clientTLS, routePassword, "PONG"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			answer := routeConnect(t, addr, tt.tls, tt.pass)
			if strings.Contains(answer, "PONG") != (tt.want == "PONG") || !strings.Contains(answer, tt.want) {
				t.Fatalf("route connection answered %q, want %q", answer, tt.want)
			}
		})
	}
}

// routeConnect opens a route connection to addr as the route user with
// pass, over TLS when c is set (routes start TLS at once, before INFO),
// sends CONNECT and PING, and returns what the server answered until it
// closed the connection or went quiet for a second.
func routeConnect(t *testing.T, addr string, c *tls.Config, pass string) string {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	if c != nil {
		tc := tls.Client(conn, c)
		if err := tc.Handshake(); err != nil {
			return err.Error()
		}
		conn = tc
	}
	if _, err := fmt.Fprintf(conn, "CONNECT {\"user\":\"route\",\"pass\":%q,\"tls_required\":%t,\"name\":\"rogue\",\"cluster\":\"ordertimeout\"}\r\nPING\r\n", pass, c != nil); err != nil {
		return err.Error()
	}
	_ = conn.SetReadDeadline(time.Now().Add(time.Second))
	answer, err := io.ReadAll(conn)
	return string(answer) + " " + fmt.Sprint(err)
}
