package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ordertimeout/ordertimeout/pkg/events"
	"github.com/ordertimeout/ordertimeout/pkg/timeouts"
)

// streamCommands names the command streams in the header matrix: the
// attacker's message and the victim's land in the stream of their
// partition, TIMEOUT_COMMANDS_<p>.
const streamCommands = events.StreamCommandsPrefix + "<p>"

// headerAttack is one header a tenant may set on a message it publishes
// on the shared streams, aimed at a victim's message: set returns the
// headers, given the victim's key and what the attacker has observed (the
// stream sequence of its own last message in the victim's partition).
type headerAttack struct {
	name string
	set  func(vkey string, seen uint64) map[string]string
}

// headerAttacks lists every JetStream header a publisher chooses (the
// server's, nats-server's stream.go) and the platform's own, each with the
// value that would hurt the victim most if the server or timeoutd let it.
var headerAttacks = []headerAttack{
	// The victim's next command's id: as the contract before nonces made
	// it, and as a guess of the nonce.
	{"Nats-Msg-Id: the victim's command id without a nonce", func(k string, _ uint64) map[string]string {
		return map[string]string{"Nats-Msg-Id": "set:" + k + ":1"}
	}},
	{"Nats-Msg-Id: the victim's command id with a guessed nonce", func(k string, _ uint64) map[string]string {
		return map[string]string{"Nats-Msg-Id": "set:" + k + ":1:" + events.NewNonce()}
	}},
	// The victim's next dead letter's id, as it was before its digest, for
	// the sequences its command may get (the attacker's own last one,
	// observed from its PubAck, plus one or two).
	{"Nats-Msg-Id: the victim's dead letter id", func(k string, seen uint64) map[string]string {
		return map[string]string{"Nats-Msg-Id": "dlq:" + events.CommandSubject(k) + ":" + strconv.FormatUint(seen+1, 10)}
	}},
	{"Nats-Msg-Id: the victim's next dead letter id but one", func(k string, seen uint64) map[string]string {
		return map[string]string{"Nats-Msg-Id": "dlq:" + events.CommandSubject(k) + ":" + strconv.FormatUint(seen+2, 10)}
	}},
	{"Nats-Expected-Stream", func(k string, _ uint64) map[string]string {
		return map[string]string{"Nats-Expected-Stream": events.CommandStream(events.PartitionOf(k))}
	}},
	{"Nats-Expected-Last-Sequence", func(_ string, seen uint64) map[string]string {
		return map[string]string{"Nats-Expected-Last-Sequence": strconv.FormatUint(seen, 10)}
	}},
	{"Nats-Expected-Last-Subject-Sequence of the victim's subject", func(k string, _ uint64) map[string]string {
		return map[string]string{"Nats-Expected-Last-Subject-Sequence": "0", "Nats-Expected-Last-Subject-Sequence-Subject": events.PartitionedCommandSubject(k)}
	}},
	{"Nats-Expected-Last-Msg-Id", func(k string, _ uint64) map[string]string {
		return map[string]string{"Nats-Expected-Last-Msg-Id": "set:" + k + ":1"}
	}},
	{"Nats-Rollup: all", fixed("Nats-Rollup", "all")},
	{"Nats-Rollup: sub", fixed("Nats-Rollup", "sub")},
	{"Nats-TTL", fixed("Nats-TTL", "1s")},
	{"Nats-Schedule into the victim's subject", func(k string, _ uint64) map[string]string {
		return map[string]string{"Nats-Schedule": "@at " + time.Now().Add(time.Second).UTC().Format(time.RFC3339),
			"Nats-Schedule-Target": events.PartitionedCommandSubject(k), "Nats-Schedule-TTL": "5m"}
	}},
	{"Nats-Batch-Id (atomic batch)", func(string, uint64) map[string]string {
		return map[string]string{"Nats-Batch-Id": "matrix-" + events.NewNonce(), "Nats-Batch-Sequence": "1", "Nats-Batch-Commit": "1"}
	}},
	{"Nats-Incr (counter)", fixed("Nats-Incr", "1")},
	{"Nats-Marker-Reason", fixed("Nats-Marker-Reason", "Purge")},
	{"Nats-Stream-Source", func(k string, _ uint64) map[string]string {
		return map[string]string{"Nats-Stream-Source": events.CommandStream(events.PartitionOf(k))}
	}},
	{"Timeouts-Batch naming the victim's key", fixed(events.HeaderBatch, "2")},
	{"traceparent", fixed("traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")},
}

