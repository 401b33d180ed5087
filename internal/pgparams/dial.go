package pgparams

import (
	"fmt"
	"net"
	"strconv"
	"syscall"
	"time"
)

// Dead peers. A statement sent on a connection whose server is gone from
// the network (killed with its host, cut off: a primary lost in a
// failover) waits for the kernel to give up retransmitting, about 15
// minutes, unless the caller's deadline ends it first; an idle pooled
// connection to it looks alive until used. Every pool's connections are
// dialed with a TCP user timeout (what was sent unacknowledged for that
// long closes the connection) and keepalives, so that a dead server's
// connections fail within seconds and the next statement reconnects, to
// the new primary of a multi-host URL. A frozen server does not trip
// them: its kernel still acknowledges. The statements' deadlines bound
// that case, and a pool of several hosts closes such sessions once
// another host takes writes (takeover.go).
const (
	// TCPUserTimeoutDefault bounds how long sent data may stay
	// unacknowledged; the connection string's tcp_user_timeout
	// (milliseconds, libpq's name) wins.
	TCPUserTimeoutDefault = 5 * time.Second
	// keepAliveIdle, keepAliveInterval and keepAliveCount probe an idle
	// connection: dead after about 5 + 3 × 1 s of silence.
	keepAliveIdle     = 5 * time.Second
	keepAliveInterval = time.Second
	keepAliveCount    = 3
)

// tcpUserTimeout takes the connection string's tcp_user_timeout out of
// params (pgx would send it to the server as a setting, which Postgres
// refuses) and returns it, or TCPUserTimeoutDefault.
func tcpUserTimeout(params map[string]string) (time.Duration, error) {
	d, set, err := takeMillis(params, "tcp_user_timeout", "the kernel's default")
	if !set {
		return TCPUserTimeoutDefault, nil
	}
	return d, err
}

// takeMillis takes the client-side setting name (milliseconds, 0 meaning
// zero) out of params, where pgx would send it to the server, and returns
// it and whether the connection string set it.
func takeMillis(params map[string]string, name, zero string) (d time.Duration, set bool, err error) {
	v, set := params[name]
	if !set {
		return 0, false, nil
	}
	delete(params, name)
	ms, err := strconv.Atoi(v)
	if err != nil || ms < 0 {
		return 0, true, fmt.Errorf("%s %q: want milliseconds, 0 for %s", name, v, zero)
	}
	return time.Duration(ms) * time.Millisecond, true, nil
}

// dialer returns the dialer of a pool's connections: keepalives, and the
// TCP user timeout d where the platform has one (0: the kernel's).
func dialer(d time.Duration) *net.Dialer {
	return &net.Dialer{
		KeepAliveConfig: net.KeepAliveConfig{Enable: true, Idle: keepAliveIdle, Interval: keepAliveInterval, Count: keepAliveCount},
		Control: func(network, _ string, c syscall.RawConn) error {
			if d <= 0 || (network != "tcp" && network != "tcp4" && network != "tcp6") {
				return nil
			}
			var serr error
			if err := c.Control(func(fd uintptr) { serr = setUserTimeout(fd, d) }); err != nil {
				return err
			}
			return serr
		},
	}
}
