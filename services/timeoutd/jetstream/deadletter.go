package jetstream

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ordertimeout/ordertimeout/pkg/events"
	"github.com/ordertimeout/ordertimeout/services/timeoutd"
)

// Service is the service token of timeoutd's dead-letter subjects:
// dlq.timeoutd.<tenant>.<reason>, or dlq.timeoutd.<reason> for a message
// of no tenant.
const Service = "timeoutd"

// DeadLetters publishes dead letters on
// events.TenantDeadLetterSubject(Service, tenant, reason) (or
// events.DeadLetterSubject(Service, reason) for one without a tenant) with
// their Nats-Msg-Id. It implements timeoutd.DeadLetterer.
type DeadLetters struct{ js jetstream.JetStream }

var _ timeoutd.DeadLetterer = DeadLetters{}

// NewDeadLetters returns a DeadLetters publishing through js.
func NewDeadLetters(js jetstream.JetStream) DeadLetters { return DeadLetters{js: js} }

// DeadLetter publishes d and waits for its PubAck.
func (p DeadLetters) DeadLetter(ctx context.Context, d events.DeadLetter) error {
	data, err := json.Marshal(d)
	if err != nil {
		return fmt.Errorf("encode dead letter: %w", err)
	}
	subject := events.DeadLetterSubject(Service, d.Reason)
	if d.Tenant != "" {
		subject = events.TenantDeadLetterSubject(Service, d.Tenant, d.Reason)
	}
	m := &nats.Msg{Subject: subject, Data: data, Header: nats.Header{}}
	m.Header.Set(jetstream.MsgIDHeader, d.MsgID())
	if _, err := p.js.PublishMsg(ctx, m); err != nil {
		return fmt.Errorf("publish dead letter: %w", err)
	}
	return nil
}
