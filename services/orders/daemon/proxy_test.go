package daemon_test

import (
	"bytes"
	"net"
	"sync"
	"testing"
)

// dbProxy is a TCP proxy in front of Postgres that a test can take down
// and bring back, as a failover does to the primary the daemon knew: down
// closes every connection and holds new ones unanswered (a host that does
// not answer: the client waits for its connect_timeout); up forwards again.
// It can also lose the answer to one commit, for an ambiguous outcome.
type dbProxy struct {
	ln     net.Listener
	target string

	mu    sync.Mutex
	down  bool
	conns map[net.Conn]struct{} // forwarded, both ends, and held
	// marker, when set, arms loseCommitAfter: the first connection that
	// sends it and then a commit gets no more answers.
	marker []byte
}

// newDBProxy starts a proxy to target (host:port), closed when t ends.
func newDBProxy(t *testing.T, target string) *dbProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &dbProxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	t.Cleanup(func() {
		ln.Close()
		p.setDown(true)
	})
	go p.serve()
	return p
}

// Addr is the proxy's listen address.
func (p *dbProxy) Addr() string { return p.ln.Addr().String() }

func (p *dbProxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		p.conns[c] = struct{}{}
		down := p.down
		p.mu.Unlock()
		if down {
			continue // held until setDown(false) closes it
		}
		go p.forward(c)
	}
}

// setDown takes the database down (true) or brings it back; either way the
// connections open now are closed.
func (p *dbProxy) setDown(down bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = down
	for c := range p.conns {
		c.Close()
		delete(p.conns, c)
	}
}

// loseCommitAfter makes the first connection that sends marker and then a
// commit lose the server's answers from that commit on: the transaction
// commits, its client never learns it.
func (p *dbProxy) loseCommitAfter(marker string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.marker = []byte(marker)
}

func (p *dbProxy) forward(c net.Conn) {
	s, err := net.Dial("tcp", p.target)
	if err != nil {
		c.Close()
		return
	}
	p.mu.Lock()
	if _, ok := p.conns[c]; !ok { // closed meanwhile
		p.mu.Unlock()
		s.Close()
		return
	}
	p.conns[s] = struct{}{}
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		delete(p.conns, c)
		delete(p.conns, s)
		p.mu.Unlock()
	}()
	var mu sync.Mutex
	marked, mute := false, false
	go func() {
		defer c.Close()
		defer s.Close()
		buf := make([]byte, 32<<10)
		for {
			n, err := s.Read(buf)
			if err != nil {
				return
			}
			mu.Lock()
			muted := mute
			mu.Unlock()
			if !muted {
				if _, err := c.Write(buf[:n]); err != nil {
					return
				}
			}
		}
	}()
	defer c.Close()
	defer s.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := c.Read(buf)
		if err != nil {
			return
		}
		p.mu.Lock()
		if p.marker != nil {
			if !marked && bytes.Contains(buf[:n], p.marker) {
				marked = true
			} else if marked && bytes.Contains(buf[:n], []byte("commit")) {
				mu.Lock()
				mute = true
				mu.Unlock()
				p.marker = nil
			}
		}
		p.mu.Unlock()
		if _, err := s.Write(buf[:n]); err != nil {
			return
		}
	}
}
