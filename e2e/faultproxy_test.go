package e2e

import (
	"context"
	"fmt"
	"strings"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2/client"
	"github.com/testcontainers/testcontainers-go"
	"github.com/testcontainers/testcontainers-go/wait"
)

// faultProxy is the stack's toxiproxy (stackOptions.Proxied): one proxy to
// each Postgres member and one to each NATS node, which the proxied timeoutd instance
// connects through. Toxics added to them act on that instance's
// connections alone; the other instances connect directly.
type faultProxy struct {
	api *toxiproxy.Client
	// pg are the Postgres members' proxies and nats the NATS nodes', in
	// the order of stack.PGNodes and stack.NATSNodes; pgHosts is the host
	// list of the members' URL, and proxyHosts that of their proxies.
	pg, nats            []*toxiproxy.Proxy
	pgHosts, proxyHosts string
}

// Ports the proxies listen on inside the toxiproxy container.
const (
	proxyPGBasePort   = 15432
	proxyNATSBasePort = 14221
)

// startFaultProxy starts the toxiproxy container on the stack's network,
// its API published on a loopback port, and creates the proxies to the
// stack's Postgres and NATS nodes.
func (s *stack) startFaultProxy(ctx context.Context) (*faultProxy, error) {
	if err := s.run(ctx, svcProxy, toxiproxyImage, "8474/tcp",
		testcontainers.WithWaitStrategy(wait.ForHTTP("/version").WithPort("8474/tcp").
			WithPollInterval(100*time.Millisecond).WithStartupTimeout(30*time.Second)),
	); err != nil {
		return nil, err
	}
	p := &faultProxy{api: toxiproxy.NewClient("http://" + s.hostPort(svcProxy)), pgHosts: s.pgHosts(true)}
	var proxyHosts []string
	for i, node := range s.PGNodes {
		pp, err := p.api.CreateProxy(node, fmt.Sprintf("0.0.0.0:%d", proxyPGBasePort+i), node+":5432")
		if err != nil {
			return nil, fmt.Errorf("toxiproxy: create the proxy of %s: %w", node, err)
		}
		p.pg = append(p.pg, pp)
		proxyHosts = append(proxyHosts, fmt.Sprintf("%s:%d", svcProxy, proxyPGBasePort+i))
	}
	p.proxyHosts = strings.Join(proxyHosts, ",")
	for i, node := range s.NATSNodes {
		np, err := p.api.CreateProxy(node, fmt.Sprintf("0.0.0.0:%d", proxyNATSBasePort+i), node+":4222")
		if err != nil {
			return nil, fmt.Errorf("toxiproxy: create the proxy of %s: %w", node, err)
		}
		p.nats = append(p.nats, np)
	}
	return p, nil
}

// env returns the proxied instance's TIMEOUTD_DATABASE_URL (pgURL, a URL of
// the stack's Postgres by its members' names, rewritten to their proxies) and
// TIMEOUTD_NATS_URL (every NATS node through its proxy).
func (p *faultProxy) env(pgURL string) map[string]string {
	var nats []string
	for i := range p.nats {
		nats = append(nats, fmt.Sprintf("nats://%s:%d", svcProxy, proxyNATSBasePort+i))
	}
	return map[string]string{
		"TIMEOUTD_DATABASE_URL": strings.Replace(pgURL, "@"+p.pgHosts+"/", "@"+p.proxyHosts+"/", 1),
		"TIMEOUTD_NATS_URL":     strings.Join(nats, ","),
	}
}

// proxyTarget is the dependency a toxic acts on.
type proxyTarget string

const (
	toPostgres proxyTarget = "postgres"
	toNATS     proxyTarget = "nats"
)

// proxies returns the proxies of target.
func (p *faultProxy) proxies(target proxyTarget) []*toxiproxy.Proxy {
	if target == toPostgres {
		return p.pg
	}
	return p.nats
}

// toxic is one toxiproxy toxic: its type, the direction it acts on
// ("upstream": client to server; "downstream": server to client) and its
// attributes (toxiproxy's README lists them per type).
type toxic struct {
	Type, Stream string
	Attrs        toxiproxy.Attributes
}

func (x toxic) name() string { return x.Type + "_" + x.Stream }

// withToxic adds x to every proxy of target for hold, then removes it, and
// returns an error if either failed. Toxics act on the connections open
// when they are added and on new ones.
func (p *faultProxy) withToxic(ctx context.Context, target proxyTarget, x toxic, hold time.Duration) error {
	for _, px := range p.proxies(target) {
		if _, err := px.AddToxic(x.name(), x.Type, x.Stream, 1, x.Attrs); err != nil {
			return fmt.Errorf("toxiproxy: add %s to %s: %w", x.name(), px.Name, err)
		}
	}
	select {
	case <-time.After(hold):
	case <-ctx.Done():
	}
	var errs []string
	for _, px := range p.proxies(target) {
		if err := px.RemoveToxic(x.name()); err != nil {
			errs = append(errs, fmt.Sprintf("remove %s from %s: %v", x.name(), px.Name, err))
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("toxiproxy: %s", strings.Join(errs, "; "))
	}
	return ctx.Err()
}
