// Package natsconf renders the NATS server configuration of the platform
// from its template, deploy/compose/nats.conf.tmpl, and the tenant
// registry, deploy/compose/tenants.json (internal/tenants): the
// template's rights on the command streams are repeated for each
// partition's stream (events.CommandStreams), each tenant gets its user
// and permissions, timeoutd the right to publish on every tenant's fire
// subjects, and the subject mappings that file each command under its
// partition come from pkg/events. With a TLS input the
// configuration also requires TLS of clients and, for a cluster, of routes
// with the route user (cluster authorization).
//
// The compose stack's deploy/compose/nats.conf is the plaintext rendering;
// its test fails when the committed file differs from it:
//
//	go generate ./deploy/natsconf
//
// A TLS configuration is rendered by cmd/natsconf with -tls-* flags
// (docs/OPERATIONS.md, "TLS"); the e2e suite renders one with Render.
package natsconf

//go:generate go run ./cmd/natsconf -in ../compose/nats.conf.tmpl -tenants ../compose/tenants.json -out ../compose/nats.conf

import (
	"fmt"
	"io"
	"text/template"

	"github.com/ordertimeout/ordertimeout/internal/tenants"
	"github.com/ordertimeout/ordertimeout/pkg/events"
)

// TLS is a server's TLS input: paths of PEM files as the server sees them.
type TLS struct {
	// CertFile and KeyFile are the server's certificate and its key; in a
	// cluster the certificate is also the node's client certificate on its
	// routes, so it needs both the serverAuth and clientAuth extended key
	// usages.
	CertFile, KeyFile string
	// CAFile holds the CA certificates that sign the peers' certificates
	// (the routes', and the clients' with VerifyClients).
	CAFile string
	// VerifyClients requires every client to present a certificate that
	// CAFile signs (mutual TLS).
	VerifyClients bool
	// Cluster adds the cluster block: routes on 6222 with TLS both ways
	// and the route user, whose password is NATS_ROUTE_PASSWORD in the
	// server's environment. Each node then gets --server_name and --routes
	// on its command line.
	Cluster bool
}

// data is what the template reads.
type data struct {
	// CommandStreams names every partition's command stream.
	CommandStreams []string
	// Legacy names the single command stream they replace.
	Legacy string
	// MappingSource and MappingDestination are the orders tenant's command
	// mapping, TenantMappingSource and TenantMappingDestination the other
	// tenants'.
	MappingSource, MappingDestination             string
	TenantMappingSource, TenantMappingDestination string
	// Orders is the orders tenant; Tenants are the others, in the
	// registry's order; FirePrefixes are every tenant's fire subject
	// prefixes.
	Orders       tenants.Tenant
	Tenants      []tenants.Tenant
	FirePrefixes []string
	// TLS, when set, is rendered as the tls and cluster blocks.
	TLS *TLS
}

// Render executes the template text, whose actions are delimited by [[ ]]
// ({{ }} belongs to NATS's subject mapping), with the tenants ts (checked
// by tenants.Check) into w; tls nil renders a plaintext configuration.
func Render(w io.Writer, text string, ts []tenants.Tenant, tls *TLS) error {
	if tls != nil && (tls.CertFile == "" || tls.KeyFile == "" || tls.CAFile == "") {
		return fmt.Errorf("natsconf: TLS needs CertFile, KeyFile and CAFile, got %+v", *tls)
	}
	if err := tenants.Check(ts); err != nil {
		return fmt.Errorf("natsconf: %w", err)
	}
	var orders tenants.Tenant
	var others []tenants.Tenant
	for _, t := range ts {
		if t.Name == events.OrdersTenant {
			orders = t
		} else {
			others = append(others, t)
		}
	}
	t, err := template.New("nats.conf").Delims("[[", "]]").Option("missingkey=error").Parse(text)
	if err != nil {
		return fmt.Errorf("parse template: %w", err)
	}
	return t.Execute(w, data{
		CommandStreams:           events.CommandStreams(),
		Legacy:                   events.StreamCommandsLegacy,
		MappingSource:            events.CommandMappingSource,
		MappingDestination:       events.CommandMappingDestination,
		TenantMappingSource:      events.TenantCommandMappingSource,
		TenantMappingDestination: events.TenantCommandMappingDestination,
		Orders:                   orders,
		Tenants:                  others,
		FirePrefixes:             tenants.FirePrefixes(ts),
		TLS:                      tls,
	})
}
