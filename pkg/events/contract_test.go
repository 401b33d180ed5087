package events_test

import (
	"bytes"
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"go.yaml.in/yaml/v3"

	"github.com/ordertimeout/ordertimeout/pkg/events"
)

// contractDir holds the language-neutral contract: the AsyncAPI document
// and a JSON Schema per message (docs/contract/README.md). scripts/contract.sh
// validates the document with the AsyncAPI parser; the tests here keep it
// in step with this package's types and decoders.
const contractDir = "../../docs/contract"

// asyncAPI is the part of docs/contract/asyncapi.yaml the tests read.
type asyncAPI struct {
	Info struct {
		Version string `yaml:"version"`
	} `yaml:"info"`
	Channels map[string]struct {
		Address    string `yaml:"address"`
		Parameters map[string]struct {
			Ref  string   `yaml:"$ref"`
			Enum []string `yaml:"enum"`
		} `yaml:"parameters"`
		Messages map[string]struct {
			Ref string `yaml:"$ref"`
		} `yaml:"messages"`
		JetStream map[string]any `yaml:"x-jetstream"`
	} `yaml:"channels"`
	Components struct {
		Parameters map[string]struct {
			Enum []string `yaml:"enum"`
		} `yaml:"parameters"`
		Messages map[string]contractMessage `yaml:"messages"`
	} `yaml:"components"`
}

// contractMessage is a message of the document: its examples.
type contractMessage struct {
	Examples []struct {
		Name    string            `yaml:"name"`
		Headers map[string]string `yaml:"headers"`
		Payload any               `yaml:"payload"`
	} `yaml:"examples"`
}

func readAsyncAPI(t *testing.T) asyncAPI {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(contractDir, "asyncapi.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var doc asyncAPI
	if err := yaml.Unmarshal(data, &doc); err != nil {
		t.Fatalf("asyncapi.yaml: %v", err)
	}
	return doc
}

// contractSchemas compiles the contract's JSON Schemas with format and
// content assertions on, as a strict validator reads them.
type contractSchemas struct {
	c    *jsonschema.Compiler
	base string // file URL of contractDir, with a trailing slash
}

func newContractSchemas(t *testing.T) *contractSchemas {
	t.Helper()
	dir, err := filepath.Abs(contractDir)
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft7) // an AsyncAPI Schema Object is a superset of draft 7
	c.AssertFormat()
	c.AssertContent()
	base := "file://" + filepath.ToSlash(dir) + "/"
	// The document is YAML: hand the compiler its JSON.
	data, err := os.ReadFile(filepath.Join(dir, "asyncapi.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var doc any
	if err := yaml.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(toJSON(t, doc)))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.AddResource(base+"asyncapi.yaml", v); err != nil {
		t.Fatal(err)
	}
	return &contractSchemas{c: c, base: base}
}

// file compiles schemas/<name>.
func (s *contractSchemas) file(t *testing.T, name string) *jsonschema.Schema {
	t.Helper()
	sch, err := s.c.Compile(s.base + "schemas/" + name)
	if err != nil {
		t.Fatalf("compile %s: %v", name, err)
	}
	return sch
}

// message compiles a schema of the document's message name: its
// "payload" or its "headers". Its $refs resolve as the AsyncAPI parser
// resolves them: within the document, and to files relative to it.
func (s *contractSchemas) message(t *testing.T, name, part string) *jsonschema.Schema {
	t.Helper()
	sch, err := s.c.Compile(s.base + "asyncapi.yaml#/components/messages/" + name + "/" + part)
	if err != nil {
		t.Fatalf("compile the %s of message %s: %v", part, name, err)
	}
	return sch
}

// toJSON encodes a value read from YAML as JSON.
func toJSON(t *testing.T, v any) []byte {
	t.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		t.Fatalf("encode %v as JSON: %v", v, err)
	}
	return data
}

// validate reports whether data, a JSON document, satisfies sch.
func validate(t *testing.T, sch *jsonschema.Schema, data []byte) error {
	t.Helper()
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(data))
	if err != nil {
		return err
	}
	return sch.Validate(v)
}

