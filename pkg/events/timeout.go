package events

import (
	"bytes"
	"encoding/json"
	"math"
	"strconv"
	"time"
)

// SchemaVersion is the schema version this package writes and the newest it
// reads. Messages without a schema field are read as version 1.
const SchemaVersion = 1

// MaxPayloadBytes bounds the opaque payload a command may carry; it is
// returned verbatim in the expiry event.
const MaxPayloadBytes = 4096

// CommandKind is the kind of a timeout command.
type CommandKind string

// The command kinds.
const (
	// KindSet creates, moves or extends the deadline of a key.
	KindSet CommandKind = "set"
	// KindClear removes the deadline of a key (the order was paid or cancelled).
	KindClear CommandKind = "clear"
)

// Command is a timeout command, published on CommandSubject(Key).
type Command struct {
	Schema  int         `json:"schema"`
	Kind    CommandKind `json:"kind"`
	Key     string      `json:"key"`
	Version int64       `json:"version"`
	// Deadline is the absolute time the timeout expires (set only), in UTC.
	Deadline time.Time `json:"deadline,omitzero"`
	// FireSubject is where the expiry event goes (set only); timeoutd only
	// accepts subjects under its configured prefixes.
	FireSubject string `json:"fire_subject,omitempty"`
	// MaxLatenessMs is the misfire bound (set only): when the timeout is
	// processed later than Deadline plus this bound (say after a long outage),
	// a "missed" event is published on MissedSubject(Key) instead of firing.
	// 0 means fire however late (the default).
	MaxLatenessMs int64 `json:"max_lateness_ms,omitempty"`
	// Payload is an opaque JSON object returned in the expiry event, at
	// most MaxPayloadBytes.
	Payload json.RawMessage `json:"payload,omitempty"`
	// IssuedAt is when the producer made the change the command carries,
	// by its clock, in UTC (the orders service: the order's updated_at). A
	// command republished or replayed later keeps it. Optional in the
	// schema; timeoutd requires it while it forgets old keys' versions
	// (TIMEOUTD_MARK_RETENTION) and refuses a command issued before that
	// retention (ReasonCommandTooOld), which could be a stale version of a
	// forgotten key.
	IssuedAt time.Time `json:"issued_at,omitzero"`
	// TraceParent is the W3C trace context the command travelled with: its
	// message's traceparent header, or its line's entry of a batch's
	// HeaderBatchTraceParents. It is not part of the JSON; timeoutd stores
	// it with the timeout so that the fire links back to the set.
	TraceParent string `json:"-"`
}

// Subject returns the subject the command is published on.
func (c Command) Subject() string { return CommandSubject(c.Key) }

// Validate checks the command as DecodeCommand does after parsing.
func (c Command) Validate() error {
	if c.Schema < 1 || c.Schema > SchemaVersion {
		return invalid(ReasonUnsupportedSchema, "schema", "schema version %d is not supported (newest is %d)", c.Schema, SchemaVersion)
	}
	if c.Kind != KindSet && c.Kind != KindClear {
		return invalid(ReasonUnknownKind, "kind", "must be %q or %q, got %q", KindSet, KindClear, c.Kind)
	}
	if !ValidTimeoutKey(c.Key) {
		return invalid(ReasonInvalidKey, "key", "must be 1 to %d letters, digits, '-' or '_', after <tenant>. for a tenant other than %s", MaxKeyLen, OrdersTenant)
	}
	if c.Version <= 0 {
		return invalid(ReasonInvalidVersion, "version", "must be a positive integer, got %d", c.Version)
	}
	if !c.IssuedAt.IsZero() {
		if err := CheckTime("issued_at", c.IssuedAt); err != nil {
			return err
		}
	}
	if c.Kind == KindClear {
		return nil
	}
	if c.Deadline.IsZero() {
		return invalid(ReasonInvalidDeadline, "deadline", "is required for %q", KindSet)
	}
	if err := CheckTime("deadline", c.Deadline); err != nil {
		return err
	}
	if !ValidSubject(c.FireSubject) {
		return invalid(ReasonInvalidSubject, "fire_subject", "must be a literal NATS subject of at most %d bytes", MaxSubjectLen)
	}
	if c.MaxLatenessMs < 0 {
		return invalid(ReasonInvalidField, "max_lateness_ms", "must not be negative, got %d", c.MaxLatenessMs)
	}
	return validPayload(c.Payload)
}

