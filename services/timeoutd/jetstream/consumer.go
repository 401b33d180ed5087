package jetstream

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ordertimeout/ordertimeout/internal/retry"
	"github.com/ordertimeout/ordertimeout/pkg/events"
	"github.com/ordertimeout/ordertimeout/services/timeoutd"
)

// Defaults of ConsumerConfig.
const (
	// DurablePrefix names the durable consumer of each partition's
	// commands: timeoutd-00 … timeoutd-63.
	DurablePrefix = "timeoutd-"
	// BatchSizeDefault is the most commands Next returns at once. Larger
	// batches spread ingest's fixed costs per statement (the fence's lease
	// locks, the statement itself) over more rows (docs/ARCHITECTURE.md,
	// "Ingest", has the measurement).
	BatchSizeDefault = 20000
	// PrefetchDefault is how many messages each partition's consumer
	// fetches ahead; the hand-off to Next holds half as many per partition.
	// Messages, not commands: a batch message holds up to
	// events.MaxBatchCommands, so what waits in this process unacked is at
	// most (64 × 128 + 4,096) × 32 = 393,216 commands, which ingest must
	// work off inside AckWaitDefault, beyond which JetStream would redeliver
	// them.
	PrefetchDefault = 128
	// AckWaitDefault is how long a delivered command may stay unacked before
	// JetStream redelivers it (to the partition's owner of the moment).
	AckWaitDefault = 10 * time.Second
	// PullHeartbeatDefault is the idle heartbeat of each partition's pull
	// requests: JetStream sends one while a request waits with nothing to
	// deliver, and two missed heartbeats make the client pull again. A pull
	// request can be lost without an error: sent before a new consumer's
	// leader is elected, or held by a leader that moved to another node.
	// Until the client pulls again its partition's commands wait, so this
	// bounds that wait to about two heartbeats (nats.go's default, half of
	// its 30 s request expiry, let a fresh cluster's first commands wait
	// 30 s).
	PullHeartbeatDefault = time.Second
	// LingerDefault is how long Next waits, once the arrived commands are
	// taken, for more to share their commit: at a low rate each command
	// would otherwise pay a commit of its own (docs/ARCHITECTURE.md,
	// "Ingest"). A command is then acknowledged and applied up to 20 ms
	// later.
	LingerDefault = 20 * time.Millisecond
	// pullExpiry is how long each pull request waits on the server; a new
	// one follows at once.
	pullExpiry = 5 * time.Second
	// leaderPoll is how often waitLeader asks for a new consumer's leader.
	leaderPoll = 20 * time.Millisecond
	// restartDelay is the pause between two attempts of a restart.
	restartDelay = 100 * time.Millisecond
	// createAttempts is how many times a takeover creates a consumer
	// before it fails.
	createAttempts = 5
	// lookupTimeout bounds a takeover's lookups, which take milliseconds:
	// the consumer found and its reset (one that does not answer within
	// it, its leader moving after a NATS node restart and the reset's
	// proposal lost with it, is created anew instead), and the stream's
	// last sequence (Mark). The API's own timeout, 5 s, held takeovers
	// 5 s in chaos runs.
	lookupTimeout = time.Second
)

// ConsumerConfig configures a Consumer.
type ConsumerConfig struct {
	// BatchSize is the most commands Next returns, a batch message counting
	// for its commands; default BatchSizeDefault.
	BatchSize int `env:"BATCH_SIZE"`
	// AckWait is the redelivery timeout of an unacked command (at least 1s);
	// default AckWaitDefault.
	AckWait time.Duration `env:"ACK_WAIT"`
	// Prefetch is how many messages each partition's consumer fetches
	// ahead (1 to 10,000); the consumer's MaxAckPending is 8 times it.
	// Default PrefetchDefault.
	Prefetch int `env:"PREFETCH"`
	// PullHeartbeat is the idle heartbeat of the pull requests (500ms to
	// 2.5s); default PullHeartbeatDefault.
	PullHeartbeat time.Duration `env:"PULL_HEARTBEAT"`
	// Linger is how long Next waits, once the arrived commands are taken,
	// for more, while the batch holds fewer than BatchSize commands (at
	// most 100ms): at a low rate of commands, a few then share one commit
	// instead of one each, at the price of acking each up to Linger later.
	// Zero means LingerDefault, and a negative value does not wait (as
	// net.Dialer's KeepAlive).
	Linger time.Duration `env:"LINGER"`
}

