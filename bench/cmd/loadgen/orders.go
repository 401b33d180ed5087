package main

import (
	"context"
	"flag"
	"path/filepath"
	"time"

	"github.com/ordertimeout/ordertimeout/bench/internal/harness"
	"github.com/ordertimeout/ordertimeout/bench/internal/ordersbench"
)

// ordersWorkload measures POST /v1/orders beside pgbench on the same
// Postgres server.
type ordersWorkload struct {
	clients  int
	duration time.Duration
	warmup   time.Duration
}

func ordersFlags(fs *flag.FlagSet) *ordersWorkload {
	w := &ordersWorkload{}
	fs.IntVar(&w.clients, "clients", ordersbench.ClientsDefault, "concurrent HTTP clients and pgbench connections")
	fs.DurationVar(&w.duration, "duration", ordersbench.DurationDefault, "measured span of each peer (whole seconds for pgbench)")
	fs.DurationVar(&w.warmup, "warmup", ordersbench.WarmupDefault, "unmeasured orders load before the span")
	return w
}

func (w *ordersWorkload) run(ctx context.Context, o options, rep *harness.Report) error {
	in, cleanup, err := startInfra(ctx, o, rep, pgSingle, true)
	defer cleanup()
	if err != nil {
		return err
	}
	rep.Line("workload", "name", "orders", "clients", w.clients, "duration_ms", w.duration, "warmup_ms", w.warmup)
	bin, err := harness.Build(ctx, o.root, "./services/orders/cmd/orders", o.work)
	if err != nil {
		return err
	}
	db, err := in.pg.CreateDatabase(ctx, "orders")
	if err != nil {
		return err
	}
	rate, err := ordersbench.Orders(ctx, ordersbench.Config{
		Bin: bin, DatabaseURL: db, NATSURL: in.nats.URL, LogPath: filepath.Join(o.work, "orders.log"),
		Clients: w.clients, Duration: w.duration, Warmup: w.warmup,
	}, rep)
	if err != nil {
		return err
	}
	tps, err := ordersbench.Pgbench(ctx, in.pg, w.clients, w.duration, rep)
	if err != nil {
		return err
	}
	rep.Line("result", "peer", "ratio", "workload", "orders_create_over_pgbench_insert", "ratio", rate/tps, "target", 0.6)
	return nil
}
