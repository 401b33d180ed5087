// Package jscluster runs a JetStream cluster of three nats-servers inside
// a test binary, for tests of what only a replicated stream does. It is
// apart from package testinfra so that only the tests that need it link
// the server.
package jscluster

import (
	"fmt"
	"net"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ordertimeout/ordertimeout/internal/testinfra"
)

// Cluster is a JetStream cluster of three nats-servers run in the test
// binary (the server's own Go module, the code the images build), for the
// behaviour only a replicated stream has: its leader admits a message that
// expects a subject's last sequence only once the one before it on that
// subject is committed by the replicas, and an atomic batch is staged
// until its commit.
type Cluster struct {
	// URLs are the three servers' client URLs, comma-separated.
	URLs    string
	servers []*server.Server
}

// Start starts the three servers for t, each with JetStream in
// a directory of t's and the batch limit of the platform's configuration
// (deploy/images/nats/nats.conf), and returns once the cluster has a meta
// leader; they are shut down when t ends. The second and third route to
// the others.
func Start(t testing.TB) *Cluster {
	t.Helper()
	if testing.Short() {
		t.Skip("runs a NATS cluster (-short)")
	}
	c := &Cluster{}
	// The route ports are chosen before the start, so that each server is
	// given the others' routes; a port taken meanwhile fails the start.
	ports := make([]int, 3)
	var routes []*url.URL
	for i := range ports {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ports[i] = l.Addr().(*net.TCPAddr).Port
		l.Close()
		routes = append(routes, &url.URL{Scheme: "nats", Host: fmt.Sprintf("127.0.0.1:%d", ports[i])})
	}
	var urls []string
	for i := range ports {
		o := &server.Options{
			ServerName: fmt.Sprintf("n%d", i+1), Host: "127.0.0.1", Port: -1, NoSigs: true, NoLog: true,
			JetStream: true, StoreDir: t.TempDir(),
			JetStreamLimits: server.JSLimitOpts{MaxBatchInflightPerStream: 256},
			Cluster:         server.ClusterOpts{Name: "test", Host: "127.0.0.1", Port: ports[i]},
			Routes:          routes,
		}
		s, err := server.NewServer(o)
		if err != nil {
			t.Fatalf("nats-server %d: %v", i+1, err)
		}
		go s.Start()
		t.Cleanup(s.Shutdown)
		c.servers = append(c.servers, s)
	}
	for i, s := range c.servers {
		if !s.ReadyForConnections(30 * time.Second) {
			t.Fatalf("nats-server %d did not start", i+1)
		}
		urls = append(urls, s.ClientURL())
	}
	c.URLs = strings.Join(urls, ",")
	js := c.JetStream(t)
	for deadline := time.Now().Add(30 * time.Second); ; {
		if _, err := js.AccountInfo(t.Context()); err == nil {
			return c
		} else if time.Now().After(deadline) {
			t.Fatalf("the NATS cluster has no JetStream meta leader after 30 s: %v", err)
		}
		time.Sleep(50 * time.Millisecond) // the meta group elects a leader within a few hundred ms
	}
}

// JetStream connects to the cluster and returns a JetStream client on the
// connection, which is closed when t ends.
func (c *Cluster) JetStream(t testing.TB) jetstream.JetStream {
	t.Helper()
	return testinfra.JetStream(t, c.URLs)
}
