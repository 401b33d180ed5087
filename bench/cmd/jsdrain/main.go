// Command jsdrain measures what a layout of the command stream costs
// nats-server per command: it starts a nats-server binary of its own (file
// store, JetStream), publishes -n commands spread over 64 partitions like
// timeoutd's (subject cmd.<p>.<key>, one key per command, -size bytes of
// payload) into a work-queue stream, then drains them with explicit acks,
// one ack per command, and prints nats-server's and its own CPU per
// command for the publishing and for the drain:
//
//   - filtered: one stream, 64 durable pull consumers, each filtered on
//     its partition (cmd.<p>.>): timeoutd's layout until the stream per
//     partition;
//   - streams: 64 streams (cmd.<p>.>), one unfiltered consumer each:
//     timeoutd's layout now (events.CommandStream);
//   - single: one stream, one unfiltered consumer.
//
// The consumers pull like timeoutd's (PullMaxMessages 156 a partition,
// 5,000 for the single consumer; 5 s pull expiry, 1 s idle heartbeat).
// With -steady-rate R it measures a steady load instead, as timeoutd sees
// churn: the consumers attached first, an idle phase of -steady-seconds
// (nats-server's fixed cost, CPU µs per second), then R commands a second
// for as long, each consumed as it comes (CPU µs per command and per
// second). Build the server from the project's pinned module first, in the
// repository root:
//
//	go build -o /tmp/nats-server github.com/nats-io/nats-server/v2
//	cd bench && go run ./cmd/jsdrain -server /tmp/nats-server -n 300000 -layouts filtered,streams,single
//	cd bench && go run ./cmd/jsdrain -server /tmp/nats-server -steady-rate 1000 -steady-seconds 30
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ordertimeout/ordertimeout/bench/internal/harness"
	"github.com/ordertimeout/ordertimeout/pkg/events"
)

// config is what the flags set.
type config struct {
	server  string
	n, size int
	layouts []string
	out     string
	profile int
	// memoryState keeps each consumer's state in memory
	// (ConsumerConfig.MemoryStorage) instead of a file of its own.
	memoryState bool
	// ackEvery > 0 holds each consumer's acks and sends them every
	// ackEvery, in order, instead of one as each command arrives.
	ackEvery time.Duration
	// steadyRate > 0 measures an idle phase and a steady load of
	// steadyRate commands a second, each steadySeconds long, instead of
	// publish then drain.
	steadyRate, steadySeconds int
}

func main() {
	var cfg config
	var layouts string
	flag.StringVar(&cfg.server, "server", "", "nats-server binary (required)")
	flag.IntVar(&cfg.n, "n", 300000, "commands per layout (publish then drain)")
	flag.IntVar(&cfg.size, "size", 200, "payload bytes per command")
	flag.StringVar(&layouts, "layouts", "filtered,streams,single", "layouts to measure, comma-separated")
	flag.StringVar(&cfg.out, "out", "", "also write the report to this file")
	flag.IntVar(&cfg.profile, "profile", 0, "nats-server's profiling port (its --profile; 0: none), for go tool pprof during the drain")
	flag.BoolVar(&cfg.memoryState, "consumer-memory", false, "consumers keep their state in memory (MemoryStorage), not in a file")
	flag.DurationVar(&cfg.ackEvery, "ack-every", 0, "each consumer holds its acks and sends them every this long (0: each at once)")
	flag.IntVar(&cfg.steadyRate, "steady-rate", 0, "commands a second of a steady load after an idle phase, instead of publish then drain (0: off)")
	flag.IntVar(&cfg.steadySeconds, "steady-seconds", 30, "length of the idle phase and of the steady load")
	flag.Parse()
	cfg.layouts = strings.Split(layouts, ",")
	if err := run(cfg); err != nil {
		fmt.Fprintln(os.Stderr, "jsdrain:", err)
		os.Exit(1)
	}
}