// Consumer delivers the commands of the partitions this instance owns. Each
// partition's commands have a stream of their own (events.CommandStream),
// and each stream one durable pull consumer (DurableName), with explicit
// acks, that only the partition's owner reads. It implements
// timeoutd.Source: Add starts a partition's consumer, whose nats.go
// goroutine prefetches into one buffer shared by every partition, and Next
// takes what is there, so a batch grows while the previous one is in
// Postgres.
type Consumer struct {
	cfg  ConsumerConfig
	js   jetstream.JetStream
	msgs chan jetstream.Msg
	// ctx is the life of the restarts (restart), ended by Close.
	ctx    context.Context
	cancel context.CancelFunc

	mu    sync.Mutex
	parts map[int]partition
	// keep reports whether a partition's ended consumption may be
	// restarted (KeepWhile); nil: always.
	keep func(p int) bool
	// resets and recreates count the takeovers by kind (Takeovers);
	// restarts the consumptions restarted after their consumer was
	// deleted under them.
	resets, recreates, restarts atomic.Uint64
}

// partition is one owned partition's consumer. Its cc is nil while its
// consumption is being restarted (restart).
type partition struct {
	cons jetstream.Consumer
	cc   jetstream.ConsumeContext
}

var _ timeoutd.Source = (*Consumer)(nil)

// DurableName returns the durable consumer name of partition p.
func DurableName(p int) string { return fmt.Sprintf("%s%02d", DurablePrefix, p) }

// ConsumerSettings returns the JetStream configuration of partition p's
// consumer, on events.CommandStream(p). It has no filter: the stream holds
// partition p's commands only.
func ConsumerSettings(p int, cfg ConsumerConfig) jetstream.ConsumerConfig {
	cfg = cfg.withDefaults()
	return jetstream.ConsumerConfig{
		Durable:       DurableName(p),
		Description:   fmt.Sprintf("timeoutd: timeout commands of partition %d", p),
		DeliverPolicy: jetstream.DeliverAllPolicy,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       cfg.AckWait,
		MaxDeliver:    -1,
		MaxAckPending: 8 * cfg.Prefetch,
		ReplayPolicy:  jetstream.ReplayInstantPolicy,
	}
}

func (c ConsumerConfig) withDefaults() ConsumerConfig {
	c.BatchSize = cmp.Or(c.BatchSize, BatchSizeDefault)
	c.Prefetch = cmp.Or(c.Prefetch, PrefetchDefault)
	c.AckWait = cmp.Or(c.AckWait, AckWaitDefault)
	c.PullHeartbeat = cmp.Or(c.PullHeartbeat, PullHeartbeatDefault)
	c.Linger = cmp.Or(c.Linger, LingerDefault)
	return c
}

// Validate reports the first setting out of range, zero values standing
// for their defaults.
func (c ConsumerConfig) Validate() error {
	c = c.withDefaults()
	switch {
	case c.BatchSize < 1:
		return fmt.Errorf("jetstream: BatchSize must be positive, got %d", c.BatchSize)
	case c.Prefetch < 1 || c.Prefetch > 10000:
		return fmt.Errorf("jetstream: Prefetch must be in [1, 10000], got %d", c.Prefetch)
	case c.AckWait < time.Second:
		return fmt.Errorf("jetstream: AckWait must be at least 1s, got %v", c.AckWait)
	case c.PullHeartbeat < 500*time.Millisecond || c.PullHeartbeat > pullExpiry/2:
		return fmt.Errorf("jetstream: PullHeartbeat must be within 500ms and %v, got %v", pullExpiry/2, c.PullHeartbeat)
	case c.Linger > 100*time.Millisecond:
		return fmt.Errorf("jetstream: Linger must be at most 100ms, got %v", c.Linger)
	}
	return nil
}

// NewConsumer returns a Consumer on the command streams, delivering nothing
// until Add.
func NewConsumer(js jetstream.JetStream, cfg ConsumerConfig) (*Consumer, error) {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Consumer{cfg: cfg, js: js, msgs: make(chan jetstream.Msg, events.Partitions*cfg.Prefetch/2), parts: map[int]partition{},
		ctx: ctx, cancel: cancel}, nil
}

