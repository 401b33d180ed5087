package events

import (
	"errors"
	"fmt"
)

// Reason is a machine-readable decoding or validation failure. It is used as
// the dead-letter subject token and as a metric label, so the set is small and
// stable; it only grows.
type Reason string

// The reasons a message is rejected.
const (
	ReasonMalformed          Reason = "malformed_json"
	ReasonUnsupportedSchema  Reason = "unsupported_schema"
	ReasonUnknownKind        Reason = "unknown_kind"
	ReasonInvalidKey         Reason = "invalid_key"
	ReasonInvalidVersion     Reason = "invalid_version"
	ReasonInvalidDeadline    Reason = "invalid_deadline"
	ReasonDeadlineOutOfRange Reason = "deadline_out_of_range"
	ReasonInvalidSubject     Reason = "invalid_subject"
	ReasonSubjectNotAllowed  Reason = "subject_not_allowed"
	ReasonSubjectMismatch    Reason = "subject_mismatch"
	ReasonPayloadTooLarge    Reason = "payload_too_large"
	ReasonInvalidPayload     Reason = "invalid_payload"
	ReasonInvalidField       Reason = "invalid_field"
	// ReasonCommandTooOld: the command was issued longer ago than its
	// consumer still keeps the versions of forgotten keys (timeoutd's
	// TIMEOUTD_MARK_RETENTION), so it cannot be told from a stale one.
	ReasonCommandTooOld Reason = "command_too_old"
	// ReasonUnknownTenant: the command's subject names a tenant its
	// consumer does not know (timeoutd's tenant registry).
	ReasonUnknownTenant Reason = "unknown_tenant"
	// ReasonForeignKey: the command's key belongs to another tenant than
	// the one whose subject it was published on.
	ReasonForeignKey Reason = "foreign_key"
	// ReasonGuessableMsgID: the command message's Nats-Msg-Id does not end
	// in a nonce (CheckMsgID), so another tenant could have its command
	// dropped as a duplicate.
	ReasonGuessableMsgID Reason = "guessable_msg_id"
)

// Error describes why a message was rejected: the reason, the JSON field it
// concerns (empty for the whole message) and a human-readable detail.
type Error struct {
	Reason Reason
	Field  string
	Detail string
}

// Error implements error as "events: <field>: <detail>".
func (e *Error) Error() string {
	if e.Field == "" {
		return "events: " + e.Detail
	}
	return "events: " + e.Field + ": " + e.Detail
}

func invalid(reason Reason, field, format string, args ...any) *Error {
	return &Error{Reason: reason, Field: field, Detail: fmt.Sprintf(format, args...)}
}

// ReasonOf returns the Reason of the first *Error in err's chain, or
// ReasonInvalidField when err is not a decoding error.
func ReasonOf(err error) Reason {
	var e *Error
	if errors.As(err, &e) {
		return e.Reason
	}
	return ReasonInvalidField
}
