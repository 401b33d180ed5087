package events_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ordertimeout/ordertimeout/internal/eventstest"
	"github.com/ordertimeout/ordertimeout/pkg/events"
)

// single returns the message of one command as a producer publishes it.
func single(t testing.TB, c events.Command) events.CommandMessage {
	t.Helper()
	data, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	return events.CommandMessage{Subject: c.Subject(), MsgID: c.MsgID(events.NewNonce()), Data: data, Count: 1}
}

func clearOf(key string, v int64) events.Command {
	return events.Command{Schema: 1, Kind: events.KindClear, Key: key, Version: v}
}

// unbatch decodes every command of msgs in order, as a consumer does.
func unbatch(t *testing.T, msgs []events.CommandMessage) []events.Command {
	t.Helper()
	var cmds []events.Command
	for _, m := range msgs {
		lines := [][]byte{m.Data}
		if m.Count > 1 {
			var err error
			if lines, err = events.SplitBatch(m.Data, strconv.Itoa(m.Count)); err != nil {
				t.Fatalf("split %s: %v", m.MsgID, err)
			}
		}
		for _, l := range lines {
			c, err := events.DecodeCommand(l)
			if err != nil {
				t.Fatalf("decode a command of %s: %v", m.MsgID, err)
			}
			if events.PartitionOf(c.Key) != events.PartitionOf(strings.TrimPrefix(m.Subject, events.CommandSubjectPrefix)) {
				t.Fatalf("command of %s in a batch published on %s", c.Key, m.Subject)
			}
			cmds = append(cmds, c)
		}
	}
	return cmds
}

func TestBatch(t *testing.T) {
	t.Parallel()
	p3, p5 := eventstest.KeysOfPartition("k-", 3, 2*events.MaxBatchCommands+1), eventstest.KeysOfPartition("k-", 5, 2)
	pad := strings.Repeat("x", 20000)
	padded := func(key string) events.CommandMessage { // a valid clear of one length for every key, padded by an unknown field
		return events.CommandMessage{Subject: events.CommandSubject(key), MsgID: "clear:" + key + ":1", Count: 1,
			Data: []byte(`{"kind":"clear","key":"` + key + `","version":1,"pad":"` + pad[len(key):] + `"}`)}
	}
	other := events.CommandMessage{Subject: "orders.paid.a", MsgID: "order.paid:a:1", Data: []byte(`{}`), Count: 1}
	pretty := events.CommandMessage{Subject: events.CommandSubject(p3[1]), MsgID: "clear:" + p3[1] + ":9", Data: []byte("{\n\"kind\":\"clear\"}"), Count: 1}
	tests := []struct {
		name   string
		in     func(t *testing.T) []events.CommandMessage
		counts []int // Count of each message out
	}{
		{"none", func(*testing.T) []events.CommandMessage { return nil }, []int{}},
		{"one command stays as it was", func(t *testing.T) []events.CommandMessage {
			return []events.CommandMessage{single(t, clearOf(p3[0], 1))}
		}, []int{1}},
		{"one partition, one batch", func(t *testing.T) []events.CommandMessage {
			return []events.CommandMessage{single(t, clearOf(p3[0], 1)), single(t, clearOf(p3[1], 1)), single(t, clearOf(p3[0], 2))}
		}, []int{3}},
		{"partitions apart, each where its first command was", func(t *testing.T) []events.CommandMessage {
			return []events.CommandMessage{single(t, clearOf(p5[0], 1)), single(t, clearOf(p3[0], 1)), single(t, clearOf(p5[1], 1)), single(t, clearOf(p3[1], 1))}
		}, []int{2, 2}},
		{"other subjects, batches and pretty JSON pass where they were", func(t *testing.T) []events.CommandMessage {
			already := events.Batch([]events.CommandMessage{single(t, clearOf(p5[0], 1)), single(t, clearOf(p5[1], 1))})[0]
			return []events.CommandMessage{single(t, clearOf(p3[0], 1)), other, already, pretty, single(t, clearOf(p3[2], 1))}
		}, []int{2, 1, 2, 1}},
		{"at most MaxBatchCommands", func(t *testing.T) []events.CommandMessage {
			var in []events.CommandMessage
			for _, k := range p3 {
				in = append(in, single(t, clearOf(k, 1)))
			}
			return in
		}, []int{events.MaxBatchCommands, events.MaxBatchCommands, 1}},
		{"at most MaxBatchBytes", func(t *testing.T) []events.CommandMessage {
			var in []events.CommandMessage
			for _, k := range p3[:events.MaxBatchCommands] {
				in = append(in, padded(k))
			}
			return in
		}, nil}, // counts from the commands' length, below
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			in := tt.in(t)
			out := events.Batch(in)
			var counts []int
			for _, m := range out {
				counts = append(counts, m.Count)
				if len(m.Data) > events.MaxBatchBytes {
					t.Errorf("a batch of %d bytes", len(m.Data))
				}
			}
			if tt.counts == nil { // same-length commands: as many as fit, a newline between two
				fit := (events.MaxBatchBytes + 1) / (len(in[0].Data) + 1)
				tt.counts = []int{fit, fit, len(in) - 2*fit}
			}
			if !slices.Equal(counts, tt.counts) {
				t.Fatalf("counts = %v, want %v", counts, tt.counts)
			}
			var want []events.Command
			for _, m := range in {
				if m.Subject != other.Subject && m.MsgID != pretty.MsgID {
					want = append(want, unbatch(t, []events.CommandMessage{m})...)
				}
			}
			var kept []events.CommandMessage
			for _, m := range out {
				if m.Subject != other.Subject && m.MsgID != pretty.MsgID {
					kept = append(kept, m)
				}
			}
			got := unbatch(t, kept)
			if len(got) != len(want) {
				t.Fatalf("%d commands out, want %d", len(got), len(want))
			}
			for _, k := range append(p3, p5...) {
				if g, w := versionsOf(got, k), versionsOf(want, k); !slices.Equal(g, w) {
					t.Errorf("key %s: versions %v out, want %v in that order", k, g, w)
				}
			}
		})
	}
}