// fixed is the set of an attack whose header has one value, whoever the
// victim.
func fixed(h, v string) func(string, uint64) map[string]string {
	return func(string, uint64) map[string]string { return map[string]string{h: v} }
}

// testHeaderMatrix is TestTenantIsolation's header dimension: every
// tenant, against each other, publishes on each shared stream it may
// write (its partition's command stream, on its own command subject with
// a key of the victim's partition, and DEAD_LETTERS, on its own dead
// letter subject) a message with each header of headerAttacks aimed at
// the victim's next message: a command the victim then sends through
// pkg/timeouts (so with the library's id), and a command the victim then
// sends that timeoutd dead-letters. Each cell passes when the victim's
// command is stored (its PubAck no duplicate) and applied at its version,
// deadline and fire subject, and its dead letter is published for it:
// nothing the attacker set delayed, swallowed, purged, reordered or
// altered it. deadLetterOf reads timeoutd's dead letters as the observer
// received them, by tenant, key and version.
func testHeaderMatrix(t *testing.T, s *stack, clients map[string]*tenantClient, deadLetterOf func(id string) (events.DeadLetter, bool)) {
	ctx := t.Context()
	run := time.Now().UnixNano()
	type cell struct {
		attacker, victim, stream, header string
		got                              string // what the server did with the attacker's message
		vkey                             string
		want                             timeouts.Deadline // the victim's command (stream commands)
		deadID                           string            // the victim's dead letter (stream dead letters)
	}
	var cells []*cell
	i := 0
	for _, a := range matrixTenants {
		for _, v := range matrixTenants {
			if a.Name == v.Name {
				continue
			}
			for _, stream := range []string{streamCommands, events.StreamDeadLetters} {
				for _, attack := range headerAttacks {
					i++
					local := fmt.Sprintf("hdr-%d-%d", run, i)
					vkey, akey := events.TenantKey(v.Name, local), events.TenantKey(a.Name, local) // one partition: it hashes the local key
					c := &cell{attacker: a.Name, victim: v.Name, stream: stream, header: attack.name, vkey: vkey}
					cells = append(cells, c)
					at := clients[a.Name]
					// The attacker's own command in the partition first: its
					// PubAck tells the stream's sequence.
					seen := publishCommand(t, at, events.Command{Schema: 1, Kind: events.KindClear, Key: akey, Version: 1, IssuedAt: time.Now().UTC()})
					m := nats.NewMsg(events.CommandSubject(akey))
					// Its data: the victim's key cleared, and a second line
					// for a batch header.
					clearVictim, _ := json.Marshal(events.Command{Schema: 1, Kind: events.KindClear, Key: vkey, Version: 1 << 40, IssuedAt: time.Now().UTC()})
					m.Data = clearVictim
					if stream == events.StreamDeadLetters {
						m.Subject = events.DeadLetterSubject(a.Name, events.ReasonMalformed)
						m.Data, _ = json.Marshal(events.NewDeadLetter(events.CommandSubject(vkey), clearVictim, "", seen+1, &events.Error{Reason: events.ReasonMalformed}, time.Now()))
					}
					m.Header.Set(events.HeaderMsgID, "clear:"+akey+":2:"+events.NewNonce())
					for k, val := range attack.set(vkey, seen) {
						m.Header.Set(k, val)
						if k == events.HeaderBatch {
							m.Data = append(append(m.Data, '\n'), clearVictim...)
						}
					}
					c.got = publishVerdict(ctx, at.js, m)
					// The victim's message, right after.
					vt := clients[v.Name]
					if stream == streamCommands {
						c.want = timeouts.Deadline{Key: vkey, Version: 1, At: time.Now().Add(time.Hour).UTC().Truncate(time.Millisecond),
							FireSubject: v.FirePrefixes[0] + local}
						cmd, err := timeouts.SetCommand(c.want, time.Now())
						if err != nil {
							t.Fatal(err)
						}
						om, err := timeouts.Message(cmd)
						if err != nil {
							t.Fatal(err)
						}
						ack, err := vt.js.PublishMsg(ctx, om.Msg()) // as the relay publishes the row
						if err != nil {
							t.Fatalf("%s: the victim %s publishes its command: %v", c.header, v.Name, err)
						}
						if ack.Duplicate {
							t.Errorf("%s/%s/%s/%s: the victim's command %s was answered as a duplicate of seq %d: swallowed", a.Name, v.Name, stream, attack.name, om.MsgID, ack.Sequence)
						}
						continue
					}
					// A set whose fire subject is outside the victim's
					// prefixes: timeoutd dead-letters it for the victim.
					bad := events.Command{Schema: 1, Kind: events.KindSet, Key: vkey, Version: 1, IssuedAt: time.Now().UTC(),
						Deadline: time.Now().Add(time.Hour).UTC(), FireSubject: "nowhere." + local}
					publishCommand(t, vt, bad)
					c.deadID = deadID(v.Name, vkey, 1)
				}
			}
		}
	}
	// Every victim's command applied, and every dead letter published:
	// each cell's verdict, all awaited together for at most 30 s.
	verdict := func(c *cell) string {
		if c.stream == streamCommands {
			got, ok := pendingTimeout(t, s, c.vkey)
			if ok && got.Version == c.want.Version && got.Deadline.Equal(c.want.At) && got.FireSubject == c.want.FireSubject {
				return ""
			}
			return fmt.Sprintf("the victim's command: pending %v, %+v; want version %d, deadline %v, fire subject %s",
				ok, got, c.want.Version, c.want.At, c.want.FireSubject)
		}
		d, ok := deadLetterOf(c.deadID)
		if ok && d.Tenant == c.victim && d.Reason == events.ReasonSubjectNotAllowed && d.Subject == events.CommandSubject(c.vkey) {
			return ""
		}
		return fmt.Sprintf("the victim's dead letter: %v, %+v", ok, d)
	}
	open := slices.Clone(cells)
	for limit := time.Now().Add(30 * time.Second); len(open) > 0 && time.Now().Before(limit); time.Sleep(100 * time.Millisecond) {
		open = slices.DeleteFunc(open, func(c *cell) bool { return verdict(c) == "" })
	}
	for _, c := range cells {
		t.Run(c.attacker+"/"+c.victim+"/"+c.stream+"/"+c.header, func(t *testing.T) {
			if v := verdict(c); v != "" {
				t.Errorf("%s (the attacker's message: %s)", v, c.got)
			}
		})
	}
	// The cells whose attack was a scheduled message had it due a second
	// after it was sent: it had ample time to land on the victim's
	// subject. Each victim is still at its own version.
	for _, c := range cells {
		if c.stream != streamCommands {
			continue
		}
		if got, ok := pendingTimeout(t, s, c.vkey); !ok || got.Version != c.want.Version {
			t.Errorf("%s/%s/%s: the victim's timeout at last: pending %v, %+v", c.attacker, c.victim, c.header, ok, got)
		}
	}
	// The matrix as the closing note reads it: what the server did with
	// each header, per stream (the same for every pair of tenants).
	var lines []string
	for _, c := range cells {
		if c.attacker == matrixTenants[1].Name && c.victim == matrixTenants[0].Name {
			lines = append(lines, fmt.Sprintf("%-17s %-60s %s", c.stream, c.header, c.got))
		}
	}
	slices.Sort(lines)
	t.Logf("header matrix, %d cells (%d tenants, %d headers, 2 streams), %s against %s:\n%s", len(cells), len(matrixTenants),
		len(headerAttacks), matrixTenants[1].Name, matrixTenants[0].Name, strings.Join(lines, "\n"))
}

// publishCommand publishes cmd as tc, with an id of the contract, and
// returns its stream sequence.
func publishCommand(t *testing.T, tc *tenantClient, cmd events.Command) uint64 {
	t.Helper()
	data, err := json.Marshal(cmd)
	if err != nil {
		t.Fatal(err)
	}
	ack, err := tc.js.Publish(t.Context(), cmd.Subject(), data, jetstream.WithMsgID(cmd.MsgID(events.NewNonce())))
	if err != nil {
		t.Fatalf("%s publishes %s v%d: %v", tc.name, cmd.Key, cmd.Version, err)
	}
	return ack.Sequence
}

// publishVerdict publishes m and says what JetStream did with it.
func publishVerdict(ctx context.Context, js jetstream.JetStream, m *nats.Msg) string {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	ack, err := js.PublishMsg(ctx, m)
	switch {
	case err != nil:
		return "refused: " + err.Error()
	case ack.Duplicate:
		return fmt.Sprintf("a duplicate of seq %d", ack.Sequence)
	}
	return fmt.Sprintf("stored as the attacker's own, seq %d", ack.Sequence)
}