func validPayload(p json.RawMessage) error {
	if len(p) == 0 {
		return nil
	}
	if len(p) > MaxPayloadBytes {
		return invalid(ReasonPayloadTooLarge, "payload", "is %d bytes, the limit is %d", len(p), MaxPayloadBytes)
	}
	if !json.Valid(p) {
		return invalid(ReasonInvalidPayload, "payload", "is not valid JSON")
	}
	if p[0] != '{' { // json.Valid: no leading space in a RawMessage field
		return invalid(ReasonInvalidPayload, "payload", "must be a JSON object")
	}
	return nil
}

// commandWire mirrors Command with the fields whose parsing needs a precise
// error kept as raw text.
type commandWire struct {
	Schema        *int            `json:"schema"`
	Kind          CommandKind     `json:"kind"`
	Key           string          `json:"key"`
	Version       json.RawMessage `json:"version"`
	Deadline      *string         `json:"deadline"`
	FireSubject   string          `json:"fire_subject"`
	MaxLatenessMs int64           `json:"max_lateness_ms"`
	Payload       json.RawMessage `json:"payload"`
	IssuedAt      *string         `json:"issued_at"`
}

// DecodeCommand parses and validates a command. Unknown fields are ignored;
// a missing schema is read as 1; a newer schema, a bad key, a non-positive
// version, a deadline that is not RFC 3339, an invalid fire subject or a
// payload over MaxPayloadBytes is an *Error naming the field. The payload is
// checked for size before JSON parsing cost is spent on the whole message.
func DecodeCommand(data []byte) (Command, error) {
	var w commandWire
	if err := decodeJSON(data, &w); err != nil {
		return Command{}, err
	}
	c := Command{Schema: 1, Kind: w.Kind, Key: w.Key, FireSubject: w.FireSubject, MaxLatenessMs: w.MaxLatenessMs, Payload: w.Payload}
	if w.Schema != nil {
		c.Schema = *w.Schema
	}
	v, err := parseVersion(w.Version)
	if err != nil {
		return Command{}, err
	}
	c.Version = v
	if w.Deadline != nil && c.Kind == KindSet {
		d, err := ParseTime("deadline", *w.Deadline)
		if err != nil {
			return Command{}, err
		}
		c.Deadline = d
	}
	if w.IssuedAt != nil {
		at, err := ParseTime("issued_at", *w.IssuedAt)
		if err != nil {
			return Command{}, err
		}
		c.IssuedAt = at
	}
	if c.Kind == KindClear {
		c.FireSubject, c.Payload, c.MaxLatenessMs = "", nil, 0
	}
	if err := c.Validate(); err != nil {
		return Command{}, err
	}
	return c, nil
}

// Outcome says how a timeout ended.
type Outcome string

// The outcomes of an expiry.
const (
	// OutcomeFired: the deadline passed and the event went to the fire subject.
	OutcomeFired Outcome = "fired"
	// OutcomeMissed: the timeout was processed later than its misfire bound;
	// the event went to MissedSubject(Key) and nothing was fired.
	OutcomeMissed Outcome = "missed"
)

