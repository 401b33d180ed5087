package pgparams

import (
	"context"
	"net"
	"net/url"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ordertimeout/ordertimeout/internal/testinfra"
)

func TestOnlyAPoolOfThePrimaryWatchesItsSessions(t *testing.T) {
	t.Parallel()
	tests := []struct {
		attrs string
		want  bool
	}{
		{"", false},
		{"any", false},
		{"read-write", true},
		{"primary", true},
		{"read-only", false},
		{"standby", false},
		{"prefer-standby", false},
	}
	for _, tt := range tests {
		t.Run(tt.attrs, func(t *testing.T) {
			t.Parallel()
			u := "postgres://u:p@a:5432,b:5432/db"
			if tt.attrs != "" {
				u += "?target_session_attrs=" + tt.attrs
			}
			cfg, err := pgconn.ParseConfig(u)
			if err != nil {
				t.Fatal(err)
			}
			if got := primaryOnly(cfg.ValidateConnect); got != tt.want {
				t.Fatalf("primaryOnly = %v, want %v", got, tt.want)
			}
		})
	}
}

// freezableProxy forwards connections to upstream; between freeze and
// thaw it forwards nothing and keeps them open, as a frozen server whose
// kernel still acknowledges does. It returns its address.
func freezableProxy(t *testing.T, upstream string) (addr string, freeze, thaw func()) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var frozen sync.RWMutex // held for writing while frozen
	var mu sync.Mutex
	var held []net.Conn
	t.Cleanup(func() {
		l.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range held {
			c.Close()
		}
	})
	pipe := func(dst, src net.Conn) {
		buf := make([]byte, 32<<10)
		for {
			n, err := src.Read(buf)
			if err != nil {
				dst.Close()
				return
			}
			frozen.RLock()
			_, err = dst.Write(buf[:n])
			frozen.RUnlock()
			if err != nil {
				src.Close()
				return
			}
		}
	}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", upstream)
			if err != nil {
				c.Close()
				continue
			}
			mu.Lock()
			held = append(held, c, up)
			mu.Unlock()
			go pipe(up, c)
			go pipe(c, up)
		}
	}()
	return l.Addr().String(), frozen.Lock, frozen.Unlock
}

// proxiedPool opens a pool of the primary alone (read-write) on two
// hosts: a freezableProxy of the test's Postgres first, then the same
// server directly, with connect_timeout seconds; it closes with t.
func proxiedPool(t *testing.T, connectTimeout int) (pool *pgxpool.Pool, proxy string, freeze, thaw func()) {
	t.Helper()
	u, err := url.Parse(testinfra.Postgres(t))
	if err != nil {
		t.Fatal(err)
	}
	proxy, freeze, thaw = freezableProxy(t, u.Host)
	u.Host = proxy + "," + u.Host
	q := u.Query()
	q.Set("target_session_attrs", "read-write")
	q.Set("connect_timeout", strconv.Itoa(connectTimeout))
	u.RawQuery = q.Encode()
	pool, err = Pool{URL: u.String(), MaxConns: 2}.Open(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool, proxy, freeze, thaw
}

// The primary's sessions are reached through a proxy first in the URL;
// the proxy freezes. A statement waiting on it ends once the pool's probe
// finds the other host taking writes (here the same server, reached
// directly), not at its caller's deadline, and the next one goes there.
func TestASessionWaitingOnAFormerPrimaryEndsOnceAnotherHostTakesWrites(t *testing.T) {
	t.Parallel()
	pool, proxy, freeze, thaw := proxiedPool(t, 1)
	remote := func(ctx context.Context) (string, error) {
		c, err := pool.Acquire(ctx)
		if err != nil {
			return "", err
		}
		defer c.Release()
		if _, err := c.Exec(ctx, "select 1"); err != nil {
			return "", err
		}
		return c.Conn().PgConn().Conn().RemoteAddr().String(), nil
	}
	if r, err := remote(t.Context()); err != nil || r != proxy {
		t.Fatalf("first session on %q (%v), want the proxy %s", r, err, proxy)
	}
	freeze()
	defer thaw() // before the pool closes: pgx's cancel requests of the closed sessions wait on the proxy
	const deadline = 20 * time.Second
	ctx, cancel := context.WithTimeout(t.Context(), deadline)
	defer cancel()
	start := time.Now()
	_, err := pool.Exec(ctx, "select 1")
	if took := time.Since(start); err == nil || took > 5*time.Second {
		t.Fatalf("the statement on the frozen proxy ended after %v (err %v), want an error within 5s, not at its %v deadline", took, err, deadline)
	}
	ctx2, cancel2 := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel2()
	start = time.Now()
	r, err := remote(ctx2)
	if took := time.Since(start); err != nil || r == proxy || took > time.Second {
		t.Fatalf("the next session: on %q after %v (%v), want the other host within 1s", r, took, err)
	}
}

// A new connection whose first host accepts and never answers (frozen
// from the start) moves on to the next once the probe finds it taking
// writes, rather than at its connect_timeout.
func TestAConnectionWaitingOnASilentHostMovesOnOnceAnotherTakesWrites(t *testing.T) {
	t.Parallel()
	pool, proxy, freeze, thaw := proxiedPool(t, 5)
	freeze()
	defer thaw()
	start := time.Now()
	c, err := pool.Acquire(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Release()
	took := time.Since(start)
	if r := c.Conn().PgConn().Conn().RemoteAddr().String(); r == proxy || took > 3*time.Second {
		t.Fatalf("connected to %s after %v, want the other host within 3s (connect_timeout 5s)", r, took)
	}
}
