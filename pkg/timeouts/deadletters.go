package timeouts

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ordertimeout/ordertimeout/pkg/events"
)

// DeadLetterDurable returns the name of the durable consumer through which
// tenant reads the dead letters of its commands: <tenant>-dlq, the only
// one its NATS user may use on DEAD_LETTERS.
func DeadLetterDurable(tenant string) string { return tenant + "-dlq" }

// ReadDeadLetters reads the dead letters timeoutd published of tenant's
// commands (dlq.timeoutd.<tenant>.<reason>, events.TenantDeadLetterSubject)
// through the durable consumer DeadLetterDurable(tenant), oldest first,
// and calls fn with each: fn returns nil to acknowledge it (it is then
// never read again: fixed and replayed, or given up), or an error that
// stops the read with it, the dead letter left to be read again. It
// returns nil once no dead letter is left, or ctx's error.
func ReadDeadLetters(ctx context.Context, js jetstream.JetStream, tenant string, fn func(events.DeadLetter) error) error {
	if !events.ValidTenant(tenant) {
		return fmt.Errorf("timeouts: tenant %q is not a valid tenant name", tenant)
	}
	cons, err := js.CreateOrUpdateConsumer(ctx, events.StreamDeadLetters, jetstream.ConsumerConfig{
		Durable: DeadLetterDurable(tenant), FilterSubject: events.TenantDeadLetterSubject("timeoutd", tenant, "") + ">",
		AckPolicy: jetstream.AckExplicitPolicy, AckWait: time.Minute, DeliverPolicy: jetstream.DeliverAllPolicy,
	})
	if err != nil {
		return fmt.Errorf("timeouts: dead-letter consumer of %s: %w", tenant, err)
	}
	for {
		batch, err := cons.FetchNoWait(64)
		if err != nil {
			return fmt.Errorf("timeouts: fetch dead letters: %w", err)
		}
		n := 0
		for m := range batch.Messages() {
			n++
			var d events.DeadLetter
			if err := json.Unmarshal(m.Data(), &d); err != nil {
				return fmt.Errorf("timeouts: dead letter %s: %w", m.Subject(), err)
			}
			if err := fn(d); err != nil {
				_ = m.Nak()
				return err
			}
			if err := m.DoubleAck(ctx); err != nil {
				return fmt.Errorf("timeouts: ack dead letter %s: %w", d.MsgID(), err)
			}
		}
		if err := batch.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) {
			return fmt.Errorf("timeouts: fetch dead letters: %w", err)
		}
		if n == 0 {
			return ctx.Err()
		}
	}
}

// Replay publishes data, a rejected command fixed (or d.Data when it
// needed no fix, say after the tenant's registry was corrected), on the
// subject it was rejected from (d.Subject, the tenant's command subject),
// and waits for the PubAck. Its Nats-Msg-Id is replay:<the dead letter's
// id>, so that JetStream does not drop it as a duplicate of the rejected
// command, and a dead letter replayed twice is stored once. A command keeps
// its version: a replayed command older than one timeoutd has is ignored,
// as every stale command.
func Replay(ctx context.Context, js jetstream.JetStream, d events.DeadLetter, data []byte) error {
	m := &nats.Msg{Subject: d.Subject, Data: data, Header: nats.Header{}}
	m.Header.Set(jetstream.MsgIDHeader, "replay:"+d.MsgID())
	if _, err := js.PublishMsg(ctx, m); err != nil {
		return fmt.Errorf("timeouts: replay %s on %s: %w", d.MsgID(), d.Subject, err)
	}
	return nil
}