func run(cfg config) error {
	if cfg.server == "" {
		return errors.New("-server is required")
	}
	for _, l := range cfg.layouts {
		if l != "filtered" && l != "streams" && l != "single" {
			return fmt.Errorf("unknown layout %q: want filtered, streams or single", l)
		}
	}
	if cfg.steadyRate < 0 || (cfg.steadyRate > 0 && cfg.steadySeconds < 1) {
		return fmt.Errorf("-steady-rate %d and -steady-seconds %d: want a rate of 0 or more and at least 1 s", cfg.steadyRate, cfg.steadySeconds)
	}
	var w io.Writer // nil: stdout only
	if cfg.out != "" {
		f, err := os.Create(cfg.out)
		if err != nil {
			return err
		}
		defer f.Close()
		w = f
	}
	rep := harness.NewReport(w)
	rep.Machine()
	for _, l := range cfg.layouts {
		if err := measure(rep, cfg, l); err != nil {
			return fmt.Errorf("%s: %w", l, err)
		}
	}
	return nil
}

// phase is one measured span of a layout's run; it returns the number of
// commands it handled.
type phase struct {
	name string
	run  func() (int, error)
}

// measure runs one layout on a fresh server.
func measure(rep *harness.Report, cfg config, layout string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	dir, err := os.MkdirTemp("", "jsdrain-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	cmd, addr, err := startServer(cfg, dir)
	if err != nil {
		return err
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	nc, err := connect(addr)
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	if err := createStreams(ctx, js, layout); err != nil {
		return err
	}
	cpus := harness.CPUs{
		{Name: "nats", Platform: true, Time: harness.ProcessCPU(cmd.Process.Pid)},
		{Name: "client", Time: harness.ProcessCPU(os.Getpid())},
	}
	s0, err := cpus.Sample()
	if err != nil {
		return err
	}
	phases, stop, err := layoutPhases(ctx, js, layout, cfg)
	if err != nil {
		return err
	}
	defer stop()
	return runPhases(rep, cfg, layout, cpus, s0, phases)
}

// startServer starts nats-server with JetStream storing into dir, on a
// free address, which it returns.
func startServer(cfg config, dir string) (*exec.Cmd, string, error) {
	addr, err := harness.FreeAddr()
	if err != nil {
		return nil, "", err
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, "", err
	}
	args := []string{"-js", "-sd", dir, "-a", host, "-p", port}
	if cfg.profile > 0 {
		args = append(args, "--profile", fmt.Sprint(cfg.profile))
	}
	cmd := exec.Command(cfg.server, args...)
	if err := cmd.Start(); err != nil {
		return nil, "", fmt.Errorf("start nats-server: %w", err)
	}
	return cmd, addr, nil
}

// connect connects to the server at addr, retrying for up to 10 seconds
// while it starts.
func connect(addr string) (*nats.Conn, error) {
	var nc *nats.Conn
	var err error
	for deadline := time.Now().Add(10 * time.Second); ; {
		if nc, err = nats.Connect("nats://" + addr); err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil {
		return nil, fmt.Errorf("connect: %w", err)
	}
	return nc, nil
}

// layoutPhases returns the phases of a run, publish then drain, or with a
// steady rate idle then steady, whose consumers it starts; the returned
// function stops them.
func layoutPhases(ctx context.Context, js jetstream.JetStream, layout string, cfg config) ([]phase, func(), error) {
	if cfg.steadyRate <= 0 {
		return []phase{
			{"publish", func() (int, error) { return cfg.n, publish(ctx, js, cfg.n, cfg.size) }},
			{"drain", func() (int, error) { return cfg.n, drain(ctx, js, layout, cfg) }},
		}, func() {}, nil
	}
	st, err := startSteady(ctx, js, layout, cfg)
	if err != nil {
		return nil, nil, err
	}
	span := time.Duration(cfg.steadySeconds) * time.Second
	return []phase{
		{"idle", func() (int, error) { return 0, harness.SleepUntil(ctx, time.Now().Add(span)) }},
		{"steady", func() (int, error) { return st.load(ctx, cfg.steadyRate, span, cfg.size) }},
	}, st.stop, nil
}

// runPhases runs the phases in turn and prints each one's rate and its CPU
// time per second and per command, from the CPU sample s0 on.
func runPhases(rep *harness.Report, cfg config, layout string, cpus harness.CPUs, s0 harness.CPUSample, phases []phase) error {
	for _, ph := range phases {
		start := time.Now()
		n, err := ph.run()
		if err != nil {
			return err
		}
		d := time.Since(start)
		s1, err := cpus.Sample()
		if err != nil {
			return err
		}
		kv := []any{"layout", layout, "consumer_memory", cfg.memoryState, "ack_every_ms", cfg.ackEvery.Milliseconds(), "phase", ph.name, "n", n, "seconds", d.Seconds(), "per_sec", harness.PerSec(n, d)}
		kv = append(kv, cpus.PerUnit("us_per_second_", s0, s1, int(d.Seconds()+0.5))...)
		if n > 0 {
			kv = append(kv, cpus.PerUnit("us_per_command_", s0, s1, n)...)
		}
		rep.Line("result", kv...)
		s0 = s1
	}
	return nil
}

// streamNames returns the streams of a layout.
func streamNames(layout string) []string {
	if layout != "streams" {
		return []string{"CMD"}
	}
	names := make([]string, events.Partitions)
	for p := range names {
		names[p] = fmt.Sprintf("CMD%02d", p)
	}
	return names
}

func createStreams(ctx context.Context, js jetstream.JetStream, layout string) error {
	for p, name := range streamNames(layout) {
		subject := "cmd.>"
		if layout == "streams" {
			subject = fmt.Sprintf("cmd.%d.>", p)
		}
		_, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{subject},
			Retention: jetstream.WorkQueuePolicy, Storage: jetstream.FileStorage, Duplicates: 2 * time.Minute})
		if err != nil {
			return fmt.Errorf("create stream %s: %w", name, err)
		}
	}
	return nil
}

// publish publishes n commands with a window of 4,096 PubAcks in flight,
// each with a Nats-Msg-Id like the relays'.
func publish(ctx context.Context, js jetstream.JetStream, n, size int) error {
	payload := bytes.Repeat([]byte{'x'}, size)
	for i := range n {
		key := fmt.Sprintf("order-%012d", i)
		if _, err := js.PublishAsync(fmt.Sprintf("cmd.%d.%s", i%events.Partitions, key), payload, jetstream.WithMsgID(key)); err != nil {
			return fmt.Errorf("publish: %w", err)
		}
		if js.PublishAsyncPending() >= 4096 {
			select {
			case <-js.PublishAsyncComplete():
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}
	select {
	case <-js.PublishAsyncComplete():
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// drain consumes every command with the layout's consumers, acking each,
// until n were acked and every stream is empty.
func drain(ctx context.Context, js jetstream.JetStream, layout string, cfg config) error {
	var acked atomic.Int64
	done := make(chan struct{})
	ccs, err := consume(ctx, js, layout, cfg, func() {
		if acked.Add(1) == int64(cfg.n) {
			close(done)
		}
	})
	defer stopAll(ccs)
	if err != nil {
		return err
	}
	select {
	case <-done:
	case <-ctx.Done():
		return fmt.Errorf("drained %d of %d: %w", acked.Load(), cfg.n, ctx.Err())
	}
	return waitRemoved(ctx, js, layout)
}

// consume starts the layout's consumers, pulling like timeoutd's, each
// acking every command and then calling acked.
func consume(ctx context.Context, js jetstream.JetStream, layout string, cfg config, acked func()) ([]jetstream.ConsumeContext, error) {
	type spec struct {
		stream string
		cfg    jetstream.ConsumerConfig
		pull   int
	}
	var specs []spec
	switch layout {
	case "filtered":
		for p := range events.Partitions {
			specs = append(specs, spec{"CMD", jetstream.ConsumerConfig{Durable: fmt.Sprintf("p%02d", p),
				FilterSubject: fmt.Sprintf("cmd.%d.>", p), AckPolicy: jetstream.AckExplicitPolicy, MaxAckPending: 1000}, 156})
		}
	case "streams":
		for _, name := range streamNames(layout) {
			specs = append(specs, spec{name, jetstream.ConsumerConfig{Durable: "c",
				AckPolicy: jetstream.AckExplicitPolicy, MaxAckPending: 1000}, 156})
		}
	case "single":
		specs = append(specs, spec{"CMD", jetstream.ConsumerConfig{Durable: "c",
			AckPolicy: jetstream.AckExplicitPolicy, MaxAckPending: 64000}, 5000})
	}
	var ccs []jetstream.ConsumeContext
	for _, s := range specs {
		s.cfg.MemoryStorage = cfg.memoryState
		cons, err := js.CreateOrUpdateConsumer(ctx, s.stream, s.cfg)
		if err != nil {
			return ccs, fmt.Errorf("create consumer on %s: %w", s.stream, err)
		}
		ack := func(m jetstream.Msg) {
			if m.Ack() == nil {
				acked()
			}
		}
		if cfg.ackEvery > 0 {
			ack = heldAcks(ctx, cfg.ackEvery, ack)
		}
		cc, err := cons.Consume(ack, jetstream.PullMaxMessages(s.pull), jetstream.PullExpiry(5*time.Second), jetstream.PullHeartbeat(time.Second))
		if err != nil {
			return ccs, fmt.Errorf("consume %s: %w", s.stream, err)
		}
		ccs = append(ccs, cc)
	}
	return ccs, nil
}

// heldAcks returns a handler that holds the messages it is given and
// hands them to ack every d, in order, until ctx ends.
func heldAcks(ctx context.Context, d time.Duration, ack func(jetstream.Msg)) func(jetstream.Msg) {
	var (
		mu   sync.Mutex
		held []jetstream.Msg
	)
	go func() {
		t := time.NewTicker(d)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			mu.Lock()
			msgs := held
			held = nil
			mu.Unlock()
			for _, m := range msgs {
				ack(m)
			}
		}
	}()
	return func(m jetstream.Msg) {
		mu.Lock()
		held = append(held, m)
		mu.Unlock()
	}
}

func stopAll(ccs []jetstream.ConsumeContext) {
	for _, cc := range ccs {
		cc.Stop()
	}
}

// waitRemoved returns once the server removed every acked command (acks
// are fire-and-forget), so its work is inside the measured span.
func waitRemoved(ctx context.Context, js jetstream.JetStream, layout string) error {
	for {
		left := uint64(0)
		for _, name := range streamNames(layout) {
			s, err := js.Stream(ctx, name)
			if err != nil {
				return err
			}
			left += s.CachedInfo().State.Msgs
		}
		if left == 0 {
			return nil
		}
		select {
		case <-time.After(10 * time.Millisecond):
		case <-ctx.Done():
			return fmt.Errorf("%d commands not removed: %w", left, ctx.Err())
		}
	}
}

// steady is a layout's consumers attached for a steady load.
type steady struct {
	js    jetstream.JetStream
	ccs   []jetstream.ConsumeContext
	acked atomic.Int64
}

// startSteady attaches the layout's consumers.
func startSteady(ctx context.Context, js jetstream.JetStream, layout string, cfg config) (*steady, error) {
	st := &steady{js: js}
	ccs, err := consume(ctx, js, layout, cfg, func() { st.acked.Add(1) })
	st.ccs = ccs
	if err != nil {
		st.stop()
		return nil, err
	}
	return st, nil
}

func (st *steady) stop() { stopAll(st.ccs) }

// load publishes rate commands a second for span, a batch every 10 ms,
// each with a Nats-Msg-Id, then waits until every one was acked; it
// returns how many it published.
func (st *steady) load(ctx context.Context, rate int, span time.Duration, size int) (int, error) {
	payload := bytes.Repeat([]byte{'x'}, size)
	const tick = 10 * time.Millisecond
	start := time.Now()
	before := st.acked.Load()
	sent := 0
	for next := start; next.Before(start.Add(span)); next = next.Add(tick) {
		if err := harness.SleepUntil(ctx, next); err != nil {
			return sent, err
		}
		for due := int(time.Since(start).Seconds() * float64(rate)); sent < due; sent++ {
			key := fmt.Sprintf("steady-%012d", sent)
			if _, err := st.js.PublishAsync(fmt.Sprintf("cmd.%d.%s", sent%events.Partitions, key), payload, jetstream.WithMsgID(key)); err != nil {
				return sent, fmt.Errorf("publish: %w", err)
			}
		}
	}
	select {
	case <-st.js.PublishAsyncComplete():
	case <-ctx.Done():
		return sent, ctx.Err()
	}
	err := harness.Poll(ctx, time.Minute, 10*time.Millisecond, func() (bool, error) {
		return st.acked.Load()-before >= int64(sent), nil
	})
	return sent, err
}