// decodeContract decodes an example of the document's message msg with
// this package's strict decoder of that message, checks what only Go can
// (outcome, kind, partitions), and returns the Nats-Msg-Id it must carry.
func decodeContract(t *testing.T, msg string, payload []byte, headers map[string]string) (msgID string, reencoded []byte) {
	t.Helper()
	// A command's nonce, and so a batch's id, is the producer's: the
	// example's must pass timeoutd's check, and a command's must be its
	// kind, key and version with it.
	id := headers["Nats-Msg-Id"]
	if msg == "set" || msg == "clear" || msg == "batch" {
		if err := events.CheckMsgID(id); err != nil {
			t.Errorf("Nats-Msg-Id: %v", err)
		}
	}
	nonce := id[strings.LastIndexByte(id, ':')+1:]
	t.Helper()
	switch msg {
	case "set", "clear":
		c, err := events.DecodeCommand(payload)
		if err != nil {
			t.Fatalf("DecodeCommand: %v", err)
		}
		if string(c.Kind) != msg {
			t.Fatalf("kind %q in a %s message", c.Kind, msg)
		}
		return c.MsgID(nonce), toJSON(t, c)
	case "batch":
		lines, err := events.SplitBatch(payload, headers[events.HeaderBatch])
		if err != nil {
			t.Fatalf("SplitBatch: %v", err)
		}
		var first string
		for i, line := range lines {
			c, err := events.DecodeCommand(line)
			if err != nil {
				t.Fatalf("line %d: DecodeCommand: %v", i+1, err)
			}
			if i == 0 {
				first = c.Key
			} else if events.PartitionOf(c.Key) != events.PartitionOf(first) {
				t.Fatalf("line %d: key %s is not of the batch's partition", i+1, c.Key)
			}
		}
		if !strings.HasPrefix(id, "batch:") || len(id) != len("batch:")+32 {
			t.Errorf("a batch's Nats-Msg-Id %q is not batch:<32 hex digits>", id)
		}
		return id, nil
	case "fired", "missed":
		e, err := events.DecodeExpiry(payload)
		if err != nil {
			t.Fatalf("DecodeExpiry: %v", err)
		}
		if string(e.Outcome) != msg {
			t.Fatalf("outcome %q in a %s message", e.Outcome, msg)
		}
		return e.MsgID(), toJSON(t, e)
	case "orderEvent":
		e, err := events.DecodeOrderEvent(payload)
		if err != nil {
			t.Fatalf("DecodeOrderEvent: %v", err)
		}
		return e.MsgID(), toJSON(t, e)
	case "deadLetter":
		// No consumer of dead letters decodes them in Go but operators'
		// tools: read it as they would, strictly.
		var d events.DeadLetter
		dec := json.NewDecoder(bytes.NewReader(payload))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&d); err != nil {
			t.Fatalf("decode dead letter: %v", err)
		}
		if d.Schema != events.SchemaVersion || !slices.Contains(reasons(t), d.Reason) {
			t.Fatalf("dead letter of schema %d, reason %q", d.Schema, d.Reason)
		}
		return d.MsgID(), toJSON(t, d)
	}
	t.Fatalf("message %s of the document has no decoder in this test: add it", msg)
	return "", nil
}

// TestContractExamples reads every message of the AsyncAPI document and
// checks each of its examples: it satisfies the message's payload and
// headers schemas, this package's strict decoder accepts it, its
// Nats-Msg-Id is the one the decoded message derives, and what this
// package encodes from it satisfies the schema again.
func TestContractExamples(t *testing.T) {
	t.Parallel()
	doc := readAsyncAPI(t)
	schemas := newContractSchemas(t)
	if len(doc.Components.Messages) < 7 {
		t.Fatalf("the document has %d messages, want every message of the contract", len(doc.Components.Messages))
	}
	for _, name := range slices.Sorted(maps.Keys(doc.Components.Messages)) {
		m := doc.Components.Messages[name]
		t.Run(name, func(t *testing.T) {
			payload := schemas.message(t, name, "payload")
			headers := schemas.message(t, name, "headers")
			if len(m.Examples) == 0 {
				t.Fatal("no example")
			}
			for _, ex := range m.Examples {
				var data []byte
				if s, ok := ex.Payload.(string); ok { // a batch: lines of JSON
					data = []byte(s)
				} else {
					data = toJSON(t, ex.Payload)
				}
				if err := validate(t, payload, toJSON(t, ex.Payload)); err != nil {
					t.Errorf("example %q does not satisfy the payload schema: %v", ex.Name, err)
				}
				if err := validate(t, headers, toJSON(t, ex.Headers)); err != nil {
					t.Errorf("example %q: its headers do not satisfy the headers schema: %v", ex.Name, err)
				}
				id, reencoded := decodeContract(t, name, data, ex.Headers)
				if got := ex.Headers["Nats-Msg-Id"]; got != id {
					t.Errorf("example %q: Nats-Msg-Id %q, the message's is %q", ex.Name, got, id)
				}
				if reencoded != nil {
					if err := validate(t, payload, reencoded); err != nil {
						t.Errorf("example %q as this package encodes it does not satisfy the schema: %v\n%s", ex.Name, err, reencoded)
					}
				}
			}
		})
	}
}