// Add implements timeoutd.Source: it takes partition p's durable consumer
// over (takeOver) and starts consuming it.
func (c *Consumer) Add(ctx context.Context, p int) error {
	c.mu.Lock()
	_, ok := c.parts[p]
	c.mu.Unlock()
	if ok {
		return nil
	}
	// The calls to the server run outside the lock, so that a takeover
	// adds its partitions concurrently (each takes round trips to the
	// consumer's leader).
	part, err := c.start(ctx, p)
	if err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.parts[p]; ok { // added meanwhile: one consumption is enough
		part.cc.Stop()
		return nil
	}
	c.parts[p] = part
	return nil
}

// start takes partition p's consumer over and starts consuming it. A
// consumption ends on its own when its consumer is deleted under it: by a
// former owner's takeover that was still under way when it lost the
// partition, whose delete and create reached the server after this
// instance's takeover. The stream keeps every command not acknowledged,
// so nothing is lost, but nobody would consume them: the error handler
// restarts the consumption (restart) while the partition is still here.
func (c *Consumer) start(ctx context.Context, p int) (partition, error) {
	cons, err := c.takeOver(ctx, p)
	if err != nil {
		return partition{}, err
	}
	cc, err := cons.Consume(func(m jetstream.Msg) { c.msgs <- m },
		jetstream.PullMaxMessages(c.cfg.Prefetch),
		jetstream.PullExpiry(pullExpiry), jetstream.PullHeartbeat(c.cfg.PullHeartbeat),
		jetstream.ConsumeErrHandler(func(cc jetstream.ConsumeContext, err error) { c.consumeFailed(p, cc, err) }))
	if err != nil {
		return partition{}, fmt.Errorf("consume %s: %w", DurableName(p), err)
	}
	return partition{cons: cons, cc: cc}, nil
}

// consumeFailed handles an error of partition p's consumption cc: a
// deleted consumer ends it, and it is restarted; pulls that no server
// answers may mean the consumer is gone (or only that its leader is being
// elected): the consumer is looked up, and the consumption restarted if
// it is not found.
func (c *Consumer) consumeFailed(p int, cc jetstream.ConsumeContext, err error) {
	switch {
	case errors.Is(err, jetstream.ErrConsumerDeleted), errors.Is(err, jetstream.ErrBadRequest):
		c.restart(p, cc)
	case errors.Is(err, nats.ErrNoResponders), errors.Is(err, jetstream.ErrNoHeartbeat):
		go func() {
			ctx, cancel := context.WithTimeout(c.ctx, pullExpiry)
			defer cancel()
			if _, err := c.js.Consumer(ctx, events.CommandStream(p), DurableName(p)); errors.Is(err, jetstream.ErrConsumerNotFound) {
				c.restart(p, cc)
			}
		}()
	}
}

// KeepWhile makes the restart of an ended consumption ask serves first:
// a former owner whose lease another instance took must not take the
// consumer back from it (its restart would delete the new owner's
// consumer, and theirs each other's). The daemon passes the service's
// Serves; set it before the first Add.
func (c *Consumer) KeepWhile(serves func(p int) bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.keep = serves
}

// restart consumes partition p anew, taking its consumer over again, if
// cc is still its consumption, once the partition is served here
// (KeepWhile: a lapse may end with the lease still this instance's); it
// retries until it succeeds, p is removed, or Close.
func (c *Consumer) restart(p int, cc jetstream.ConsumeContext) {
	c.mu.Lock()
	part, ok := c.parts[p]
	if !ok || part.cc != cc {
		c.mu.Unlock()
		return // removed, or restarted already
	}
	c.parts[p] = partition{} // still wanted: Remove ends the restart
	c.mu.Unlock()
	cc.Stop()
	c.restarts.Add(1)
	go c.retake(p)
}

// retake is restart's loop: while partition p is still waiting for a
// consumption here, it starts one once p is served, every restartDelay.
func (c *Consumer) retake(p int) {
	for {
		c.mu.Lock()
		part, ok := c.parts[p]
		served := c.keep == nil || c.keep(p)
		c.mu.Unlock()
		if !ok || part.cc != nil {
			return // removed, or consumed again by Add
		}
		if served {
			if started, err := c.start(c.ctx, p); err == nil {
				c.install(p, started)
				return
			}
		}
		if !retry.Sleep(c.ctx, restartDelay) {
			return
		}
	}
}

// install makes started partition p's consumption if p still waits for
// one, and stops it otherwise.
func (c *Consumer) install(p int, started partition) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if part, ok := c.parts[p]; ok && part.cc == nil {
		c.parts[p] = started
		return
	}
	started.cc.Stop()
}

