// Command natsconf writes a NATS server configuration from the platform's
// template (package natsconf): by default the compose stack's plaintext
// deploy/compose/nats.conf, as go generate ./deploy/natsconf runs it. The
// -tls-* flags render the TLS form, e.g. for a cluster whose nodes find
// their files under /etc/nats/tls:
//
//	go run ./deploy/natsconf/cmd/natsconf -out nats-tls.conf -cluster \
//	    -tls-cert /etc/nats/tls/server.crt -tls-key /etc/nats/tls/server.key -tls-ca /etc/nats/tls/ca.crt
package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"

	"github.com/ordertimeout/ordertimeout/deploy/natsconf"
)

func main() {
	in := flag.String("in", "deploy/compose/nats.conf.tmpl", "the template")
	out := flag.String("out", "deploy/compose/nats.conf", "the configuration to write")
	var tls natsconf.TLS
	flag.StringVar(&tls.CertFile, "tls-cert", "", "the server's certificate (PEM) as the server sees it; with -tls-key and -tls-ca it turns TLS on")
	flag.StringVar(&tls.KeyFile, "tls-key", "", "the server certificate's key (PEM)")
	flag.StringVar(&tls.CAFile, "tls-ca", "", "the CA certificates (PEM) that sign the routes' and the clients' certificates")
	flag.BoolVar(&tls.VerifyClients, "tls-verify-clients", false, "require clients to present a certificate the CA signed")
	flag.BoolVar(&tls.Cluster, "cluster", false, "add the cluster block: routes with TLS and the route user (NATS_ROUTE_PASSWORD)")
	flag.Parse()
	if err := run(*in, *out, tls); err != nil {
		fmt.Fprintln(os.Stderr, "natsconf:", err)
		os.Exit(1)
	}
}

func run(in, out string, tls natsconf.TLS) error {
	text, err := os.ReadFile(in)
	if err != nil {
		return err
	}
	var t *natsconf.TLS
	if tls != (natsconf.TLS{}) {
		t = &tls
	}
	var buf bytes.Buffer
	if err := natsconf.Render(&buf, string(text), t); err != nil {
		return err
	}
	return os.WriteFile(out, buf.Bytes(), 0o644)
}
