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
// dlq.timeoutd.<reason>.
const Service = "timeoutd"

// DeadLetters publishes dead letters on events.DeadLetterSubject(Service,
// reason) with their Nats-Msg-Id. It implements timeoutd.DeadLetterer.
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
	m := &nats.Msg{Subject: events.DeadLetterSubject(Service, d.Reason), Data: data, Header: nats.Header{}}
	m.Header.Set(jetstream.MsgIDHeader, d.MsgID())
	if _, err := p.js.PublishMsg(ctx, m); err != nil {
		return fmt.Errorf("publish dead letter: %w", err)
	}
	return nil
}
