// Command natsconf writes a NATS server configuration from the platform's
// template and tenant registry (package natsconf): by default the compose
// stack's plaintext deploy/compose/nats.conf, as go generate
// ./deploy/natsconf runs it. The -tls-* flags render the TLS form, e.g. for
// a cluster whose nodes find their files under /etc/nats/tls:
//
//	go run ./deploy/natsconf/cmd/natsconf -out nats-tls.conf -cluster \
//	    -tls-cert /etc/nats/tls/server.crt -tls-key /etc/nats/tls/server.key -tls-ca /etc/nats/tls/ca.crt
//
// -add adds a tenant to the registry first, with its fire subject
// prefixes (-fire) and a new random password whose bcrypt hash goes into
// the registry; the password is printed once, on stdout. The NATS image
// ships this command as /natsconf, which scripts/tenant-add.sh runs, so
// adding a tenant needs no Go:
//
//	natsconf -add billing -fire billing.due. -tenants deploy/compose/tenants.json
package main

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"flag"
	"fmt"
	"os"
	"strings"

	"golang.org/x/crypto/bcrypt"

	"github.com/ordertimeout/ordertimeout/deploy/natsconf"
	"github.com/ordertimeout/ordertimeout/internal/tenants"
)

func main() {
	in := flag.String("in", "deploy/compose/nats.conf.tmpl", "the template")
	out := flag.String("out", "deploy/compose/nats.conf", "the configuration to write")
	registry := flag.String("tenants", "deploy/compose/tenants.json", "the tenant registry")
	add := flag.String("add", "", "add this tenant to the registry (with -fire) before rendering, with a new password printed on stdout")
	fire := flag.String("fire", "", "with -add: the tenant's fire subject prefixes, comma-separated, each ending in '.'")
	var tls natsconf.TLS
	flag.StringVar(&tls.CertFile, "tls-cert", "", "the server's certificate (PEM) as the server sees it; with -tls-key and -tls-ca it turns TLS on")
	flag.StringVar(&tls.KeyFile, "tls-key", "", "the server certificate's key (PEM)")
	flag.StringVar(&tls.CAFile, "tls-ca", "", "the CA certificates (PEM) that sign the routes' and the clients' certificates")
	flag.BoolVar(&tls.VerifyClients, "tls-verify-clients", false, "require clients to present a certificate the CA signed")
	flag.BoolVar(&tls.Cluster, "cluster", false, "add the cluster block: routes with TLS and the route user (NATS_ROUTE_PASSWORD)")
	flag.Parse()
	if err := run(*in, *out, *registry, *add, *fire, tls); err != nil {
		fmt.Fprintln(os.Stderr, "natsconf:", err)
		os.Exit(1)
	}
}

func run(in, out, registry, add, fire string, tls natsconf.TLS) error {
	text, err := os.ReadFile(in)
	if err != nil {
		return err
	}
	ts, err := tenants.Load(registry)
	if err != nil {
		return err
	}
	var password string
	if add != "" {
		if ts, password, err = addTenant(ts, add, fire); err != nil {
			return err
		}
	} else if fire != "" {
		return fmt.Errorf("-fire goes with -add")
	}
	var t *natsconf.TLS
	if tls != (natsconf.TLS{}) {
		t = &tls
	}
	var buf bytes.Buffer
	if err := natsconf.Render(&buf, string(text), ts, t); err != nil {
		return err
	}
	// Both files are rewritten in place, not replaced, so that a server
	// or a service that mounts one file alone sees the new content.
	if add != "" {
		if err := os.WriteFile(registry, tenants.Marshal(ts), 0o644); err != nil {
			return err
		}
	}
	if err := os.WriteFile(out, buf.Bytes(), 0o644); err != nil {
		return err
	}
	if add != "" {
		fmt.Printf("tenant %s added; its NATS user %s has the password %s (shown once: keep it in the service's secrets)\n", add, add, password)
	}
	return nil
}

// addTenant returns ts with the tenant name added, and its new password.
func addTenant(ts []tenants.Tenant, name, fire string) ([]tenants.Tenant, string, error) {
	if fire == "" {
		return nil, "", fmt.Errorf("-add %s needs -fire, its fire subject prefixes", name)
	}
	var raw [18]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return nil, "", err
	}
	password := base64.RawURLEncoding.EncodeToString(raw[:])
	hash, err := bcrypt.GenerateFromPassword([]byte(password), 11)
	if err != nil {
		return nil, "", err
	}
	var prefixes []string
	for _, p := range strings.Split(fire, ",") {
		prefixes = append(prefixes, strings.TrimSpace(p))
	}
	ts, err = tenants.Add(ts, tenants.Tenant{Name: name, FirePrefixes: prefixes, PasswordBcrypt: string(hash)})
	return ts, password, err
}
