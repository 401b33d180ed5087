package natshealth_test

import (
	"bufio"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/ordertimeout/ordertimeout/internal/natshealth"
)

// TestAFrozenNATSNodeIsLeftForAnother: the node a service is connected to
// freezes (its connections open, nothing answered: a paused VM, a stalled
// disk). The health ping notices within half the grace and the client
// reconnects to the next node of its list, so that NATS never goes
// unanswered for the grace (a timeoutd keeps its partitions instead of
// handing them all over). Without the forced reconnect the client stays
// on the frozen node (its own pings come every two minutes).
func TestAFrozenNATSNodeIsLeftForAnother(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a NATS server")
	}
	o := &server.Options{Host: "127.0.0.1", Port: -1, NoSigs: true, NoLog: true}
	live, err := server.NewServer(o)
	if err != nil {
		t.Fatal(err)
	}
	live.Start()
	t.Cleanup(live.Shutdown)
	if !live.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server did not start")
	}
	frozen := newFreezableServer(t)
	nc, err := nats.Connect(frozen.url+","+live.ClientURL(), nats.DontRandomize(), nats.MaxReconnects(-1),
		nats.ReconnectWait(250*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	if nc.ConnectedUrl() != frozen.url {
		t.Fatalf("connected to %s; want the first of the list, %s", nc.ConnectedUrl(), frozen.url)
	}
	const grace = time.Second
	var ok atomic.Int64
	ok.Store(time.Now().UnixNano())
	go natshealth.Watch(t.Context(), nc, grace, func() { ok.Store(time.Now().UnixNano()) }, slog.New(slog.NewTextHandler(io.Discard, nil)))
	healthy := func() bool { return time.Since(time.Unix(0, ok.Load())) < grace }

	frozen.freeze()
	for deadline := time.Now().Add(10 * grace); nc.ConnectedUrl() != live.ClientURL() || time.Since(time.Unix(0, ok.Load())) > grace/4; {
		if !healthy() {
			t.Fatalf("NATS unanswered for the grace (%v) after its node froze; connected to %s", grace, nc.ConnectedUrl())
		}
		if time.Now().After(deadline) {
			t.Fatalf("still connected to %s %v after its node froze; want %s", nc.ConnectedUrl(), 10*grace, live.ClientURL())
		}
		time.Sleep(grace / 20) // the instance's rounds read healthy about this often
	}
}

// freezableServer speaks enough of the NATS protocol for a client to
// connect (INFO, then a PONG to its first PING), then, once frozen, reads
// and answers nothing more, its connections left open.
type freezableServer struct {
	url    string
	frozen atomic.Bool
}

func newFreezableServer(t *testing.T) *freezableServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	f := &freezableServer{url: "nats://" + ln.Addr().String()}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { c.Close() })
			go f.serve(c)
		}
	}()
	return f
}

func (f *freezableServer) freeze() { f.frozen.Store(true) }

func (f *freezableServer) serve(c net.Conn) {
	if f.frozen.Load() {
		return // accepted by the kernel, never greeted
	}
	if _, err := io.WriteString(c, `INFO {"server_id":"frozen","version":"2.10.0","proto":1,"max_payload":1048576}`+"\r\n"); err != nil {
		return
	}
	r := bufio.NewReader(c)
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return
		}
		if strings.HasPrefix(line, "PING") && !f.frozen.Load() {
			if _, err := io.WriteString(c, "PONG\r\n"); err != nil {
				return
			}
		}
	}
}