// contractTypes pairs each schema file with the Go type it describes;
// decode is the type's strict decoder (nil: none).
var contractTypes = []struct {
	schema string
	typ    reflect.Type
	decode func([]byte) error
	// example holds every member of the schema and satisfies it; the test
	// removes its members one at a time.
	example string
	// published: the platform writes every member Go always encodes, so
	// the schema must require each (a reader relies on it). Commands are
	// written by producers: their schemas require what the decoder does.
	published bool
}{
	{"set.schema.json", reflect.TypeFor[events.Command](), decodeCommand,
		`{"schema":1,"kind":"set","key":"k","version":2,"deadline":"2026-11-28T18:00:00Z","fire_subject":"a.b","max_lateness_ms":5,"payload":{"a":1},"issued_at":"2026-11-28T17:00:00Z"}`, false},
	{"clear.schema.json", reflect.TypeFor[events.Command](), decodeCommand,
		`{"schema":1,"kind":"clear","key":"k","version":2,"issued_at":"2026-11-28T17:00:00Z"}`, false},
	{"expiry.schema.json", reflect.TypeFor[events.Expiry](), decodeExpiry,
		`{"schema":1,"outcome":"missed","key":"k","version":2,"deadline":"2026-11-28T18:00:00Z","fired_at":"2026-11-28T18:00:01Z","lateness_ns":1000000000,"payload":{"a":1},"reason":"unknown_tenant"}`, true},
	{"order-event.schema.json", reflect.TypeFor[events.OrderEvent](), decodeOrder,
		`{"schema":1,"type":"cancelled","order_id":"o-1","version":2,"status":"cancelled","cancel_reason":"customer","customer_id":"c","amount_minor":100,"currency":"EUR","pay_by":"2026-11-28T18:00:00Z","at":"2026-11-28T17:00:00Z"}`, true},
	{"dead-letter.schema.json", reflect.TypeFor[events.DeadLetter](), nil,
		`{"schema":1,"reason":"invalid_key","field":"key","detail":"d","tenant":"reservations","subject":"timeouts.cmd.1.k","data":"e30=","msg_id":"set:k:1:AAAAAAAAAAAAAAAAAAAAAA","stream_seq":3,"line":2,"rejected_at":"2026-11-28T17:00:00Z"}`, true},
}

// rawSchema is the part of a schema file the drift test reads.
type rawSchema struct {
	Required   []string                  `json:"required"`
	Properties map[string]map[string]any `json:"properties"`
	Defs       map[string]map[string]any `json:"definitions"`
}

func readSchema(t *testing.T, name string) rawSchema {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(contractDir, "schemas", name))
	if err != nil {
		t.Fatal(err)
	}
	var s rawSchema
	if err := json.Unmarshal(data, &s); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return s
}

// resolve returns a property's schema with a $ref to defs.schema.json
// replaced by the definition's members (the property's own win).
func resolve(t *testing.T, p map[string]any) map[string]any {
	t.Helper()
	ref, ok := p["$ref"].(string)
	if !ok {
		return p
	}
	file, def, ok := strings.Cut(ref, "#/definitions/")
	if !ok || file != "defs.schema.json" {
		t.Fatalf("$ref %q: the test reads only defs.schema.json#/definitions/…", ref)
	}
	d, ok := readSchema(t, "defs.schema.json").Defs[def]
	if !ok {
		t.Fatalf("$ref %q: no such definition", ref)
	}
	out := maps.Clone(d)
	maps.Copy(out, p)
	return out
}

