package events

import (
	"crypto/sha256"
	"encoding/hex"
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
	// Subject is where to replay the rejected message: a command's
	// subject as its producer published it, timeouts.cmd.<key>, not the
	// partitioned form its stream filed it under; an event's, the subject
	// it was received on. Data is the rejected message's data as
	// received (a batch line's: that line).
	Subject string `json:"subject"`
	Data    []byte `json:"data"`
	// RejectedMsgID is the rejected message's Nats-Msg-Id, "" for none.
	RejectedMsgID string `json:"msg_id,omitempty"`
	// StreamSeq is the sequence of the rejected message in its stream.
	StreamSeq uint64 `json:"stream_seq"`
	// Line is the 1-based line of the rejected command in a batch message
	// (HeaderBatch), whose Data is then that line alone; 0 for a message of
	// one command.
	Line       int       `json:"line,omitempty"`
	RejectedAt time.Time `json:"rejected_at"`
}

// NewDeadLetter builds the dead letter of a message rejected with err:
// its subject, data, Nats-Msg-Id (msgID, "" for none) and stream
// sequence.
func NewDeadLetter(subject string, data []byte, msgID string, seq uint64, err error, at time.Time) DeadLetter {
	d := DeadLetter{Schema: SchemaVersion, Reason: ReasonOf(err), Detail: err.Error(), Subject: subject, Data: data, RejectedMsgID: msgID, StreamSeq: seq, RejectedAt: at.UTC()}
	var e *Error
	if errors.As(err, &e) {
		d.Field, d.Detail = e.Field, e.Detail
	}
	return d
}

// MsgID returns the Nats-Msg-Id of the dead letter,
// dlq:<subject>:<stream seq>:<digest>, or
// dlq:<subject>:<stream seq>:<line>:<digest> for a command of a batch,
// where digest is 128 bits of SHA-256 of the rejected message's
// Nats-Msg-Id and data, in hex. A redelivered rejected message is
// dead-lettered once, and each rejected command of a batch has a dead
// letter of its own. The dead letter stream is shared by every tenant:
// the digest makes the id of a tenant's dead letter one that no other
// tenant can know before it is published, so none can publish it first
// and have the genuine one dropped as its duplicate (a sequence and a
// subject can be observed or guessed; a command's nonce and an expiry's
// fired_at cannot).
func (d DeadLetter) MsgID() string {
	h := sha256.New()
	h.Write([]byte(d.RejectedMsgID))
	h.Write([]byte{0})
	h.Write(d.Data)
	id := "dlq:" + d.Subject + ":" + itoa(d.StreamSeq)
	if d.Line > 0 {
		id += ":" + itoa(uint64(d.Line))
	}
	return id + ":" + hex.EncodeToString(h.Sum(nil)[:16])
}
