package pgparams

import (
	"context"
	"errors"
	"net"
	"net/url"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/ordertimeout/ordertimeout/internal/testinfra"
)

// clock is a settable clock for the memory of hosts.
type clock struct{ t atomic.Int64 }

func (c *clock) now() time.Time          { return time.Unix(0, c.t.Load()) }
func (c *clock) advance(d time.Duration) { c.t.Add(int64(d)) }

// order returns the hosts, all on port 5432, in the order h gives a new
// connection.
func order(h *hosts, hostNames ...string) []string {
	cc := &pgconn.Config{Host: hostNames[0], Port: 5432}
	for _, n := range hostNames[1:] {
		cc.Fallbacks = append(cc.Fallbacks, &pgconn.FallbackConfig{Host: n, Port: 5432})
	}
	h.order(cc)
	out := []string{cc.Host}
	for _, fb := range cc.Fallbacks {
		out = append(out, fb.Host)
	}
	return out
}

func TestANewConnectionTriesTheHostsInTheOrderTheirLastOutcomesGive(t *testing.T) {
	t.Parallel()
	// Each case records outcomes on a, b, c (addresses 10.0.0.1-3), then
	// reads the order a new connection tries them in.
	type event func(h *hosts, c *clock)
	lookedUp := func(name, addr string) event {
		return func(h *hosts, _ *clock) {
			_, _ = h.lookup(func(context.Context, string) ([]string, error) { return []string{addr}, nil })(context.Background(), name)
		}
	}
	lookupFails := func(name string) event {
		return func(h *hosts, _ *clock) {
			_, _ = h.lookup(func(context.Context, string) ([]string, error) { return nil, errors.New("no such host") })(context.Background(), name)
		}
	}
	set := func(addr string, f func(s *addrState, now time.Time)) event {
		return func(h *hosts, _ *clock) { f(h.state(addr+":5432"), h.now()) }
	}
	answered := func(addr string, r hostRank) event {
		return set(addr, func(s *addrState, now time.Time) { s.answered, s.at, s.waitingSince = r, now, time.Time{} })
	}
	dialFailed := func(addr string) event { return set(addr, func(s *addrState, now time.Time) { s.failedAt = now }) }
	dialed := func(addr string) event { return set(addr, func(s *addrState, now time.Time) { s.waitingSince = now }) }
	wait := func(d time.Duration) event { return func(_ *hosts, c *clock) { c.advance(d) } }
	names := []event{lookedUp("a", "10.0.0.1"), lookedUp("b", "10.0.0.2"), lookedUp("c", "10.0.0.3")}
	for _, tt := range []struct {
		name   string
		events []event
		want   []string
	}{
		{"nothing known: the URL's order", nil, []string{"a", "b", "c"}},
		{"the host that took writes first", append(names, answered("10.0.0.3", rankWrites)), []string{"c", "a", "b"}},
		{"standbys after those not known", append(names, answered("10.0.0.1", rankStandby)), []string{"b", "c", "a"}},
		{"a failed dial last, after standbys", append(names, answered("10.0.0.1", rankWrites), wait(time.Millisecond), dialFailed("10.0.0.1"),
			answered("10.0.0.2", rankStandby)), []string{"c", "b", "a"}},
		{"a dial failed before its last answer counts for nothing", append(names, dialFailed("10.0.0.2"), wait(time.Millisecond),
			answered("10.0.0.2", rankWrites)), []string{"b", "a", "c"}},
		{"a name whose lookup failed last", append(names, answered("10.0.0.1", rankWrites), lookupFails("a")), []string{"b", "c", "a"}},
		{"a name looked up again is ranked by its session", append(names, lookupFails("a"), wait(hostRecheck), lookedUp("a", "10.0.0.1"),
			answered("10.0.0.1", rankWrites)), []string{"a", "b", "c"}},
		{"a session unanswered for a second: failed", append(names, answered("10.0.0.1", rankWrites), dialed("10.0.0.1"), wait(hostRecheck)),
			[]string{"b", "c", "a"}},
		{"a session in its first second keeps the rank", append(names, answered("10.0.0.1", rankWrites), dialed("10.0.0.1"),
			wait(hostRecheck-time.Millisecond)), []string{"a", "b", "c"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := &clock{}
			c.t.Store(time.Hour.Nanoseconds())
			h := newHosts(c.now)
			for _, e := range tt.events {
				e(h, c)
			}
			if got := order(h, "a", "b", "c"); !slices.Equal(got, tt.want) {
				t.Fatalf("order %v, want %v", got, tt.want)
			}
		})
	}
}

func TestAFailedLookupIsAnsweredFromMemoryForASecond(t *testing.T) {
	t.Parallel()
	c := &clock{}
	h := newHosts(c.now)
	var calls atomic.Int32
	noSuchHost := errors.New("no such host")
	lookup := h.lookup(func(context.Context, string) ([]string, error) {
		if calls.Add(1) == 1 {
			return nil, noSuchHost
		}
		return []string{"10.0.0.1"}, nil
	})
	for _, step := range []struct {
		after     time.Duration
		wantErr   bool
		wantCalls int32
	}{{0, true, 1}, {hostRecheck - time.Millisecond, true, 1}, {time.Millisecond, false, 2}, {0, false, 3}} {
		c.advance(step.after)
		_, err := lookup(context.Background(), "a")
		if (err != nil) != step.wantErr || step.wantErr && !errors.Is(err, noSuchHost) {
			t.Fatalf("after %v: err %v, want an error: %v", step.after, err, step.wantErr)
		}
		if n := calls.Load(); n != step.wantCalls {
			t.Fatalf("after %v: %d lookups, want %d", step.after, n, step.wantCalls)
		}
	}
	// The caller giving up proves nothing of the name.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	h2 := newHosts(c.now)
	_, _ = h2.lookup(func(ctx context.Context, _ string) ([]string, error) { return nil, ctx.Err() })(ctx, "a")
	if _, remembered := h2.lookups["a"]; remembered {
		t.Fatal("a lookup the caller gave up on was remembered as failed")
	}
}

// silentServer accepts connections and never answers, like a frozen
// server or a proxy whose upstream is gone; it returns its address.
func silentServer(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		var held []net.Conn // open, unanswered, until the listener closes
		defer func() {
			for _, c := range held {
				c.Close()
			}
		}()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			held = append(held, c)
		}
	}()
	return l.Addr().String()
}

// A server that accepts and never answers, first in the URL, costs the
// first connection its connect_timeout; the pool then tries it last, so
// the next connection goes to the live server at once.
func TestASilentHostIsTriedLastOnceItFailed(t *testing.T) {
	t.Parallel()
	u, err := url.Parse(testinfra.Postgres(t))
	if err != nil {
		t.Fatal(err)
	}
	u.Host = silentServer(t) + "," + u.Host
	q := u.Query()
	q.Set("connect_timeout", "1")
	u.RawQuery = q.Encode()
	pool, err := Pool{URL: u.String(), MaxConns: 2}.Open(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	took := func() time.Duration {
		t.Helper()
		start := time.Now()
		c, err := pool.Acquire(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		d := time.Since(start)
		c.Release()
		pool.Reset() // the next acquire connects anew
		return d
	}
	if d := took(); d < time.Second {
		t.Fatalf("the first connection took %v: the silent host was not tried first", d)
	}
	for i := range 3 {
		if d := took(); d > 700*time.Millisecond {
			t.Fatalf("connection %d took %v: the silent host was tried first again", i+2, d)
		}
	}
}