// jsonFields returns the JSON members of a struct type with whether Go
// always writes each (no omitempty or omitzero) and its Go type.
func jsonFields(typ reflect.Type) map[string]reflect.StructField {
	out := map[string]reflect.StructField{}
	for f := range typ.Fields() {
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" || !f.IsExported() {
			continue
		}
		out[name] = f
	}
	return out
}

func alwaysWritten(f reflect.StructField) bool {
	tag := f.Tag.Get("json")
	return !strings.Contains(tag, ",omitempty") && !strings.Contains(tag, ",omitzero")
}

// wantJSONType is the JSON Schema of a Go field's type: its "type", and
// for strings the format or contentEncoding that says how to read them.
func wantJSONType(f reflect.StructField) (typ, format, encoding string) {
	switch {
	case f.Type == reflect.TypeFor[time.Time]():
		return "string", "date-time", ""
	case f.Type == reflect.TypeFor[json.RawMessage]():
		return "object", "", ""
	case f.Type.Kind() == reflect.Slice && f.Type.Elem().Kind() == reflect.Uint8:
		return "string", "", "base64"
	}
	switch f.Type.Kind() {
	case reflect.Int, reflect.Int64, reflect.Int32, reflect.Uint64, reflect.Uint32:
		return "integer", "", ""
	case reflect.String:
		return "string", "", ""
	}
	return f.Type.String(), "", ""
}

// TestContractSchemasMatchTypes fails when a schema of docs/contract/schemas
// and this package's Go type drift apart: a member of one that the other
// lacks, a JSON type that is not the one Go encodes, a time that is not
// date-time, bytes that are not base64, a member the decoder requires that
// the schema leaves optional or the other way round, or a member the
// platform always writes that the schema does not promise.
func TestContractSchemasMatchTypes(t *testing.T) {
	t.Parallel()
	// The schemas of a type, together, have its members.
	members := map[reflect.Type][]string{}
	for _, ct := range contractTypes {
		members[ct.typ] = append(members[ct.typ], slices.Collect(maps.Keys(readSchema(t, ct.schema).Properties))...)
	}
	for typ, got := range members {
		got = slices.Compact(slices.Sorted(slices.Values(got)))
		if want := slices.Sorted(maps.Keys(jsonFields(typ))); !slices.Equal(got, want) {
			t.Errorf("members of %s's schemas: %v; its JSON fields: %v", typ, got, want)
		}
	}
	for _, ct := range contractTypes {
		t.Run(ct.schema, func(t *testing.T) {
			t.Parallel()
			fields := jsonFields(ct.typ)
			s := readSchema(t, ct.schema)
			for name, p := range s.Properties {
				f, ok := fields[name]
				if !ok {
					continue // reported above
				}
				p = resolve(t, p)
				typ, format, encoding := wantJSONType(f)
				if p["type"] != typ || format != "" && p["format"] != format || encoding != "" && p["contentEncoding"] != encoding {
					t.Errorf("%s: type %v, format %v, contentEncoding %v; Go's %s encodes as %s %s%s",
						name, p["type"], p["format"], p["contentEncoding"], f.Type, typ, format, encoding)
				}
			}
			// Required: remove each member from the example in turn.
			var example map[string]json.RawMessage
			if err := json.Unmarshal([]byte(ct.example), &example); err != nil {
				t.Fatal(err)
			}
			if got, want := slices.Sorted(maps.Keys(example)), slices.Sorted(maps.Keys(s.Properties)); !slices.Equal(got, want) {
				t.Fatalf("the test's example has %v, want every member of the schema %v", got, want)
			}
			if ct.decode != nil {
				if err := ct.decode([]byte(ct.example)); err != nil {
					t.Fatalf("the test's example does not decode: %v", err)
				}
			}
			for name := range s.Properties {
				f := fields[name]
				without := maps.Clone(example)
				delete(without, name)
				data, _ := json.Marshal(without)
				decoderNeeds := ct.decode != nil && ct.decode(data) != nil
				inSchema := slices.Contains(s.Required, name)
				switch {
				case decoderNeeds && !inSchema:
					t.Errorf("%s: the decoder rejects a message without it; the schema does not require it", name)
				case inSchema && !decoderNeeds && !(ct.published && alwaysWritten(f)):
					t.Errorf("%s: the schema requires it; the decoder accepts a message without it", name)
				case ct.published && alwaysWritten(f) && !inSchema:
					t.Errorf("%s: always written by %s; the schema does not require it", name, ct.typ)
				}
			}
		})
	}
}

