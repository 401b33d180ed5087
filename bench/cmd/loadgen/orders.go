package main

import (
	"context"
	"errors"
	"flag"

	"github.com/ordertimeout/ordertimeout/bench/internal/harness"
)

// ordersWorkload measures POST /v1/orders beside pgbench.
type ordersWorkload struct{}

func ordersFlags(*flag.FlagSet) *ordersWorkload { return &ordersWorkload{} }

func (w *ordersWorkload) run(context.Context, options, *harness.Report) error {
	return errors.New("orders: not yet")
}