func versionsOf(cmds []events.Command, key string) []string {
	var v []string
	for _, c := range cmds {
		if c.Key == key {
			v = append(v, c.Key+":"+strconv.FormatInt(c.Version, 10))
		}
	}
	return v
}

// TestBatchKeepsEachKeysOrder checks, over random streams of commands of
// few keys, that batching delivers every command once and each key's in
// the order given.
func TestBatchKeepsEachKeysOrder(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 2))
	for range 200 {
		var in []events.CommandMessage
		var keys []string
		for i := range 1 + rng.IntN(8) {
			keys = append(keys, "key-"+strconv.Itoa(i))
		}
		for i := range rng.IntN(400) {
			in = append(in, single(t, clearOf(keys[rng.IntN(len(keys))], int64(i+1))))
		}
		out := events.Batch(in)
		got, want := unbatch(t, out), unbatch(t, in)
		if len(got) != len(want) {
			t.Fatalf("%d commands out of %d", len(got), len(want))
		}
		for _, k := range keys {
			if g, w := versionsOf(got, k), versionsOf(want, k); !slices.Equal(g, w) {
				t.Fatalf("key %s: %v out, want %v", k, g, w)
			}
		}
		ids := map[string]bool{}
		for _, m := range out {
			if ids[m.MsgID] {
				t.Fatalf("two messages with id %s", m.MsgID)
			}
			ids[m.MsgID] = true
		}
	}
}

func TestBatchMsgIDDependsOnTheCommandsOnly(t *testing.T) {
	t.Parallel()
	a := events.BatchMsgID([]string{"set:a:1", "clear:b:2"})
	tests := []struct {
		name string
		ids  []string
		same bool
	}{
		{"same commands", []string{"set:a:1", "clear:b:2"}, true},
		{"other order", []string{"clear:b:2", "set:a:1"}, false},
		{"one more", []string{"set:a:1", "clear:b:2", "set:c:1"}, false},
		{"ids joined otherwise", []string{"set:a:1clear:b:2"}, false},
	}
	for _, tt := range tests {
		if got := events.BatchMsgID(tt.ids); (got == a) != tt.same || !strings.HasPrefix(got, "batch:") {
			t.Errorf("%s: id %s against %s", tt.name, got, a)
		}
	}
}