// reasons returns the Reason constants of errors.go, read from its source
// so that a reason added there and not to the contract fails the test.
func reasons(t *testing.T) []events.Reason {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), "errors.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var out []events.Reason
	ast.Inspect(f, func(n ast.Node) bool {
		vs, ok := n.(*ast.ValueSpec)
		if !ok || vs.Type == nil || len(vs.Values) != 1 {
			return true
		}
		if id, ok := vs.Type.(*ast.Ident); ok && id.Name == "Reason" {
			lit := vs.Values[0].(*ast.BasicLit)
			s, _ := strconv.Unquote(lit.Value)
			out = append(out, events.Reason(s))
		}
		return true
	})
	if len(out) == 0 {
		t.Fatal("no Reason constant found in errors.go")
	}
	return out
}

// enumOf returns a property's enum as strings.
func enumOf(t *testing.T, schema, prop string) []string {
	t.Helper()
	p := resolve(t, readSchema(t, schema).Properties[prop])
	var out []string
	for _, v := range p["enum"].([]any) {
		out = append(out, v.(string))
	}
	return out
}

// TestContractEnums checks the closed sets of the contract against this
// package's constants: kinds, outcomes, order event types and statuses,
// cancel reasons, dead-letter reasons (schema and channel parameter), the
// schema version.
func TestContractEnums(t *testing.T) {
	t.Parallel()
	var rs []string
	for _, r := range reasons(t) {
		rs = append(rs, string(r))
	}
	doc := readAsyncAPI(t)
	tests := []struct {
		name      string
		got, want []string
	}{
		{"set kind", enumOf(t, "set.schema.json", "kind"), []string{string(events.KindSet)}},
		{"clear kind", enumOf(t, "clear.schema.json", "kind"), []string{string(events.KindClear)}},
		{"outcome", enumOf(t, "expiry.schema.json", "outcome"), []string{string(events.OutcomeFired), string(events.OutcomeMissed)}},
		{"order event type", enumOf(t, "order-event.schema.json", "type"), []string{string(events.OrderCreated), string(events.OrderPaid), string(events.OrderCancelled)}},
		{"order event type parameter", doc.Channels["orderEvents"].Parameters["type"].Enum, []string{string(events.OrderCreated), string(events.OrderPaid), string(events.OrderCancelled)}},
		{"order status", enumOf(t, "order-event.schema.json", "status"), []string{events.StatusPendingPayment, events.StatusPaid, events.StatusCancelled}},
		{"cancel reason", enumOf(t, "order-event.schema.json", "cancel_reason"), []string{events.CancelByCustomer, events.CancelPaymentTimeout}},
		{"dead-letter reason", enumOf(t, "dead-letter.schema.json", "reason"), rs},
		{"dead-letter reason parameter", doc.Components.Parameters["reason"].Enum, rs},
		{"document version", []string{doc.Info.Version}, []string{strconv.Itoa(events.SchemaVersion)}},
	}
	for _, tt := range tests {
		if !slices.Equal(slices.Sorted(slices.Values(tt.got)), slices.Sorted(slices.Values(tt.want))) {
			t.Errorf("%s: the contract says %v, pkg/events %v", tt.name, tt.got, tt.want)
		}
	}
	def := readSchema(t, "defs.schema.json").Defs
	if got := def["schema"]["enum"]; !reflect.DeepEqual(got, []any{float64(events.SchemaVersion)}) {
		t.Errorf("schema version enum %v, pkg/events writes %d", got, events.SchemaVersion)
	}
	if got := def["localKey"]["pattern"]; got != "^[A-Za-z0-9_-]{1,"+strconv.Itoa(events.MaxKeyLen)+"}$" {
		t.Errorf("localKey pattern %v, want at most MaxKeyLen (%d) letters, digits, '-' or '_'", got, events.MaxKeyLen)
	}
	if got := def["key"]["pattern"]; got != "^([a-z][a-z0-9_]{0,"+strconv.Itoa(events.MaxTenantLen-1)+"}\\.)?[A-Za-z0-9_-]{1,"+strconv.Itoa(events.MaxKeyLen)+"}$" {
		t.Errorf("key pattern %v, want an optional tenant of at most MaxTenantLen (%d) and a local key of at most MaxKeyLen (%d)", got, events.MaxTenantLen, events.MaxKeyLen)
	}
	if got := def["subject"]["maxLength"]; got != float64(events.MaxSubjectLen) {
		t.Errorf("subject maxLength %v, want MaxSubjectLen (%d)", got, events.MaxSubjectLen)
	}
	if d, _ := def["payload"]["description"].(string); !strings.Contains(d, strconv.Itoa(events.MaxPayloadBytes)+" bytes") {
		t.Errorf("payload description %q does not give MaxPayloadBytes (%d bytes)", d, events.MaxPayloadBytes)
	}
}

