package pgparams

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Pool is how a service opens one of its Postgres pools. Every setting the
// connection string makes wins over the service's own: the service's
// values are defaults for what the URL leaves unset.
type Pool struct {
	// URL is the connection string (URL or keyword/value form).
	URL string
	// Variable names where URL came from (ORDERS_DATABASE_URL), in errors.
	Variable string
	// MaxConns is the pool's size when URL sets no pool_max_conns; 0
	// leaves pgxpool's default.
	MaxConns int32
	// Dedicated makes MaxConns the size whatever URL says: a pool kept
	// apart for one component (the outbox relay, the read API) whose size
	// is part of its design, not of the database's capacity.
	Dedicated bool
	// Timeouts are the sessions' limits, unless URL sets them (Apply).
	Timeouts Timeouts
	// ApplicationName is the sessions' application_name (what
	// pg_stat_activity shows) unless URL sets one; empty leaves it unset.
	ApplicationName string
	// Adapt, when set, adapts the pool's configuration last: what it sets
	// wins over URL.
	Adapt func(*pgxpool.Config)
}

// Config returns the pool's configuration: URL's, then Pool's settings
// where URL has none, then Adapt.
func (p Pool) Config() (*pgxpool.Config, error) {
	pc, err := pgxpool.ParseConfig(p.URL)
	if err != nil {
		return nil, fmt.Errorf("parse %s: %w", p.Variable, err)
	}
	// pgxpool drops pool_max_conns from the parameters it keeps: ask the
	// connection string itself whether it set one.
	cc, err := pgconn.ParseConfig(p.URL)
	if err != nil {
		return nil, fmt.Errorf("parse %s: %w", p.Variable, err)
	}
	if _, set := cc.RuntimeParams["pool_max_conns"]; (!set || p.Dedicated) && p.MaxConns > 0 {
		pc.MaxConns = p.MaxConns
	}
	params := pc.ConnConfig.RuntimeParams
	userTimeout, err := tcpUserTimeout(params)
	if err != nil {
		return nil, fmt.Errorf("parse %s: %w", p.Variable, err)
	}
	pc.ConnConfig.DialFunc = dialer(userTimeout).DialContext
	bound, err := lookupBound(&pc.ConnConfig.Config)
	if err != nil {
		return nil, fmt.Errorf("parse %s: %w", p.Variable, err)
	}
	pc.ConnConfig.LookupFunc = boundedLookup(pc.ConnConfig.LookupFunc, bound)
	var h *hosts
	if severalHosts(&pc.ConnConfig.Config) {
		h = newHosts(time.Now)
		cc := pc.ConnConfig
		if primaryOnly(cc.ValidateConnect) {
			h.take = &takeover{sessions: map[*session]struct{}{}, order: h.order}
		}
		cc.LookupFunc, cc.DialFunc, cc.ValidateConnect = h.lookup(cc.LookupFunc), h.dial(cc.DialFunc), h.validate(cc.ValidateConnect)
		pc.BeforeConnect = func(_ context.Context, cc *pgx.ConnConfig) error {
			h.order(&cc.Config)
			return nil
		}
	}
	p.Timeouts.Apply(params)
	if _, set := params["application_name"]; !set && p.ApplicationName != "" {
		params["application_name"] = p.ApplicationName
	}
	if p.Adapt != nil {
		p.Adapt(pc)
	}
	if h != nil && h.take != nil {
		h.take.probeConfig = pc.ConnConfig.Config.Copy()
	}
	return pc, nil
}

// Open opens the pool of Config; it connects on first use.
func (p Pool) Open(ctx context.Context) (*pgxpool.Pool, error) {
	pc, err := p.Config()
	if err != nil {
		return nil, err
	}
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("open postgres pool: %w", err)
	}
	return pool, nil
}
