package pgparams

import (
	"cmp"
	"context"
	"fmt"
	"net"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// The hosts of a multi-host URL. pgx tries them one after another in the
// URL's order, having resolved every name first, and keeps nothing from one
// connection to the next: after a failover every new connection asks the
// dead former primary first, then the standbys, each refusing it for
// read-only, before it reaches the new primary. A lookup of the dead
// member's name that goes unanswered costs its bound every time, and a
// server that accepts connections but does not answer (frozen, or behind a
// proxy whose upstream is gone) its connect_timeout every time.
//
// A pool of several hosts therefore keeps what its connections learnt of
// each host, and every new connection tries them in that order (stable
// among equals): the host that last took writes, then hosts not known yet,
// then standbys, then hosts that failed last (lookup, dial, or a session
// that did not answer within hostRecheck of its dial). A name whose lookup
// failed is answered that failure again, without asking, for hostRecheck.
// Nothing is skipped: a host that failed is still tried, last, so the order
// costs no availability; target_session_attrs still decides which host a
// connection keeps.

// hostRecheck is how long a failed lookup is answered from memory, and how
// long a dialed session may go unanswered before its host ranks as failed.
const hostRecheck = time.Second

// hostRank orders the hosts of a new connection, lowest first.
type hostRank int

const (
	rankWrites  hostRank = iota // its last session took writes
	rankUnknown                 // never answered yet
	rankStandby                 // its last session was refused read-only
	rankFailed                  // its last lookup, dial or session failed
)

// addrState is what the pool's connections learnt of one address.
type addrState struct {
	// answered is the rank of its last session that answered; at, when.
	answered hostRank
	at       time.Time
	// failedAt is when its last dial failed; waitingSince, when the oldest
	// session dialed since its last answer was dialed (zero: none).
	failedAt, waitingSince time.Time
}

// hosts is the memory of one pool's connections; safe for concurrent use.
type hosts struct {
	now func() time.Time
	mu  sync.Mutex
	// addrs is keyed by "ip:port"; names maps a host name to the
	// addresses its last lookup answered, lookups to its last failed one.
	addrs   map[string]*addrState
	names   map[string][]string
	lookups map[string]failedLookup
	// take watches the sessions of a pool that connects to the primary
	// only (takeover.go); nil otherwise.
	take *takeover
}

type failedLookup struct {
	at  time.Time
	err error
}

func newHosts(now func() time.Time) *hosts {
	return &hosts{now: now, addrs: map[string]*addrState{}, names: map[string][]string{}, lookups: map[string]failedLookup{}}
}

// lookup wraps resolve: it remembers a name's addresses, and answers a
// name whose lookup failed less than hostRecheck ago with that failure.
func (h *hosts) lookup(resolve pgconn.LookupFunc) pgconn.LookupFunc {
	return func(ctx context.Context, host string) ([]string, error) {
		h.mu.Lock()
		f, failed := h.lookups[host]
		h.mu.Unlock()
		if failed && h.now().Sub(f.at) < hostRecheck {
			return nil, fmt.Errorf("%w (remembered for %s)", f.err, hostRecheck)
		}
		addrs, err := resolve(ctx, host)
		h.mu.Lock()
		defer h.mu.Unlock()
		if err != nil && ctx.Err() == nil { // not the caller giving up
			h.lookups[host] = failedLookup{at: h.now(), err: err}
			return nil, err
		}
		if err == nil {
			delete(h.lookups, host)
			h.names[host] = addrs
		}
		return addrs, err
	}
}

// dial wraps d: a dial that fails ranks its address as failed; one that
// connects starts the wait for its session's answer.
func (h *hosts) dial(d pgconn.DialFunc) pgconn.DialFunc {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := d(ctx, network, addr)
		h.mu.Lock()
		defer h.mu.Unlock()
		s := h.state(addr)
		if err != nil {
			s.failedAt = h.now()
			return nil, err
		}
		if s.waitingSince.IsZero() {
			s.waitingSince = h.now()
		}
		if h.take != nil {
			return h.take.watch(c, addr), nil
		}
		return c, nil
	}
}

// validate wraps validate (nil: every session is accepted): a session it
// accepts ranks its address as taking writes, one it refuses as a standby.
func (h *hosts) validate(validate pgconn.ValidateConnectFunc) pgconn.ValidateConnectFunc {
	return func(ctx context.Context, pc *pgconn.PgConn) error {
		var err error
		if validate != nil {
			err = validate(ctx, pc)
		}
		rank := rankWrites
		if err != nil {
			rank = rankStandby
		}
		addr := pc.Conn().RemoteAddr().String()
		h.mu.Lock()
		s := h.state(addr)
		s.answered, s.at, s.waitingSince = rank, h.now(), time.Time{}
		if rank == rankWrites && h.take != nil {
			// One host takes writes at a time: the others that did are
			// former primaries, frozen or about to be demoted.
			for a, o := range h.addrs {
				if a != addr && o.answered == rankWrites {
					o.answered = rankStandby
				}
			}
		}
		h.mu.Unlock()
		if err == nil && h.take != nil {
			h.take.accepted(pc.Conn())
		}
		return err
	}
}

// state returns addr's state, made on first use; h.mu is held.
func (h *hosts) state(addr string) *addrState {
	s, ok := h.addrs[addr]
	if !ok {
		s = &addrState{answered: rankUnknown}
		h.addrs[addr] = s
	}
	return s
}

// rank returns the rank of host:port now; h.mu is held.
func (h *hosts) rank(host string, port uint16) hostRank {
	if _, failed := h.lookups[host]; failed {
		return rankFailed
	}
	addrs, ok := h.names[host]
	if !ok {
		addrs = []string{host} // an address, or a name not looked up yet
	}
	best := rankFailed
	now := h.now()
	for _, a := range addrs {
		s, ok := h.addrs[net.JoinHostPort(a, strconv.Itoa(int(port)))]
		r := rankUnknown
		switch {
		case !ok:
		case s.failedAt.After(s.at), !s.waitingSince.IsZero() && now.Sub(s.waitingSince) >= hostRecheck:
			r = rankFailed
		default:
			r = s.answered
		}
		best = min(best, r)
	}
	return best
}

// order puts cc's hosts in the order a new connection tries them.
func (h *hosts) order(cc *pgconn.Config) {
	all := append([]*pgconn.FallbackConfig{{Host: cc.Host, Port: cc.Port, TLSConfig: cc.TLSConfig}}, cc.Fallbacks...)
	h.mu.Lock()
	ranks := make(map[*pgconn.FallbackConfig]hostRank, len(all))
	for _, fb := range all {
		ranks[fb] = h.rank(fb.Host, fb.Port)
	}
	h.mu.Unlock()
	slices.SortStableFunc(all, func(a, b *pgconn.FallbackConfig) int { return cmp.Compare(ranks[a], ranks[b]) })
	cc.Host, cc.Port, cc.TLSConfig = all[0].Host, all[0].Port, all[0].TLSConfig
	cc.Fallbacks = all[1:]
}