// TestContractAgreesWithDecoders runs messages through both the schema and
// the strict decoder: each verdict must be the other's. The rules a JSON
// Schema cannot state (a payload's size in bytes, the range of times, a
// version written as 1.0 or 1e3, a member given twice) are left to the
// decoder and written in the schemas' descriptions.
func TestContractAgreesWithDecoders(t *testing.T) {
	t.Parallel()
	schemas := newContractSchemas(t)
	set, clear := schemas.file(t, "set.schema.json"), schemas.file(t, "clear.schema.json")
	expiry, order := schemas.file(t, "expiry.schema.json"), schemas.file(t, "order-event.schema.json")
	const s = `{"kind":"set","key":"k","version":1,"deadline":"2026-11-28T18:00:00Z","fire_subject":"a.b"`
	const e = `{"schema":1,"outcome":"fired","key":"k","version":1,"deadline":"2026-11-28T18:00:00Z","fired_at":"2026-11-28T18:00:00.5Z","lateness_ns":500000000`
	const o = `{"schema":1,"type":"paid","order_id":"o","version":2,"status":"paid","customer_id":"c","amount_minor":1,"currency":"EUR","at":"2026-11-28T18:00:00Z"`
	tests := []struct {
		name   string
		schema *jsonschema.Schema
		decode func([]byte) error
		in     string
		valid  bool
	}{
		{"set", set, decodeCommand, s + `}`, true},
		{"set with nanoseconds and an offset", set, decodeCommand, `{"kind":"set","key":"k","version":1,"deadline":"2026-11-28T18:00:00.123456789+02:00","fire_subject":"a.b"}`, true},
		{"set with unknown members", set, decodeCommand, s + `,"x":[1]}`, true},
		{"set of schema 2", set, decodeCommand, s + `,"schema":2}`, false},
		{"set without deadline", set, decodeCommand, `{"kind":"set","key":"k","version":1,"fire_subject":"a.b"}`, false},
		{"set without fire subject", set, decodeCommand, `{"kind":"set","key":"k","version":1,"deadline":"2026-11-28T18:00:00Z"}`, false},
		{"deadline without zone", set, decodeCommand, `{"kind":"set","key":"k","version":1,"deadline":"2026-11-28T18:00:00","fire_subject":"a.b"}`, false},
		{"deadline not a time", set, decodeCommand, `{"kind":"set","key":"k","version":1,"deadline":"tomorrow","fire_subject":"a.b"}`, false},
		{"deadline with ten fractional digits", set, decodeCommand, `{"kind":"set","key":"k","version":1,"deadline":"2026-11-28T18:00:00.1234567891Z","fire_subject":"a.b"}`, true},
		{"deadline with an empty fraction", set, decodeCommand, `{"kind":"set","key":"k","version":1,"deadline":"2026-11-28T18:00:00.Z","fire_subject":"a.b"}`, false},
		{"wildcard fire subject", set, decodeCommand, `{"kind":"set","key":"k","version":1,"deadline":"2026-11-28T18:00:00Z","fire_subject":"a.>"}`, false},
		{"empty subject token", set, decodeCommand, `{"kind":"set","key":"k","version":1,"deadline":"2026-11-28T18:00:00Z","fire_subject":"a..b"}`, false},
		{"subject with a space", set, decodeCommand, `{"kind":"set","key":"k","version":1,"deadline":"2026-11-28T18:00:00Z","fire_subject":"a b"}`, false},
		{"subject of 257 bytes", set, decodeCommand, `{"kind":"set","key":"k","version":1,"deadline":"2026-11-28T18:00:00Z","fire_subject":"` + strings.Repeat("a", 257) + `"}`, false},
		{"negative misfire bound", set, decodeCommand, s + `,"max_lateness_ms":-1}`, false},
		{"payload not an object", set, decodeCommand, s + `,"payload":[1]}`, false},
		{"clear", clear, decodeCommand, `{"kind":"clear","key":"k","version":3}`, true},
		{"clear with set's members", clear, decodeCommand, `{"kind":"clear","key":"k","version":3,"deadline":"x","payload":[]}`, true},
		{"clear without version", clear, decodeCommand, `{"kind":"clear","key":"k"}`, false},
		{"version as a string", clear, decodeCommand, `{"kind":"clear","key":"k","version":"3"}`, false},
		{"version zero", clear, decodeCommand, `{"kind":"clear","key":"k","version":0}`, false},
		{"version null", clear, decodeCommand, `{"kind":"clear","key":"k","version":null}`, false},
		{"version fractional", clear, decodeCommand, `{"kind":"clear","key":"k","version":1.5}`, false},
		{"key of a tenant", clear, decodeCommand, `{"kind":"clear","key":"a.b","version":1}`, true},
		{"key with two dots", clear, decodeCommand, `{"kind":"clear","key":"a.b.c","version":1}`, false},
		{"tenant with a capital", clear, decodeCommand, `{"kind":"clear","key":"A.b","version":1}`, false},
		{"key of 129 bytes", clear, decodeCommand, `{"kind":"clear","key":"` + strings.Repeat("k", 129) + `","version":1}`, false},
		{"key of 128 bytes", clear, decodeCommand, `{"kind":"clear","key":"` + strings.Repeat("k", 128) + `","version":1}`, true},
		{"key not ASCII", clear, decodeCommand, `{"kind":"clear","key":"ключ","version":1}`, false},
		{"unknown kind", clear, decodeCommand, `{"kind":"delete","key":"k","version":1}`, false},
		{"issued at not a time", clear, decodeCommand, `{"kind":"clear","key":"k","version":1,"issued_at":"now"}`, false},
		{"expiry", expiry, decodeExpiry, e + `}`, true},
		{"expiry missed", expiry, decodeExpiry, strings.Replace(e, "fired", "missed", 1) + `}`, true},
		{"expiry of an unknown outcome", expiry, decodeExpiry, strings.Replace(e, `"fired"`, `"late"`, 1) + `}`, false},
		{"expiry with negative lateness", expiry, decodeExpiry, strings.Replace(e, "500000000", "-1", 1) + `}`, false},
		{"expiry without fired_at", expiry, decodeExpiry, `{"schema":1,"outcome":"fired","key":"k","version":1,"deadline":"2026-11-28T18:00:00Z","lateness_ns":0}`, false},
		{"expiry with a payload", expiry, decodeExpiry, e + `,"payload":{"a":"b"}}`, true},
		{"order event", order, decodeOrder, o + `}`, true},
		{"order event of schema 2", order, decodeOrder, strings.Replace(o, `"schema":1`, `"schema":2`, 1) + `}`, false},
		{"order event of an unknown type", order, decodeOrder, strings.Replace(o, `"type":"paid"`, `"type":"shipped"`, 1) + `}`, false},
		{"order event of an unknown status", order, decodeOrder, strings.Replace(o, `"status":"paid"`, `"status":"lost"`, 1) + `}`, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			schemaErr := validate(t, tt.schema, []byte(tt.in))
			decodeErr := tt.decode([]byte(tt.in))
			if (schemaErr == nil) != tt.valid || (decodeErr == nil) != tt.valid {
				t.Fatalf("valid = %v; schema: %v; decoder: %v", tt.valid, schemaErr, decodeErr)
			}
		})
	}
}

func decodeCommand(b []byte) error { _, err := events.DecodeCommand(b); return err }

func decodeExpiry(b []byte) error { _, err := events.DecodeExpiry(b); return err }

func decodeOrder(b []byte) error { _, err := events.DecodeOrderEvent(b); return err }
