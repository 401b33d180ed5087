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
// the registry; the password is printed once, on stdout. -remove takes a
// tenant out, and -prefixes with -fire replaces a tenant's prefixes; each
// prints what becomes of the tenant's pending deadlines. The NATS image
// ships this command as /natsconf, which scripts/tenant.sh runs, so
// changing the tenants needs no Go:
//
//	natsconf -add billing -fire billing.due. -tenants deploy/compose/tenants.json
//	natsconf -prefixes billing -fire billing.due.v2. -tenants deploy/compose/tenants.json
//	natsconf -remove billing -tenants deploy/compose/tenants.json
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
	remove := flag.String("remove", "", "remove this tenant from the registry before rendering")
	prefixes := flag.String("prefixes", "", "give this tenant the fire subject prefixes of -fire instead of its own, before rendering")
	fire := flag.String("fire", "", "with -add or -prefixes: the tenant's fire subject prefixes, comma-separated, each ending in '.'")
	var tls natsconf.TLS
	flag.StringVar(&tls.CertFile, "tls-cert", "", "the server's certificate (PEM) as the server sees it; with -tls-key and -tls-ca it turns TLS on")
	flag.StringVar(&tls.KeyFile, "tls-key", "", "the server certificate's key (PEM)")
	flag.StringVar(&tls.CAFile, "tls-ca", "", "the CA certificates (PEM) that sign the routes' and the clients' certificates")
	flag.BoolVar(&tls.VerifyClients, "tls-verify-clients", false, "require clients to present a certificate the CA signed")
	flag.BoolVar(&tls.Cluster, "cluster", false, "add the cluster block: routes with TLS and the route user (NATS_ROUTE_PASSWORD)")
	flag.Parse()
	if err := run(*in, *out, *registry, change{add: *add, remove: *remove, prefixes: *prefixes, fire: *fire}, tls); err != nil {
		fmt.Fprintln(os.Stderr, "natsconf:", err)
		os.Exit(1)
	}
}

// change is what the flags ask of the registry: at most one of add,
// remove and prefixes, with fire for add and prefixes.
type change struct{ add, remove, prefixes, fire string }

func run(in, out, registry string, c change, tls natsconf.TLS) error {
	text, err := os.ReadFile(in)
	if err != nil {
		return err
	}
	ts, err := tenants.Load(registry)
	if err != nil {
		return err
	}
	var password, done string
	switch {
	case (c.add != "") && (c.remove != "" || c.prefixes != "") || c.remove != "" && c.prefixes != "":
		return fmt.Errorf("-add, -remove and -prefixes go one at a time")
	case c.add != "":
		if ts, password, err = addTenant(ts, c.add, c.fire); err != nil {
			return err
		}
		done = fmt.Sprintf("tenant %s added; its NATS user %s has the password %s (shown once: keep it in the service's secrets)", c.add, c.add, password)
	case c.remove != "":
		if c.fire != "" {
			return fmt.Errorf("-fire goes with -add or -prefixes")
		}
		if ts, err = tenants.Remove(ts, c.remove); err != nil {
			return err
		}
		done = fmt.Sprintf("tenant %s removed: its NATS user is gone; its commands still in the streams are dead-lettered unknown_tenant; "+
			"its pending deadlines stay stored and fire no more: each ends at its deadline as a missed event, reason unknown_tenant, on timeouts.missed.%s.<key>", c.remove, c.remove)
	case c.prefixes != "":
		if c.fire == "" {
			return fmt.Errorf("-prefixes %s needs -fire, its new fire subject prefixes", c.prefixes)
		}
		if ts, err = tenants.SetFirePrefixes(ts, c.prefixes, splitPrefixes(c.fire)); err != nil {
			return err
		}
		done = fmt.Sprintf("tenant %s now fires under %s only: its pending deadlines whose fire subject is under none of them end at their deadline as missed events, "+
			"reason subject_not_allowed, on timeouts.missed.%s.<key>; its new commands are checked against these", c.prefixes, c.fire, c.prefixes)
	case c.fire != "":
		return fmt.Errorf("-fire goes with -add or -prefixes")
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
	if done != "" {
		if err := os.WriteFile(registry, tenants.Marshal(ts), 0o644); err != nil {
			return err
		}
	}
	if err := os.WriteFile(out, buf.Bytes(), 0o644); err != nil {
		return err
	}
	if done != "" {
		fmt.Println(done)
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
	ts, err = tenants.Add(ts, tenants.Tenant{Name: name, FirePrefixes: splitPrefixes(fire), PasswordBcrypt: string(hash)})
	return ts, password, err
}

// splitPrefixes returns the comma-separated prefixes of fire.
func splitPrefixes(fire string) []string {
	var prefixes []string
	for _, p := range strings.Split(fire, ",") {
		prefixes = append(prefixes, strings.TrimSpace(p))
	}
	return prefixes
}