// Expiry is the event timeoutd publishes when a deadline passes. For orders
// it is the cancel event, published on OrderCancelSubject(order id).
type Expiry struct {
	Schema   int       `json:"schema"`
	Outcome  Outcome   `json:"outcome"`
	Key      string    `json:"key"`
	Version  int64     `json:"version"`
	Deadline time.Time `json:"deadline"`
	// FiredAt is the wall time timeoutd decided to fire; never before Deadline.
	FiredAt time.Time `json:"fired_at"`
	// LatenessNs is FiredAt minus Deadline, in nanoseconds.
	LatenessNs int64           `json:"lateness_ns"`
	Payload    json.RawMessage `json:"payload,omitempty"`
	// Reason, on a missed event only, says why the timeout was not fired
	// when it was not its misfire bound: ReasonUnknownTenant, its tenant
	// was removed from the registry, or ReasonSubjectNotAllowed, its fire
	// subject is no longer under one of its tenant's prefixes. Empty for
	// a fired event and a missed one past its bound.
	Reason Reason `json:"reason,omitempty"`
}

// MsgID returns the Nats-Msg-Id of the event: <outcome>:<key>:<version>.
func (e Expiry) MsgID() string {
	return string(e.Outcome) + ":" + e.Key + ":" + strconv.FormatInt(e.Version, 10)
}

type expiryWire struct {
	Schema     *int            `json:"schema"`
	Outcome    Outcome         `json:"outcome"`
	Key        string          `json:"key"`
	Version    json.RawMessage `json:"version"`
	Deadline   string          `json:"deadline"`
	FiredAt    string          `json:"fired_at"`
	LatenessNs int64           `json:"lateness_ns"`
	Payload    json.RawMessage `json:"payload"`
	Reason     Reason          `json:"reason"`
}

// DecodeExpiry parses and validates an expiry event with the same rules as
// DecodeCommand; fired_at before deadline is rejected as invalid.
func DecodeExpiry(data []byte) (Expiry, error) {
	var w expiryWire
	if err := decodeJSON(data, &w); err != nil {
		return Expiry{}, err
	}
	e := Expiry{Schema: 1, Outcome: w.Outcome, Key: w.Key, LatenessNs: w.LatenessNs, Payload: w.Payload, Reason: w.Reason}
	if w.Schema != nil {
		e.Schema = *w.Schema
	}
	if e.Schema < 1 || e.Schema > SchemaVersion {
		return Expiry{}, invalid(ReasonUnsupportedSchema, "schema", "schema version %d is not supported (newest is %d)", e.Schema, SchemaVersion)
	}
	if e.Outcome != OutcomeFired && e.Outcome != OutcomeMissed {
		return Expiry{}, invalid(ReasonUnknownKind, "outcome", "must be %q or %q, got %q", OutcomeFired, OutcomeMissed, e.Outcome)
	}
	if e.Reason != "" && e.Outcome != OutcomeMissed {
		return Expiry{}, invalid(ReasonInvalidField, "reason", "is only set on a %q event", OutcomeMissed)
	}
	if !ValidTimeoutKey(e.Key) {
		return Expiry{}, invalid(ReasonInvalidKey, "key", "must be 1 to %d letters, digits, '-' or '_', after <tenant>. for a tenant other than %s", MaxKeyLen, OrdersTenant)
	}
	var err error
	if e.Version, err = parseVersion(w.Version); err != nil {
		return Expiry{}, err
	}
	if e.Version <= 0 {
		return Expiry{}, invalid(ReasonInvalidVersion, "version", "must be a positive integer, got %d", e.Version)
	}
	if e.Deadline, err = ParseTime("deadline", w.Deadline); err != nil {
		return Expiry{}, err
	}
	if e.FiredAt, err = ParseTime("fired_at", w.FiredAt); err != nil {
		return Expiry{}, err
	}
	if e.FiredAt.Before(e.Deadline) {
		return Expiry{}, invalid(ReasonInvalidDeadline, "fired_at", "is before the deadline")
	}
	if e.LatenessNs < 0 {
		return Expiry{}, invalid(ReasonInvalidField, "lateness_ns", "must not be negative, got %d", e.LatenessNs)
	}
	if err := validPayload(e.Payload); err != nil {
		return Expiry{}, err
	}
	return e, nil
}

