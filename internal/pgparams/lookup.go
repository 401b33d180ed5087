package pgparams

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// Name lookups of a multi-host URL. pgx resolves every host of a
// connection string, one after another, before it dials any, and bounds
// the lookups by the caller's deadline alone (connect_timeout bounds each
// dial, not them). A lookup whose answer is lost holds every connection
// attempt for the resolver's timeout, 5 s with Go's defaults, though
// another host is the live primary: after a failover, lookups of the
// killed member's name (its DNS record gone with its container) now and
// then went unanswered for 5 s (Docker's embedded DNS forwards a name it
// no longer knows to the host's resolver), and timeoutd's heartbeats
// failed for 3 s past the first write committed on the new primary. Each
// lookup of a multi-host URL is therefore bounded, and asked again on a
// fresh query when the first goes unanswered for a quarter of the bound.

// LookupTimeoutDefault bounds each host's lookup when the URL names
// several hosts; the connection string's lookup_timeout (milliseconds, 0
// for no bound) wins, and also applies to a single host.
const LookupTimeoutDefault = 500 * time.Millisecond

// lookupBound takes the connection string's lookup_timeout out of cc's
// parameters (it is not a server setting) and returns it; without one, a
// URL of several hosts gets LookupTimeoutDefault and a single host no
// bound (0).
func lookupBound(cc *pgconn.Config) (time.Duration, error) {
	d, set, err := takeMillis(cc.RuntimeParams, "lookup_timeout", "no bound")
	if !set && severalHosts(cc) {
		return LookupTimeoutDefault, nil
	}
	return d, err
}

// boundedLookup returns resolve bounded by d: a lookup still unanswered
// after d/4 is asked again on a fresh query, and the first answer of the
// two wins (an address list, or an error such as no such host); neither
// outlives d. d <= 0 returns resolve.
func boundedLookup(resolve pgconn.LookupFunc, d time.Duration) pgconn.LookupFunc {
	if d <= 0 {
		return resolve
	}
	return func(ctx context.Context, host string) ([]string, error) {
		ctx, cancel := context.WithTimeout(ctx, d)
		defer cancel()
		type answer struct {
			addrs []string
			err   error
		}
		answers := make(chan answer, 2)
		ask := func() {
			addrs, err := resolve(ctx, host)
			answers <- answer{addrs, err}
		}
		go ask()
		again := time.NewTimer(d / 4)
		defer again.Stop()
		retry, pending := again.C, 1
		for {
			select {
			case <-retry:
				retry = nil
				pending++
				go ask()
			case a := <-answers:
				pending--
				if a.err == nil {
					return a.addrs, nil
				}
				if ctx.Err() == nil || pending == 0 { // an answer (no such host), or the bound
					return nil, fmt.Errorf("lookup %s (bounded by %s): %w", host, d, a.err)
				}
			}
		}
	}
}

// severalHosts reports whether cc names more than one server, by host or
// port (its fallbacks also repeat a server for sslmode's plain retry).
func severalHosts(cc *pgconn.Config) bool {
	for _, fb := range cc.Fallbacks {
		if fb.Host != cc.Host || fb.Port != cc.Port {
			return true
		}
	}
	return false
}
