package timeoutdbench

import (
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ordertimeout/ordertimeout/pkg/events"
)

// churnTick is how often Churn publishes the commands that fell due.
const churnTick = 10 * time.Millisecond

// Churn keeps a steady churn on live orders: Live slots, each holding one
// pending order key, visited in turn at Rate commands a second. A visit
// either extends the slot's order (a set at the next version, deadline
// Deadline from now) or, every other visit, settles it (a clear at the next
// version) and opens the slot's next order (a set at version 1): so the
// pending count stays at Live and, as long as a slot is visited again
// within Deadline, nothing fires. It publishes on a NATS connection of its
// own, so the storms' publishes and PubAck waits on Bench's do not wait for
// its commands.
type Churn struct {
	nc       *nats.Conn
	js       jetstream.JetStream
	prefix   string
	rate     int
	deadline time.Duration
	version  []int64 // each slot's order's last version
	gen      []int32 // each slot's order number
	next     int     // the next slot to visit
	// published counts the commands published, failed those that got no
	// PubAck.
	published, failed atomic.Int64
}

// NewChurn connects to Config.NATSURL and returns a churn of live orders
// keyed "<prefix>-<slot>-<n>" at rate commands a second, each set with a
// deadline deadline ahead. Seed publishes the live orders' first sets.
func (b *Bench) NewChurn(prefix string, live, rate int, deadline time.Duration) (*Churn, error) {
	if live <= 0 || rate <= 0 || deadline <= 0 {
		return nil, fmt.Errorf("timeoutdbench: churn: live %d, rate %d and deadline %s must be positive", live, rate, deadline)
	}
	nc, err := nats.Connect(b.cfg.NATSURL, nats.Name("loadgen-churn"))
	if err != nil {
		return nil, fmt.Errorf("connect nats: %w", err)
	}
	c := &Churn{nc: nc, prefix: prefix, rate: rate, deadline: deadline, version: make([]int64, live), gen: make([]int32, live)}
	c.js, err = jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(MaxPendingDefault),
		jetstream.WithPublishAsyncErrHandler(func(jetstream.JetStream, *nats.Msg, error) { c.failed.Add(1) }))
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("jetstream: %w", err)
	}
	return c, nil
}

// Close closes the churn's NATS connection.
func (c *Churn) Close() { c.nc.Close() }

// Published returns the commands published so far and how many of them
// got no PubAck.
func (c *Churn) Published() (published, failed int64) {
	return c.published.Load(), c.failed.Load()
}

func (c *Churn) key(slot int) string { return fmt.Sprintf("%s-%d-%d", c.prefix, slot, c.gen[slot]) }

// Seed returns the first set command of every slot, for Bench.Live, and
// marks the slots as holding version 1.
func (c *Churn) Seed(now time.Time) func(i int) events.Command {
	for i := range c.version {
		c.version[i] = 1
	}
	return func(i int) events.Command { return setCommand(c.key(i), 1, now.Add(c.deadline)) }
}

// Run publishes the commands as they fall due at the rate until ctx ends,
// then waits up to a minute for their PubAcks. It returns an error only if
// a publish fails outright; a command without a PubAck is counted.
func (c *Churn) Run(ctx context.Context) error {
	t := time.NewTicker(churnTick)
	defer t.Stop()
	start := time.Now()
	var sent int64
	for {
		select {
		case <-ctx.Done():
			select {
			case <-c.js.PublishAsyncComplete():
			case <-time.After(time.Minute):
			}
			return nil
		case now := <-t.C:
			due := int64(now.Sub(start).Seconds() * float64(c.rate))
			for sent < due {
				n, err := c.visit(now)
				if err != nil {
					return err
				}
				sent += int64(n)
			}
		}
	}
}

// visit extends or settles the next slot's order and returns the commands
// published.
func (c *Churn) visit(now time.Time) (int, error) {
	s := c.next
	c.next = (c.next + 1) % len(c.version)
	c.version[s]++
	if c.version[s]%2 == 0 {
		return 1, c.publish(setCommand(c.key(s), c.version[s], now.Add(c.deadline)))
	}
	clr := events.Command{Schema: events.SchemaVersion, Kind: events.KindClear, Key: c.key(s), Version: c.version[s]}
	if err := c.publish(clr); err != nil {
		return 0, err
	}
	c.gen[s]++
	c.version[s] = 1
	return 2, c.publish(setCommand(c.key(s), 1, now.Add(c.deadline)))
}

func (c *Churn) publish(cmd events.Command) error {
	data, err := json.Marshal(cmd)
	if err != nil {
		return fmt.Errorf("encode command: %w", err)
	}
	if _, err := c.js.PublishAsync(cmd.Subject(), data, jetstream.WithMsgID(cmd.MsgID(events.NewNonce())), jetstream.WithStallWait(time.Minute)); err != nil {
		return fmt.Errorf("churn: publish %s: %w", cmd.Subject(), err)
	}
	c.published.Add(1)
	return nil
}
