package events

import (
	"strconv"
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
	// CommandSubjectPrefix is followed by the key: timeouts.cmd.<key> for
	// a key of the orders tenant, timeouts.cmd.<tenant>.<key> for another
	// tenant's (TenantKey).
	CommandSubjectPrefix = "timeouts.cmd."
	// CommandSubjects matches every timeout command.
	CommandSubjects = CommandSubjectPrefix + ">"
	// MissedSubjectPrefix is followed by the key: timeouts.missed.<key>,
	// timeouts.missed.<tenant>.<key> for a key of a tenant other than orders.
	MissedSubjectPrefix = "timeouts.missed."
	// FenceSubjectPrefix is followed by a partition: timeouts.fence.<p>,
	// in the expiry stream, holds the fence of the partition's owner. An
	// owner publishes one as it takes the partition over, and every expiry
	// event it publishes for the partition expects it to be the subject's
	// last (Nats-Expected-Last-Subject-Sequence with -Subject), so that the
	// stream refuses the late publish of a former owner. Only timeoutd
	// publishes there; consumers of expiries never filter it.
	FenceSubjectPrefix = "timeouts.fence."
	// OrderCancelSubjectPrefix is the fire subject prefix the orders service
	// uses: the expiry of an order's payment deadline is published on
	// orders.cancel.<order id>.
	OrderCancelSubjectPrefix = "orders.cancel."
	// OrderCancelSubjects matches the payment deadline expiries of every
	// order: the filter of the orders service's cancel consumer.
	OrderCancelSubjects = OrderCancelSubjectPrefix + ">"
	// DeadLetterSubjectPrefix is followed by the service and the reason,
	// dlq.<service>.<reason>, or by the service, the tenant whose message it
	// is and the reason, dlq.<service>.<tenant>.<reason>
	// (TenantDeadLetterSubject).
	DeadLetterSubjectPrefix = "dlq."
)

// CommandSubject returns the subject of the commands for key, a timeout
// key (ValidTimeoutKey): timeouts.cmd.<key>, which is
// timeouts.cmd.<tenant>.<local key> for a key of a tenant other than
// orders.
func CommandSubject(key string) string { return CommandSubjectPrefix + key }

// MissedSubject returns the subject of the missed event of key.
func MissedSubject(key string) string { return MissedSubjectPrefix + key }

// FenceSubject returns the subject of partition p's fence.
func FenceSubject(p int) string { return FenceSubjectPrefix + strconv.Itoa(p) }

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

// TenantDeadLetterSubject returns dlq.<service>.<tenant>.<reason>: where
// service dead-letters a message of tenant (timeoutd, a command the
// tenant published), so that the tenant may read its own
// (dlq.timeoutd.<tenant>.>).
func TenantDeadLetterSubject(service, tenant string, reason Reason) string {
	return DeadLetterSubjectPrefix + service + "." + tenant + "." + string(reason)
}

// OrdersTenant is the tenant of the orders service. Its keys are the
// unqualified ones (order ids): every key stored before the platform had
// tenants is its, and its commands keep the subject timeouts.cmd.<key>.
const OrdersTenant = "orders"

// MaxTenantLen is the longest tenant name, in bytes.
const MaxTenantLen = 32

// ValidTenant reports whether name is a valid tenant name: 1 to
// MaxTenantLen bytes of lower-case ASCII letters, digits and '_', starting
// with a letter. A tenant name is a NATS subject token and a NATS user
// name.
func ValidTenant(name string) bool {
	if len(name) == 0 || len(name) > MaxTenantLen || name[0] < 'a' || name[0] > 'z' {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_') {
			return false
		}
	}
	return true
}

// TenantKey returns the timeout key of tenant's key local (ValidKey):
// local itself for OrdersTenant, <tenant>.<local> for any other tenant.
// Each tenant's keys are a namespace of their own: two tenants' keys
// never collide, whatever their local keys.
func TenantKey(tenant, local string) string {
	if tenant == OrdersTenant {
		return local
	}
	return tenant + "." + local
}

// SplitKey returns the tenant and the local key of a timeout key, the
// inverse of TenantKey: OrdersTenant and key for a key without '.'.
func SplitKey(key string) (tenant, local string) {
	t, l, ok := strings.Cut(key, ".")
	if !ok {
		return OrdersTenant, key
	}
	return t, l
}

// ValidTimeoutKey reports whether key is a valid timeout key: a local key
// (ValidKey) of the orders tenant, or <tenant>.<local key> of another
// (ValidTenant, ValidKey). The orders tenant's keys have one spelling, the
// unqualified one: "orders.<key>" is not valid.
func ValidTimeoutKey(key string) bool {
	t, l, ok := strings.Cut(key, ".")
	if !ok {
		return ValidKey(key)
	}
	return t != OrdersTenant && ValidTenant(t) && ValidKey(l)
}

// MaxKeyLen is the longest accepted key, in bytes.
const MaxKeyLen = 128

// ValidKey reports whether key is a valid local key (a tenant's own key,
// see TenantKey) or order id: 1 to
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