// MinTime and MaxTime bound every time of the contract: the range of Unix
// nanoseconds in an int64 (1677-09-21T00:12:43.145224192Z to
// 2262-04-11T23:47:16.854775807Z), in which the services store and compare
// times. A time outside it would silently wrap around (a deadline in 1500
// read back as 2084).
var (
	MinTime = time.Unix(0, math.MinInt64).UTC()
	MaxTime = time.Unix(0, math.MaxInt64).UTC()
)

// CheckTime returns an *Error naming field, with reason
// ReasonDeadlineOutOfRange, when t is outside [MinTime, MaxTime].
func CheckTime(field string, t time.Time) error {
	if t.Before(MinTime) || t.After(MaxTime) {
		return invalid(ReasonDeadlineOutOfRange, field, "must be between %s and %s, got %s",
			MinTime.Format(time.RFC3339Nano), MaxTime.Format(time.RFC3339Nano), t.Format(time.RFC3339Nano))
	}
	return nil
}

// ParseTime parses an RFC 3339 time (fractional seconds allowed) within
// [MinTime, MaxTime] and returns it in UTC; field names the JSON field in
// the error.
func ParseTime(field, s string) (time.Time, error) {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, invalid(ReasonInvalidDeadline, field, "must be an RFC 3339 time such as 2026-01-02T15:04:05.123Z, got %q", truncate(s))
	}
	if err := CheckTime(field, t); err != nil {
		return time.Time{}, err
	}
	return t.UTC(), nil
}

// parseVersion parses the version's raw JSON: an integer literal, not a
// string holding one (json.Number would accept "1").
func parseVersion(raw json.RawMessage) (int64, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return 0, invalid(ReasonInvalidVersion, "version", "is required")
	}
	if raw[0] == '"' {
		return 0, invalid(ReasonInvalidVersion, "version", "must be a JSON integer, not a string: %s", truncate(string(raw)))
	}
	v, err := strconv.ParseInt(string(raw), 10, 64)
	if err != nil {
		return 0, invalid(ReasonInvalidVersion, "version", "must be an integer, got %s", truncate(string(raw)))
	}
	return v, nil
}

// decodeJSON unmarshals one JSON object into v and rejects trailing data
// and a member name given twice: encoding/json would keep the last one
// (matched case-insensitively), another parser the first, and the two would
// read different messages.
func decodeJSON(data []byte, v any) error {
	if err := json.Unmarshal(data, v); err != nil {
		return invalid(ReasonMalformed, "", "malformed JSON: %v", err)
	}
	if name, ok := duplicateMember(data); ok {
		return invalid(ReasonMalformed, name, "member %q is given more than once", truncate(name))
	}
	return nil
}

// duplicateMember returns a member name of the top-level object of data,
// which is valid JSON, that repeats an earlier one as encoding/json matches
// names to fields: unescaped and case-insensitively. One pass over the
// bytes; it allocates only for names written with escapes.
func duplicateMember(data []byte) (string, bool) {
	data = bytes.TrimLeft(data, " \t\r\n")
	if len(data) == 0 || data[0] != '{' {
		return "", false
	}
	var names [][]byte
	depth, key := 0, false
	for i := 0; i < len(data); i++ {
		switch data[i] {
		case '{', '[':
			depth++
			key = depth == 1
		case '}', ']':
			depth--
		case ',':
			key = depth == 1
		case '"':
			j, escaped := i+1, false
			for ; data[j] != '"'; j++ {
				if data[j] == '\\' {
					j, escaped = j+1, true
				}
			}
			if key {
				name := data[i+1 : j]
				if escaped {
					var s string
					_ = json.Unmarshal(data[i:j+1], &s) // valid JSON string
					name = []byte(s)
				}
				for _, n := range names {
					if bytes.EqualFold(n, name) {
						return string(name), true
					}
				}
				names, key = append(names, name), false
			}
			i = j
		}
	}
	return "", false
}

func truncate(s string) string {
	const limit = 64
	if len(s) > limit {
		return s[:limit] + "…"
	}
	return s
}