// takeOver returns partition p's consumer, delivering from the start every
// command not acknowledged, and nothing to anyone else. A previous owner's
// consumer holds the commands delivered to that owner and not acknowledged
// (it crashed, or it is paused or cut off and lost the lease), which
// JetStream would redeliver only after AckWait, and may hold that owner's
// pull requests.
//
// When nobody else pulls from it (NumWaiting counts only the pull requests
// of connections still alive: the server drops a closed connection's), the
// consumer is kept and reset to its ack floor, which hands every command
// delivered and not acknowledged out again at once: a proposal to the
// consumer's existing group. That is the crash's case, and the graceful
// handover's, whose owner stops consuming before it releases the lease.
//
// Otherwise (a paused or cut-off owner's connection is alive, so the
// server would go on delivering to it, and the new owner's fires would wait
// for those commands until the pause ended), or when the lookup or the
// reset fails or does not answer within lookupTimeout, or
// when the consumer's settings changed, the consumer is deleted with what
// it held and created anew: a new group, whose leader election takes far
// longer on a cluster. Either way the stream is a work queue, so every
// command not acknowledged is still in it; a command the previous owner did
// commit is then applied twice, which the version check makes a no-op.
func (c *Consumer) takeOver(ctx context.Context, p int) (jetstream.Consumer, error) {
	name, want := events.CommandStream(p), ConsumerSettings(p, c.cfg)
	rctx, cancel := context.WithTimeout(ctx, lookupTimeout)
	cons, err := c.js.Consumer(rctx, name, DurableName(p))
	if err == nil && reusable(cons.CachedInfo(), want) {
		if _, err := c.js.ResetConsumer(rctx, name, DurableName(p)); err == nil {
			cancel()
			c.resets.Add(1)
			return cons, nil
		}
	}
	cancel()
	if err := c.js.DeleteConsumer(ctx, name, DurableName(p)); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
		return nil, fmt.Errorf("delete consumer %s: %w", DurableName(p), err)
	}
	// A create right after the delete can fail while the server still
	// removes the old consumer's files ("meta.inf.tmp: no such file or
	// directory", seen on a busy machine): it is tried again.
	for attempt := 1; ; attempt++ {
		if cons, err = c.js.CreateConsumer(ctx, name, want); err == nil {
			break
		}
		if attempt == createAttempts || !retry.Sleep(ctx, restartDelay) {
			return nil, fmt.Errorf("create consumer %s (%d attempts): %w", DurableName(p), attempt, err)
		}
	}
	if err := waitLeader(ctx, cons); err != nil {
		return nil, fmt.Errorf("consumer %s: %w", DurableName(p), err)
	}
	c.recreates.Add(1)
	return cons, nil
}

// reusable reports whether a consumer found as info can be taken over by a
// reset: nobody pulls from it, it has a leader to answer, and its settings
// are the ones this instance would create.
func reusable(info *jetstream.ConsumerInfo, want jetstream.ConsumerConfig) bool {
	got := info.Config
	return info.NumWaiting == 0 && (info.Cluster == nil || info.Cluster.Leader != "") &&
		got.AckWait == want.AckWait && got.MaxAckPending == want.MaxAckPending &&
		got.DeliverPolicy == want.DeliverPolicy && got.AckPolicy == want.AckPolicy && got.MaxDeliver == want.MaxDeliver
}

// Takeovers returns how many partitions Add took over by resetting the
// consumer found, and how many by creating it anew.
func (c *Consumer) Takeovers() (reset, recreated uint64) { return c.resets.Load(), c.recreates.Load() }

// Restarts returns how many consumptions were restarted because their
// consumer was deleted under them.
func (c *Consumer) Restarts() uint64 { return c.restarts.Load() }

// waitLeader returns once a clustered consumer has a leader to take pull
// requests: one sent before (a consumer just created) is lost without an
// error, and the client learns of it only from missing heartbeats. A
// single server's consumer has no cluster and returns at once.
func waitLeader(ctx context.Context, cons jetstream.Consumer) error {
	for info := cons.CachedInfo(); info.Cluster != nil && info.Cluster.Leader == ""; {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(leaderPoll):
		}
		var err error
		if info, err = cons.Info(ctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
			return fmt.Errorf("wait for a leader: %w", err)
		}
		if info == nil {
			info = &jetstream.ConsumerInfo{Cluster: &jetstream.ClusterInfo{}}
		}
	}
	return nil
}

