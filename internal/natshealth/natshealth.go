// Package natshealth keeps a service's NATS connection on a server that
// answers.
package natshealth

import (
	"context"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
)

// Watch pings nc's server (a flush: a round trip) every quarter of grace
// until ctx ends, and calls answered, when not nil, after each answer. A
// connection that carries nothing (cut without a reset, or its server
// frozen: paused, its disk stalled) fails the ping, where the client's own
// pings, every two minutes, would take minutes to notice; Watch then
// reconnects the client at once, to the next server of its list, and pings
// again. A frozen node of a cluster so costs its clients about half the
// grace; a frozen server alone, until it thaws.
func Watch(ctx context.Context, nc *nats.Conn, grace time.Duration, answered func(), log *slog.Logger) {
	t := time.NewTicker(grace / 4)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		err := nc.FlushTimeout(grace / 2)
		// Alone, a server that does not answer would be reconnected to
		// itself: its connection is left as it is.
		if err != nil && ctx.Err() == nil && len(nc.Servers()) > 1 {
			log.Warn("NATS did not answer a ping; reconnecting", "server", nc.ConnectedUrlRedacted(), "err", err)
			if nc.ForceReconnect() != nil {
				continue // closed: shutting down
			}
			err = nc.FlushTimeout(grace / 2)
		}
		if err == nil && answered != nil {
			answered()
		}
	}
}