func TestSplitBatch(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, data, header string
		lines              int
		detail             string
	}{
		{"two lines", "{}\n{}", "2", 2, ""},
		{"one line", "{}", "1", 1, ""},
		{"an empty line is a line (its decoding fails)", "{}\n", "2", 2, ""},
		{"fewer lines than said", "{}\n{}", "3", 0, "says 3 commands, the data holds 2 lines"},
		{"more lines than said", "{}\n{}\n{}", "2", 0, "says 2 commands, the data holds 3 lines"},
		{"no count", "{}", "", 0, "must be a count"},
		{"zero", "{}", "0", 0, "must be a count"},
		{"over the limit", "{}", strconv.Itoa(events.MaxBatchCommands + 1), 0, "must be a count"},
		{"not a number", "{}", "two", 0, "must be a count"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			lines, err := events.SplitBatch([]byte(tt.data), tt.header)
			if tt.detail == "" {
				if err != nil || len(lines) != tt.lines {
					t.Fatalf("lines %q, err %v; want %d lines", lines, err, tt.lines)
				}
				return
			}
			var e *events.Error
			if !errors.As(err, &e) || e.Reason != events.ReasonMalformed || e.Field != events.HeaderBatch || !strings.Contains(e.Detail, tt.detail) {
				t.Fatalf("err = %v, want malformed %s: %s", err, events.HeaderBatch, tt.detail)
			}
		})
	}
}

func TestBatchCount(t *testing.T) {
	t.Parallel()
	tests := []struct {
		header string
		want   int
	}{
		{"", 1},
		{"1", 1},
		{"2", 2},
		{strconv.Itoa(events.MaxBatchCommands), events.MaxBatchCommands},
		{strconv.Itoa(events.MaxBatchCommands + 1), 1},
		{"0", 1},
		{"-3", 1},
		{"two", 1},
	}
	for _, tt := range tests {
		if got := events.BatchCount(tt.header); got != tt.want {
			t.Errorf("BatchCount(%q) = %d, want %d", tt.header, got, tt.want)
		}
	}
}

func TestDeadLetterOfABatchLineHasItsOwnID(t *testing.T) {
	t.Parallel()
	at := time.Unix(0, 0)
	one := events.NewDeadLetter("timeouts.cmd.a", []byte("{}"), "set:a:1:"+events.NewNonce(), 7, fmt.Errorf("x"), at)
	l1, l2 := one, one
	l1.Line, l2.Line = 1, 2
	if !strings.HasPrefix(one.MsgID(), "dlq:timeouts.cmd.a:7:") || !strings.HasPrefix(l1.MsgID(), "dlq:timeouts.cmd.a:7:1:") || l2.MsgID() == l1.MsgID() {
		t.Fatalf("ids %s %s %s", one.MsgID(), l1.MsgID(), l2.MsgID())
	}
}

// TestBatchCarriesTraceParents: a batch lists its commands' trace contexts
// in line order, empty for the untraced; a batch of untraced commands
// carries none; a header that does not hold one entry per line is
// ignored.
func TestBatchCarriesTraceParents(t *testing.T) {
	t.Parallel()
	keys := eventstest.KeysOfPartition("t-", 7, 3)
	const tp1, tp3 = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	var in []events.CommandMessage
	for i, k := range keys {
		m := single(t, clearOf(k, 1))
		switch i {
		case 0:
			m.TraceParents = []string{tp1}
		case 2:
			m.TraceParents = []string{tp3}
		}
		in = append(in, m)
	}
	out := events.Batch(in)
	if len(out) != 1 || out[0].Count != 3 {
		t.Fatalf("packed into %d messages, want one batch of 3", len(out))
	}
	h := out[0].TraceParentsHeader()
	if h != tp1+",,"+tp3 {
		t.Fatalf("header %q", h)
	}
	if got := events.SplitTraceParents(h, 3); !slices.Equal(got, []string{tp1, "", tp3}) {
		t.Fatalf("SplitTraceParents = %q", got)
	}
	if got := events.SplitTraceParents(h, 4); got != nil {
		t.Fatalf("a header of 3 entries for 4 lines gave %q, want nil", got)
	}
	untraced := events.Batch([]events.CommandMessage{single(t, clearOf(keys[0], 2)), single(t, clearOf(keys[1], 2))})
	if h := untraced[0].TraceParentsHeader(); h != "" || untraced[0].TraceParents != nil {
		t.Fatalf("untraced batch carries %q", h)
	}
}
