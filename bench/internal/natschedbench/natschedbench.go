// Package natschedbench measures NATS JetStream's own message schedules
// (ADR-51, nats-server 2.12 and later) as a deadline service, the way a
// NATS user would run one instead of timeoutd: one stream with
// AllowMsgSchedules holding a schedule per key on sched.<key>, whose
// "@at <deadline>" makes the server publish its body to fired.<key> in the
// same stream when the deadline passes; a consumer reads fired.>, and a
// deadline is cancelled by purging its schedule's subject.
//
// The schedule's time is written at full precision: nats.go's
// WithScheduleAt truncates it to the second, which would fire up to a
// second early.
package natschedbench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ordertimeout/ordertimeout/bench/internal/harness"
)

// The stream and its subjects.
const (
	Stream         = "SCHEDULES"
	SchedulePrefix = "sched."
	FiredPrefix    = "fired."
)

// Config is the NATS server the peer runs on.
type Config struct {
	// NATSURL is the server's client URL.
	NATSURL string
	// PID is nats-server's process id as the host sees it, for its RSS.
	PID int
	// CPUs are the containers whose CPU time is reported: nats-server.
	CPUs harness.CPUs
}

// Bench is the NATS message schedules peer.
type Bench struct {
	cfg     Config
	rep     *harness.Report
	nc      *nats.Conn
	js      jetstream.JetStream
	stream  jetstream.Stream
	pubErrs atomic.Int64
}

// deadline is a schedule's body, and so the fired message's: the key and
// its deadline, as a cancel event would carry them.
type deadline struct {
	Key      string    `json:"key"`
	Deadline time.Time `json:"deadline"`
}

// New connects to cfg.NATSURL and creates the stream: file storage, one
// replica, schedules allowed.
func New(ctx context.Context, cfg Config, rep *harness.Report) (*Bench, error) {
	b := &Bench{cfg: cfg, rep: rep}
	nc, err := nats.Connect(cfg.NATSURL, nats.Name("loadgen natsched"))
	if err != nil {
		return nil, fmt.Errorf("connect nats: %w", err)
	}
	b.nc = nc
	b.js, err = jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(4096),
		jetstream.WithPublishAsyncErrHandler(func(jetstream.JetStream, *nats.Msg, error) { b.pubErrs.Add(1) }))
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("jetstream: %w", err)
	}
	b.stream, err = b.js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name: Stream, Subjects: []string{SchedulePrefix + ">", FiredPrefix + ">"},
		Storage: jetstream.FileStorage, Replicas: 1, AllowMsgSchedules: true,
	})
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("create stream %s: %w", Stream, err)
	}
	rep.Line("infra", "peer", "natsched", "stream", Stream, "storage", "file", "replicas", 1, "schedule", "@at RFC3339Nano")
	return b, nil
}

// Close closes the connection.
func (b *Bench) Close() { b.nc.Close() }

// Reset purges the stream, schedules and fired messages.
func (b *Bench) Reset(ctx context.Context) error {
	if err := b.stream.Purge(ctx); err != nil {
		return fmt.Errorf("purge %s: %w", Stream, err)
	}
	return nil
}

// schedule publishes one schedule per key, firing at deadlines[i], and
// waits for every PubAck.
func (b *Bench) schedule(ctx context.Context, keys []string, deadlines []time.Time) error {
	failed := b.pubErrs.Load()
	for i, k := range keys {
		data, err := json.Marshal(deadline{Key: k, Deadline: deadlines[i]})
		if err != nil {
			return fmt.Errorf("encode schedule: %w", err)
		}
		msg := &nats.Msg{Subject: SchedulePrefix + k, Data: data, Header: nats.Header{}}
		msg.Header.Set(jetstream.ScheduleHeader, "@at "+deadlines[i].UTC().Format(time.RFC3339Nano))
		msg.Header.Set(jetstream.ScheduleTargetHeader, FiredPrefix+k)
		if _, err := b.js.PublishMsgAsync(msg, jetstream.WithStallWait(time.Minute)); err != nil {
			return fmt.Errorf("publish schedule %s: %w", k, err)
		}
	}
	select {
	case <-b.js.PublishAsyncComplete():
	case <-ctx.Done():
		return ctx.Err()
	}
	if n := b.pubErrs.Load() - failed; n > 0 {
		return fmt.Errorf("publish: %d schedules were not acknowledged", n)
	}
	return nil
}

// consume starts an ordered consumer of the fired messages, handing each
// to fired with its arrival time and the time the server stored it, or
// counting it in arrivals as undecodable; the caller stops it.
func (b *Bench) consume(ctx context.Context, arrivals *harness.Arrivals, fired func(d deadline, now, stored time.Time)) (jetstream.ConsumeContext, error) {
	cons, err := b.js.OrderedConsumer(ctx, Stream, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{FiredPrefix + ">"}, DeliverPolicy: jetstream.DeliverNewPolicy,
	})
	if err != nil {
		return nil, fmt.Errorf("fired consumer: %w", err)
	}
	cc, err := cons.Consume(func(msg jetstream.Msg) {
		now := time.Now()
		var d deadline
		md, err := msg.Metadata()
		if err == nil {
			if err = json.Unmarshal(msg.Data(), &d); err == nil && d.Key == "" {
				err = errors.New("no key")
			}
		}
		if err != nil {
			arrivals.Undecodable(msg.Data(), err)
			return
		}
		fired(d, now, md.Timestamp)
	}, jetstream.PullMaxMessages(4096))
	if err != nil {
		return nil, fmt.Errorf("consume fired: %w", err)
	}
	return cc, nil
}

// cpus are Config.CPUs and the harness's own process.
func (b *Bench) cpus() harness.CPUs {
	return append(append(harness.CPUs{}, b.cfg.CPUs...), harness.CPUSource{Name: "harness", Time: harness.ProcessCPU(os.Getpid())})
}
