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
	// Tenant, when set, is the tenant whose message it is (timeoutd: the
	// tenant whose command subject it was published on); the dead letter
	// is then published on TenantDeadLetterSubject.
	Tenant string `json:"tenant,omitempty"`
	// Subject and Data are the rejected message as received.
	Subject string `json:"subject"`
	Data    []byte `json:"data"`
	// StreamSeq is the sequence of the rejected message in its stream.
	StreamSeq uint64 `json:"stream_seq"`
	// Line is the 1-based line of the rejected command in a batch message
	// (HeaderBatch), whose Data is then that line alone; 0 for a message of
	// one command.
	Line       int       `json:"line,omitempty"`
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
// dlq:<subject>:<stream seq>, or dlq:<subject>:<stream seq>:<line> for a
// command of a batch, so a redelivered rejected message is dead-lettered
// once and each rejected command of a batch has a dead letter of its own.
func (d DeadLetter) MsgID() string {
	id := "dlq:" + d.Subject + ":" + itoa(d.StreamSeq)
	if d.Line > 0 {
		id += ":" + itoa(uint64(d.Line))
	}
	return id
}
