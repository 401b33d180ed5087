package pgparams

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"net"
	"reflect"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// The sessions a former primary holds. A primary that stops answering
// without closing its connections (frozen, or cut off while a statement's
// request was already acknowledged) keeps every session of a pool waiting
// on it: the statements in flight until their callers' deadlines, and the
// idle ones as soon as they are used. The TCP user timeout does not end
// them (nothing sent is unacknowledged) and neither do keepalives in time
// (a frozen server's kernel answers them). A pool whose sessions all wait
// never dials again, so it would not meet the new primary before the old
// one thaws, is demoted, and drops them.
//
// A pool that connects to the primary only (target_session_attrs
// read-write or primary) of several hosts therefore watches its sessions:
// one whose read has waited for hostRecheck starts a probe, a connection
// to the other hosts in the pool's order, again every probeEvery while it
// waits. A session that any connection (the probe's, or the pool's own)
// finds taking writes on another address closes every session to the
// others: whatever they wait on fails at once, as if the server were gone,
// and the pool reconnects, to the new primary first. That includes the
// connections still being opened there: one that began before the
// promotion, refused by the standbys, waits on the silent former primary
// last, for its connect_timeout.
//
// It is safe because a session closed is a session lost, which every
// caller already handles: a transaction in flight on it is ambiguous, as
// on a crash. A false start costs little: a statement that legitimately
// runs longer than hostRecheck makes the pool ask its standbys, which
// refuse, every probeEvery while it runs; it is closed only if another
// host takes writes, and then its server is no longer the primary.

// probeEvery is the least time between two probes of a pool.
const probeEvery = 250 * time.Millisecond

// errSkipped refuses the probe's dial of the host it asks about.
var errSkipped = errors.New("pgparams: the silent host is not probed")

// primaryOnly reports whether v is pgconn's validation of
// target_session_attrs=read-write or =primary: only then is a session
// that another host's connection finds writable on a former primary.
func primaryOnly(v pgconn.ValidateConnectFunc) bool {
	if v == nil {
		return false
	}
	p := reflect.ValueOf(v).Pointer()
	return p == reflect.ValueOf(pgconn.ValidateConnectTargetSessionAttrsReadWrite).Pointer() ||
		p == reflect.ValueOf(pgconn.ValidateConnectTargetSessionAttrsPrimary).Pointer()
}

// takeover is the watch of one pool's sessions; safe for concurrent use.
type takeover struct {
	// probeConfig is the configuration of the probe's connections (the
	// pool's, with its dial, lookup and validation wrapped by hosts).
	probeConfig *pgconn.Config
	order       func(*pgconn.Config)

	mu       sync.Mutex
	sessions map[*session]struct{}
	probedAt time.Time
	probing  bool
}

// session is a dialed connection of a watched pool.
type session struct {
	net.Conn
	t       *takeover
	addr    string // as dialed, "ip:port"
	reading atomic.Bool
	// silence fires while a read waits: hostRecheck after it began, then
	// every probeEvery.
	silence   *time.Timer
	closeOnce sync.Once
}

// watch registers c, dialed to addr.
func (t *takeover) watch(c net.Conn, addr string) net.Conn {
	s := &session{Conn: c, t: t, addr: addr}
	s.silence = time.AfterFunc(time.Hour, s.silent)
	s.silence.Stop()
	t.mu.Lock()
	t.sessions[s] = struct{}{}
	t.mu.Unlock()
	return s
}

func (s *session) Read(b []byte) (int, error) {
	s.reading.Store(true)
	s.silence.Reset(hostRecheck)
	n, err := s.Conn.Read(b)
	s.reading.Store(false)
	s.silence.Stop()
	return n, err
}

func (s *session) Close() error {
	s.closeOnce.Do(func() {
		s.silence.Stop()
		s.t.mu.Lock()
		delete(s.t.sessions, s)
		s.t.mu.Unlock()
	})
	return s.Conn.Close()
}

// silent runs while s's read waits: it probes for another primary, then
// comes back after probeEvery if the read still waits.
func (s *session) silent() {
	if !s.reading.Load() {
		return
	}
	s.t.probe(s.addr)
	if s.reading.Load() {
		s.silence.Reset(probeEvery)
	}
}

// probe connects to the pool's hosts but skip, in the pool's order, unless
// a probe runs or ran less than probeEvery ago. A host that takes writes
// is found by the validation, which closes the former primary's sessions
// (accepted); the probe's own session is closed at once.
func (t *takeover) probe(skip string) {
	t.mu.Lock()
	if t.probing || time.Since(t.probedAt) < probeEvery {
		t.mu.Unlock()
		return
	}
	t.probing, t.probedAt = true, time.Now()
	t.mu.Unlock()
	defer func() {
		t.mu.Lock()
		t.probing = false
		t.mu.Unlock()
	}()
	cfg := t.probeConfig.Copy()
	t.order(cfg)
	dial := cfg.DialFunc
	cfg.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		if addr == skip {
			return nil, errSkipped
		}
		return dial(ctx, network, addr)
	}
	ctx, cancel := context.WithTimeout(context.Background(), cmp.Or(cfg.ConnectTimeout, 2*time.Second)*time.Duration(1+len(cfg.Fallbacks)))
	defer cancel()
	if pc, err := pgconn.ConnectConfig(ctx, cfg); err == nil {
		_ = pc.Close(ctx)
	}
}

// accepted is told that a validation accepted the session on c: it closes
// every session to another address.
func (t *takeover) accepted(c net.Conn) {
	s := sessionOf(c)
	if s == nil {
		return
	}
	t.mu.Lock()
	var former []*session
	for o := range t.sessions {
		if o.addr != s.addr {
			former = append(former, o)
		}
	}
	t.mu.Unlock()
	for _, o := range former {
		_ = o.Close()
	}
}

// sessionOf returns the session under c (pgconn's connection: the one
// dialed, or TLS over it), or nil.
func sessionOf(c net.Conn) *session {
	if tc, ok := c.(*tls.Conn); ok {
		c = tc.NetConn()
	}
	s, _ := c.(*session)
	return s
}
