// Command loadgen runs the platform's load benchmarks against real Postgres
// and NATS JetStream containers, with the comparison peer measured in the
// same run on the same Postgres:
//
//	go run ./cmd/loadgen timeoutd [flags]   timeoutd beside River
//	go run ./cmd/loadgen orders [flags]     orders' POST /v1/orders beside pgbench
//
// Each measurement is one line "result key=value ..."; -out also writes the
// lines, with the date, the command and the machine, to a file.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/ordertimeout/ordertimeout/bench/internal/harness"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "loadgen:", err)
		os.Exit(1)
	}
}

// options are the flags shared by every workload.
type options struct {
	root string
	out  string
	keep bool
	work string
}

func run(ctx context.Context, args []string) error {
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		return errors.New("usage: loadgen timeoutd|orders [flags] (loadgen <workload> -h lists the flags)")
	}
	workload, args := args[0], args[1:]
	fs := flag.NewFlagSet(workload, flag.ContinueOnError)
	var o options
	fs.StringVar(&o.root, "root", "..", "directory of the root module (the services are built from it)")
	fs.StringVar(&o.out, "out", "", "also write the results to this file")
	fs.BoolVar(&o.keep, "keep", false, "keep the containers and the work directory after the run")
	var w interface {
		run(context.Context, options, *harness.Report) error
	}
	switch workload {
	case "timeoutd":
		w = timeoutdFlags(fs)
	case "orders":
		w = ordersFlags(fs)
	default:
		return fmt.Errorf("unknown workload %q: want timeoutd or orders", workload)
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	root, err := filepath.Abs(o.root)
	if err != nil {
		return fmt.Errorf("root: %w", err)
	}
	o.root = root
	var rep *harness.Report
	if o.out != "" {
		f, err := os.Create(o.out)
		if err != nil {
			return fmt.Errorf("create %s: %w", o.out, err)
		}
		defer f.Close()
		rep = harness.NewReport(f)
	} else {
		rep = harness.NewReport(nil)
	}
	rep.Machine()
	work, err := os.MkdirTemp("", "loadgen-*")
	if err != nil {
		return fmt.Errorf("work dir: %w", err)
	}
	o.work = work
	if !o.keep {
		defer os.RemoveAll(work)
	}
	rep.Note("work dir (service logs): %s", work)
	start := time.Now()
	err = w.run(ctx, o, rep)
	rep.Line("done", "seconds", time.Since(start).Seconds(), "loadavg", harness.LoadAvg(), "ok", err == nil)
	return err
}

// Postgres topologies of -pg.
const (
	// pgSingle is one Postgres server (harness.StartPostgres).
	pgSingle = "single"
	// pgPatroni is a three-member cluster under Patroni with synchronous
	// replication in strict mode (harness.StartPatroni).
	pgPatroni = "patroni"
)

// infra starts Postgres and NATS for one run, named after the run.
type infra struct {
	// pg is the server of -pg single, patroni the cluster of -pg patroni;
	// one of them is nil.
	pg      *harness.Postgres
	patroni *harness.PatroniCluster
	nats    *harness.NATS
}

// startInfra starts the Postgres of topology pg (pgSingle, pgPatroni) and,
// withNATS, NATS, and prints their infra lines. cleanup removes them
// (unless -keep), also after an error.
func startInfra(ctx context.Context, o options, rep *harness.Report, pg string, withNATS bool) (*infra, func(), error) {
	id := fmt.Sprintf("loadgen-%d", os.Getpid())
	var in infra
	cleanup := func() {
		if o.keep {
			return
		}
		if in.pg != nil {
			in.pg.Remove()
		}
		if in.patroni != nil {
			in.patroni.Remove()
		}
		if in.nats != nil {
			in.nats.Remove()
		}
	}
	settings := strings.Join(harness.PostgresArgs, " ")
	switch pg {
	case pgSingle:
		p, err := harness.StartPostgres(ctx, id+"-pg")
		in.pg = p
		if err != nil {
			return nil, cleanup, err
		}
		shown, err := harness.ShowSettings(ctx, p.URL)
		if err != nil {
			return nil, cleanup, err
		}
		rep.Line("infra", "postgres", harness.PostgresImage, "pg", pg, "settings", settings, "in_force", strings.Join(shown, " "))
	case pgPatroni:
		start := time.Now()
		c, err := harness.StartPatroni(ctx, id)
		in.patroni = c
		if err != nil {
			return nil, cleanup, err
		}
		shown, err := harness.ShowSettings(ctx, c.URL)
		if err != nil {
			return nil, cleanup, err
		}
		ms, err := c.State(ctx)
		if err != nil {
			return nil, cleanup, err
		}
		rep.Line("infra", "postgres", harness.PatroniImage, "pg", pg, "members", len(c.Members), "etcd", len(c.Etcd),
			"synchronous_mode_strict", true, "ready_seconds", time.Since(start).Seconds(), "state", ms.String(),
			"settings", settings, "in_force", strings.Join(shown, " "))
	default:
		return nil, cleanup, fmt.Errorf("-pg %q: want %s or %s", pg, pgSingle, pgPatroni)
	}
	if withNATS {
		n, err := harness.StartNATS(ctx, id+"-nats")
		in.nats = n
		if err != nil {
			return nil, cleanup, err
		}
		rep.Line("infra", "nats", harness.NATSImage, "storage", "file")
	}
	return &in, cleanup, nil
}

// createDatabase creates database name on the run's Postgres and returns
// its connection string (multi-host for a cluster).
func (in *infra) createDatabase(ctx context.Context, name string) (string, error) {
	if in.patroni != nil {
		return in.patroni.CreateDatabase(ctx, name)
	}
	return in.pg.CreateDatabase(ctx, name)
}

// postgresCPU returns the CPU sources of the run's Postgres: "postgres",
// the server or the cluster's members summed; for a cluster also "etcd",
// its three members summed, and "postgres_leader", the member that led at
// the start, part of "postgres" (so not counted in the total again).
func (in *infra) postgresCPU(ctx context.Context) (harness.CPUs, error) {
	if in.patroni == nil {
		cpu, err := in.pg.CPU(ctx)
		if err != nil {
			return nil, err
		}
		return harness.CPUs{{Name: "postgres", Platform: true, Time: cpu}}, nil
	}
	pg, etcd, err := in.patroni.CPU(ctx)
	if err != nil {
		return nil, err
	}
	leader, err := in.patroni.Leader.CPU(ctx)
	if err != nil {
		return nil, err
	}
	return harness.CPUs{{Name: "postgres", Platform: true, Time: pg}, {Name: "postgres_leader", Time: leader},
		{Name: "etcd", Platform: true, Time: etcd}}, nil
}