// Remove implements timeoutd.Source: it stops consuming partition p. The
// commands of p already fetched stay in the buffer; the fence of ingest
// refuses them and they are negatively acknowledged, so the next owner gets
// them.
func (c *Consumer) Remove(p int) {
	c.mu.Lock()
	part, ok := c.parts[p]
	delete(c.parts, p)
	c.mu.Unlock()
	if ok && part.cc != nil {
		part.cc.Stop()
	}
}

// Next implements timeoutd.Source. A batch holds BatchSize commands at
// most, counting a batch message's (events.HeaderBatch), unless its first
// message alone holds more. Once what has arrived is taken, it waits up to
// Linger for more; ctx ending during the wait hands the batch back to
// JetStream (a negative ack: redelivered at once) and returns ctx's error.
func (c *Consumer) Next(ctx context.Context) ([]timeoutd.Message, error) {
	var first jetstream.Msg
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case first = <-c.msgs:
	}
	batch := make([]timeoutd.Message, 1, min(c.cfg.BatchSize, 1+len(c.msgs)))
	batch[0] = msg{first}
	var linger *time.Timer
	for n := commands(first); n < c.cfg.BatchSize; {
		var m jetstream.Msg
		select {
		case m = <-c.msgs:
		default: // what has arrived is taken: linger
			if c.cfg.Linger < 0 {
				return batch, nil
			}
			if linger == nil {
				linger = time.NewTimer(c.cfg.Linger)
				defer linger.Stop()
			}
			select {
			case m = <-c.msgs:
			case <-linger.C:
				return batch, nil
			case <-ctx.Done():
				nak(batch)
				return nil, ctx.Err()
			}
		}
		batch = append(batch, msg{m})
		n += commands(m)
	}
	return batch, nil
}

// nak negatively acknowledges every message of batch, for redelivery now.
func nak(batch []timeoutd.Message) {
	for _, m := range batch {
		_ = m.NakWithDelay(0)
	}
}

// commands returns how many commands m holds (events.BatchCount).
func commands(m jetstream.Msg) int { return events.BatchCount(m.Headers().Get(events.HeaderBatch)) }

// Mark implements timeoutd.Source: the sequence of the last command stored
// in partition p's stream now (0 when it has none), from the stream's info.
func (c *Consumer) Mark(ctx context.Context, p int) (uint64, error) {
	ctx, cancel := context.WithTimeout(ctx, lookupTimeout)
	defer cancel()
	s, err := c.js.Stream(ctx, events.CommandStream(p))
	if err != nil {
		return 0, fmt.Errorf("last command of partition %d: %w", p, err)
	}
	return s.CachedInfo().State.LastSeq, nil
}

// Consumed implements timeoutd.Source: partition p's consumer has acked
// every command up to mark when its ack floor reached mark, or when it has
// nothing pending or unacked at all.
func (c *Consumer) Consumed(ctx context.Context, p int, mark uint64) (bool, error) {
	c.mu.Lock()
	part, ok := c.parts[p]
	c.mu.Unlock()
	if !ok || part.cons == nil {
		return false, fmt.Errorf("partition %d is not consumed here (or its consumption is restarting)", p)
	}
	info, err := part.cons.Info(ctx)
	if err != nil {
		return false, fmt.Errorf("consumer info %s: %w", DurableName(p), err)
	}
	return info.AckFloor.Stream >= mark || (info.NumPending == 0 && info.NumAckPending == 0), nil
}

// Close implements timeoutd.Source: it stops every partition's consumer and
// negatively acknowledges what was fetched and not returned by Next.
func (c *Consumer) Close() error {
	c.cancel()
	c.mu.Lock()
	parts := c.parts
	c.parts = map[int]partition{}
	c.mu.Unlock()
	for _, part := range parts {
		if part.cc != nil {
			part.cc.Stop()
		}
	}
	for _, part := range parts {
		if part.cc != nil {
			<-part.cc.Closed()
		}
	}
	for {
		select {
		case m := <-c.msgs:
			_ = m.Nak()
		default:
			return nil
		}
	}
}

// msg adapts a jetstream.Msg to timeoutd.Message.
type msg struct{ jetstream.Msg }

// Header returns the value of the message's header key.
func (m msg) Header(key string) string { return m.Headers().Get(key) }

// Seq returns the message's stream sequence.
func (m msg) Seq() uint64 {
	md, err := m.Metadata()
	if err != nil {
		return 0
	}
	return md.Sequence.Stream
}
