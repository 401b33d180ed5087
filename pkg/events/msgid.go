package events

import (
	"crypto/rand"
	"encoding/base64"
	"strings"
)

// HeaderMsgID is the header of a message's id, JetStream's Nats-Msg-Id.
const HeaderMsgID = "Nats-Msg-Id"

// NonceLen is the length of a nonce (NewNonce), and the least length of
// the last part of a command message's Nats-Msg-Id that CheckMsgID
// accepts.
const NonceLen = 22

// NewNonce returns a fresh nonce for a command's Nats-Msg-Id
// (Command.MsgID): 128 bits from crypto/rand in unpadded base64url, 22
// characters.
//
// The command streams are shared by every tenant, and JetStream drops a
// message whose Nats-Msg-Id it stored within its duplicate window,
// whoever published it. An id another tenant can predict lets that
// tenant publish it first, on its own subject, and have the genuine
// command dropped as a duplicate; a nonce it cannot guess closes that
// channel, and a republish of the same command, which reuses its id,
// is still dropped (docs/ARCHITECTURE.md, "Tenant isolation").
func NewNonce() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// MsgID returns the Nats-Msg-Id of the command with the given nonce:
// <kind>:<key>:<version>:<nonce>. A producer mints the nonce (NewNonce)
// once, when it first writes the command, keeps it with the command (the
// outbox row's msg_id), and sends the same id on every republish.
func (c Command) MsgID(nonce string) string {
	return string(c.Kind) + ":" + c.Key + ":" + itoa(uint64(c.Version)) + ":" + nonce
}

// CheckMsgID returns the *Error (ReasonGuessableMsgID) that refuses a
// command message whose Nats-Msg-Id another tenant could predict: one
// whose last ':'-separated part is not at least NonceLen letters, digits,
// '-' or '_'. A command's id (Command.MsgID), a batch's (BatchMsgID) and a
// replayed dead letter's ("replay:" + DeadLetter.MsgID) pass; the ids of
// the contract before nonces (<kind>:<key>:<version>) and a missing id do
// not.
func CheckMsgID(id string) error {
	last := id[strings.LastIndexByte(id, ':')+1:]
	ok := len(last) >= NonceLen
	for i := 0; ok && i < len(last); i++ {
		c := last[i]
		ok = c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_'
	}
	if ok {
		return nil
	}
	if id == "" {
		return invalid(ReasonGuessableMsgID, "Nats-Msg-Id", "is required: <kind>:<key>:<version>:<nonce>, with a nonce of %d random characters minted once per command", NonceLen)
	}
	return invalid(ReasonGuessableMsgID, "Nats-Msg-Id", "%q does not end in a nonce of at least %d letters, digits, '-' or '_' (<kind>:<key>:<version>:<nonce>): another tenant could publish it first and have this command dropped as its duplicate", truncate(id), NonceLen)
}
