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
// 5,000 for the single consumer). Build the server from the project's
// pinned module first, in the repository root:
//
//	go build -o /tmp/nats-server github.com/nats-io/nats-server/v2
//	cd bench && go run ./cmd/jsdrain -server /tmp/nats-server -n 300000 -layouts filtered,streams,single
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
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ordertimeout/ordertimeout/bench/internal/harness"
	"github.com/ordertimeout/ordertimeout/pkg/events"
)

func main() {
	server := flag.String("server", "", "nats-server binary (required)")
	n := flag.Int("n", 300000, "commands per layout")
	size := flag.Int("size", 200, "payload bytes per command")
	layouts := flag.String("layouts", "filtered,streams,single", "layouts to measure, comma-separated")
	out := flag.String("out", "", "also write the report to this file")
	profile := flag.Int("profile", 0, "nats-server's profiling port (its --profile; 0: none), for go tool pprof during the drain")
	flag.Parse()
	if err := run(*server, *n, *size, strings.Split(*layouts, ","), *out, *profile); err != nil {
		fmt.Fprintln(os.Stderr, "jsdrain:", err)
		os.Exit(1)
	}
}

func run(server string, n, size int, layouts []string, out string, profile int) error {
	if server == "" {
		return errors.New("-server is required")
	}
	for _, l := range layouts {
		if l != "filtered" && l != "streams" && l != "single" {
			return fmt.Errorf("unknown layout %q: want filtered, streams or single", l)
		}
	}
	var w io.Writer // nil: stdout only
	if out != "" {
		f, err := os.Create(out)
		if err != nil {
			return err
		}
		defer f.Close()
		w = f
	}
	rep := harness.NewReport(w)
	rep.Machine()
	for _, l := range layouts {
		if err := measure(rep, server, l, n, size, profile); err != nil {
			return fmt.Errorf("%s: %w", l, err)
		}
	}
	return nil
}

// measure runs one layout on a fresh server.
func measure(rep *harness.Report, server, layout string, n, size, profile int) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	dir, err := os.MkdirTemp("", "jsdrain-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	addr, err := harness.FreeAddr()
	if err != nil {
		return err
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return err
	}
	args := []string{"-js", "-sd", dir, "-a", host, "-p", port}
	if profile > 0 {
		args = append(args, "--profile", fmt.Sprint(profile))
	}
	cmd := exec.Command(server, args...)
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start nats-server: %w", err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	var nc *nats.Conn
	for deadline := time.Now().Add(10 * time.Second); ; {
		if nc, err = nats.Connect("nats://" + addr); err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil {
		return fmt.Errorf("connect: %w", err)
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
	phases := []struct {
		name string
		run  func() error
	}{
		{"publish", func() error { return publish(ctx, js, n, size) }},
		{"drain", func() error { return drain(ctx, js, layout, n) }},
	}
	for _, ph := range phases {
		start := time.Now()
		if err := ph.run(); err != nil {
			return err
		}
		d := time.Since(start)
		s1, err := cpus.Sample()
		if err != nil {
			return err
		}
		kv := []any{"layout", layout, "phase", ph.name, "n", n, "seconds", d.Seconds(), "per_sec", harness.PerSec(n, d)}
		rep.Line("result", append(kv, cpus.PerUnit("us_per_command_", s0, s1, n)...)...)
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
func drain(ctx context.Context, js jetstream.JetStream, layout string, n int) error {
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
	var acked atomic.Int64
	done := make(chan struct{})
	var ccs []jetstream.ConsumeContext
	defer func() {
		for _, cc := range ccs {
			cc.Stop()
		}
	}()
	for _, s := range specs {
		cons, err := js.CreateOrUpdateConsumer(ctx, s.stream, s.cfg)
		if err != nil {
			return fmt.Errorf("create consumer on %s: %w", s.stream, err)
		}
		cc, err := cons.Consume(func(m jetstream.Msg) {
			if m.Ack() == nil && acked.Add(1) == int64(n) {
				close(done)
			}
		}, jetstream.PullMaxMessages(s.pull))
		if err != nil {
			return fmt.Errorf("consume %s: %w", s.stream, err)
		}
		ccs = append(ccs, cc)
	}
	select {
	case <-done:
	case <-ctx.Done():
		return fmt.Errorf("drained %d of %d: %w", acked.Load(), n, ctx.Err())
	}
	// The acks are fire-and-forget: wait until the server removed every
	// command, so its work is inside the measured span.
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
