package events

import (
	"strings"
)

// Stream names of the platform. Services create them idempotently at start
// (see internal/streams); consumers bind to them by name.
const (
	// StreamCommandsPrefix names the command streams, one per partition
	// (CommandStream): TIMEOUT_COMMANDS_00 … TIMEOUT_COMMANDS_63. Each holds
	// its partition's commands as a work queue: per-key order is kept, and
	// the newest version wins at timeoutd.
	StreamCommandsPrefix = "TIMEOUT_COMMANDS_"
	// StreamCommandsLegacy is the single command stream of every partition
	// that the per-partition streams replace; the streams bootstrap removes
	// it once it is empty (internal/streams).
	StreamCommandsLegacy = "TIMEOUT_COMMANDS"
	// StreamExpiries holds expiry events: fire subjects and missed events.
	StreamExpiries = "TIMEOUT_EXPIRIES"
	// StreamOrderEvents holds order domain events.
	StreamOrderEvents = "ORDER_EVENTS"
	// StreamDeadLetters holds messages a consumer rejected, with the reason.
	StreamDeadLetters = "DEAD_LETTERS"
)

// Subject prefixes and wildcards.
const (
	// CommandSubjectPrefix is followed by the key: timeouts.cmd.<key>.
	CommandSubjectPrefix = "timeouts.cmd."
	// CommandSubjects matches every timeout command.
	CommandSubjects = CommandSubjectPrefix + ">"
	// MissedSubjectPrefix is followed by the key: timeouts.missed.<key>.
	MissedSubjectPrefix = "timeouts.missed."
	// OrderCancelSubjectPrefix is the fire subject prefix the orders service
	// uses: the expiry of an order's payment deadline is published on
	// orders.cancel.<order id>.
	OrderCancelSubjectPrefix = "orders.cancel."
	// OrderCancelSubjects matches the payment deadline expiries of every
	// order: the filter of the orders service's cancel consumer.
	OrderCancelSubjects = OrderCancelSubjectPrefix + ">"
	// DeadLetterSubjectPrefix is followed by the service and the reason:
	// dlq.<service>.<reason>.
	DeadLetterSubjectPrefix = "dlq."
)

// CommandSubject returns the subject of the commands for key.
func CommandSubject(key string) string { return CommandSubjectPrefix + key }

// MissedSubject returns the subject of the missed event of key.
func MissedSubject(key string) string { return MissedSubjectPrefix + key }

// OrderCancelSubject returns the fire subject of an order's payment deadline.
func OrderCancelSubject(orderID string) string { return OrderCancelSubjectPrefix + orderID }

// OrderEventSubject returns orders.<type>.<order id>, e.g. orders.paid.42.
func OrderEventSubject(t OrderEventType, orderID string) string {
	return "orders." + string(t) + "." + orderID
}

// OrderEventSubjects returns orders.<type>.>, which matches the events of
// type t of every order, e.g. the filter of a consumer of cancellations.
func OrderEventSubjects(t OrderEventType) string { return "orders." + string(t) + ".>" }

// DeadLetterSubject returns dlq.<service>.<reason>.
func DeadLetterSubject(service string, reason Reason) string {
	return DeadLetterSubjectPrefix + service + "." + string(reason)
}

// MaxKeyLen is the longest accepted key, in bytes.
const MaxKeyLen = 128

// ValidKey reports whether key is a valid timeout key or order id: 1 to
// MaxKeyLen bytes of ASCII letters, digits, '-' and '_', so it is safe as a
// NATS subject token and in a Nats-Msg-Id.
func ValidKey(key string) bool {
	if len(key) == 0 || len(key) > MaxKeyLen {
		return false
	}
	for i := 0; i < len(key); i++ {
		c := key[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '-', c == '_':
		default:
			return false
		}
	}
	return true
}

// MaxSubjectLen is the longest accepted fire subject, in bytes.
const MaxSubjectLen = 256

// ValidSubject reports whether s is a literal NATS subject a message can be
// published on: dot-separated non-empty tokens of printable ASCII without
// spaces or the wildcards '*' and '>'.
func ValidSubject(s string) bool {
	if len(s) == 0 || len(s) > MaxSubjectLen {
		return false
	}
	for _, tok := range strings.Split(s, ".") {
		if tok == "" {
			return false
		}
		for i := 0; i < len(tok); i++ {
			c := tok[i]
			if c <= ' ' || c >= 0x7f || c == '*' || c == '>' {
				return false
			}
		}
	}
	return true
}
