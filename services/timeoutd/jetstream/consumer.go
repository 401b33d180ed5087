package jetstream

import (
	"cmp"
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ordertimeout/ordertimeout/pkg/events"
	"github.com/ordertimeout/ordertimeout/services/timeoutd"
)

// Defaults of ConsumerConfig.
const (
	// DurableDefault is the durable consumer's name.
	DurableDefault = "timeoutd"
	// BatchSizeDefault is the most commands per batch (one upsert each).
	BatchSizeDefault = 5000
	// AckWaitDefault is how long a delivered command may stay unacked
	// before JetStream redelivers it. It bounds how long the commands a
	// killed process had fetched wait for the next one, so it is short; a
	// batch commits in well under a second.
	AckWaitDefault = 10 * time.Second
)

// ConsumerConfig configures a Consumer.
type ConsumerConfig struct {
	// Durable is the consumer's durable name; default DurableDefault.
	Durable string
	// BatchSize is the most messages Next returns; default
	// BatchSizeDefault. Twice as many are prefetched, and MaxAckPending is
	// four times it, which bounds the commands in memory.
	BatchSize int
	// AckWait is the redelivery timeout of an unacked command; default
	// AckWaitDefault.
	AckWait time.Duration
}

// Consumer is a durable pull consumer on events.CommandSubjects with
// explicit acks. It implements timeoutd.Source: a goroutine of nats.go
// prefetches messages into a buffer and Next takes what is there, so a batch
// grows while the previous one is in Postgres.
type Consumer struct {
	cfg    ConsumerConfig
	stream jetstream.Stream
	cc     jetstream.ConsumeContext
	msgs   chan jetstream.Msg
}

var _ timeoutd.Source = (*Consumer)(nil)

// ConsumerSettings returns the consumer's JetStream configuration.
func ConsumerSettings(cfg ConsumerConfig) jetstream.ConsumerConfig {
	return jetstream.ConsumerConfig{
		Durable:       cfg.Durable,
		Description:   "timeoutd: timeout commands",
		FilterSubject: events.CommandSubjects,
		DeliverPolicy: jetstream.DeliverAllPolicy,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       cfg.AckWait,
		MaxDeliver:    -1,
		MaxAckPending: 4 * cfg.BatchSize,
		ReplayPolicy:  jetstream.ReplayInstantPolicy,
	}
}

// NewConsumer creates or updates the durable consumer on the command stream
// (which must exist: see internal/streams) and starts consuming.
func NewConsumer(ctx context.Context, js jetstream.JetStream, cfg ConsumerConfig) (*Consumer, error) {
	cfg.Durable = cmp.Or(cfg.Durable, DurableDefault)
	cfg.BatchSize = cmp.Or(cfg.BatchSize, BatchSizeDefault)
	cfg.AckWait = cmp.Or(cfg.AckWait, AckWaitDefault)
	if cfg.BatchSize < 1 {
		return nil, fmt.Errorf("jetstream: BatchSize must be positive, got %d", cfg.BatchSize)
	}
	if cfg.AckWait < time.Second {
		return nil, fmt.Errorf("jetstream: AckWait must be at least 1s, got %v", cfg.AckWait)
	}
	cons, err := js.CreateOrUpdateConsumer(ctx, events.StreamCommands, ConsumerSettings(cfg))
	if err != nil {
		return nil, fmt.Errorf("create consumer %s: %w", cfg.Durable, err)
	}
	stream, err := js.Stream(ctx, events.StreamCommands)
	if err != nil {
		return nil, fmt.Errorf("look up stream %s: %w", events.StreamCommands, err)
	}
	c := &Consumer{cfg: cfg, stream: stream, msgs: make(chan jetstream.Msg, cfg.BatchSize)}
	c.cc, err = cons.Consume(func(m jetstream.Msg) { c.msgs <- m },
		jetstream.PullMaxMessages(2*cfg.BatchSize))
	if err != nil {
		return nil, fmt.Errorf("consume %s: %w", cfg.Durable, err)
	}
	return c, nil
}

// Next implements timeoutd.Source: it waits for one message, then takes
// what else is buffered, up to BatchSize.
func (c *Consumer) Next(ctx context.Context) ([]timeoutd.Message, error) {
	var first jetstream.Msg
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case first = <-c.msgs:
	}
	batch := make([]timeoutd.Message, 1, min(c.cfg.BatchSize, 1+len(c.msgs)))
	batch[0] = msg{first}
	for len(batch) < c.cfg.BatchSize {
		select {
		case m := <-c.msgs:
			batch = append(batch, msg{m})
		default:
			return batch, nil
		}
	}
	return batch, nil
}

// Mark implements timeoutd.Source: it returns the command stream's last
// sequence, so every command stored now has a sequence at most the mark.
// One JetStream API request.
func (c *Consumer) Mark(ctx context.Context) (uint64, error) {
	info, err := c.stream.Info(ctx)
	if err != nil {
		return 0, fmt.Errorf("stream info %s: %w", events.StreamCommands, err)
	}
	return info.State.LastSeq, nil
}

// Consumed implements timeoutd.Source. The command stream is a work queue:
// a message leaves it when it is acked or terminated, so every command up
// to mark is consumed when the stream is empty or its first sequence is
// past mark. One JetStream API request.
func (c *Consumer) Consumed(ctx context.Context, mark uint64) (bool, error) {
	info, err := c.stream.Info(ctx)
	if err != nil {
		return false, fmt.Errorf("stream info %s: %w", events.StreamCommands, err)
	}
	return info.State.Msgs == 0 || info.State.FirstSeq > mark, nil
}

// Close implements timeoutd.Source: it stops consuming and naks the
// buffered messages so another process gets them at once.
func (c *Consumer) Close() error {
	c.cc.Stop()
	for {
		select {
		case m := <-c.msgs:
			_ = m.Nak()
		case <-c.cc.Closed():
			for {
				select {
				case m := <-c.msgs:
					_ = m.Nak()
				default:
					return nil
				}
			}
		}
	}
}

// msg adapts a jetstream.Msg to timeoutd.Message.
type msg struct{ jetstream.Msg }

// Seq returns the stream sequence, or 0 when the metadata is unreadable.
func (m msg) Seq() uint64 {
	md, err := m.Metadata()
	if err != nil {
		return 0
	}
	return md.Sequence.Stream
}
