package events

import (
	"errors"
	"time"
)

// DeadLetter wraps a message a consumer rejected. It is published on
// DeadLetterSubject(service, Reason) so operators can inspect, fix and replay it.
type DeadLetter struct {
	Schema int    `json:"schema"`
	Reason Reason `json:"reason"`
	// Field and Detail explain the rejection, as in *Error.
	Field  string `json:"field,omitempty"`
	Detail string `json:"detail"`
	// Subject and Data are the rejected message as received.
	Subject string `json:"subject"`
	Data    []byte `json:"data"`
	// StreamSeq is the sequence of the rejected message in its stream.
	StreamSeq  uint64    `json:"stream_seq"`
	RejectedAt time.Time `json:"rejected_at"`
}

// NewDeadLetter builds the dead letter of a message rejected with err.
func NewDeadLetter(subject string, data []byte, seq uint64, err error, at time.Time) DeadLetter {
	d := DeadLetter{Schema: SchemaVersion, Reason: ReasonOf(err), Detail: err.Error(), Subject: subject, Data: data, StreamSeq: seq, RejectedAt: at.UTC()}
	var e *Error
	if errors.As(err, &e) {
		d.Field, d.Detail = e.Field, e.Detail
	}
	return d
}

// MsgID returns the Nats-Msg-Id of the dead letter,
// dlq:<subject>:<stream seq>, so a redelivered rejected message is
// dead-lettered once.
func (d DeadLetter) MsgID() string { return "dlq:" + d.Subject + ":" + itoa(d.StreamSeq) }
