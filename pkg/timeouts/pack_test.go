package timeouts_test

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ordertimeout/ordertimeout/pkg/events"
	"github.com/ordertimeout/ordertimeout/pkg/outbox"
	"github.com/ordertimeout/ordertimeout/pkg/timeouts"
)

// TestPackCarriesTraceContexts: a lone row's trace context goes out as its
// traceparent header, a batch's as events.HeaderBatchTraceParents in line
// order; untraced rows carry neither.
func TestPackCarriesTraceContexts(t *testing.T) {
	t.Parallel()
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	row := func(key string, traceparent string) outbox.Message {
		c, err := timeouts.ClearCommand(key, 1, time.Date(2026, 11, 26, 9, 0, 0, 0, time.UTC))
		if err != nil {
			t.Fatal(err)
		}
		m, err := timeouts.Message(c)
		if err != nil {
			t.Fatal(err)
		}
		m.TraceParent = traceparent
		return m
	}
	msgs := timeouts.Pack([]outbox.Message{row("res-33", ""), row("res-7", tp), row("res-46", tp)}) // res-33, res-46: one partition
	if len(msgs) != 2 {
		t.Fatalf("%d messages, want a batch and a lone command", len(msgs))
	}
	batch, lone := msgs[0], msgs[1]
	if got := batch.Header.Get(events.HeaderBatchTraceParents); got != ","+tp || batch.Header.Get("traceparent") != "" {
		t.Fatalf("batch's trace headers %v", batch.Header)
	}
	if got := lone.Header.Get("traceparent"); got != tp {
		t.Fatalf("lone command's traceparent %q, want %q", got, tp)
	}
	untraced := timeouts.Pack([]outbox.Message{row("res-33", ""), row("res-46", "")})
	if h := untraced[0].Header; h.Get(events.HeaderBatchTraceParents) != "" || h.Get("traceparent") != "" {
		t.Fatalf("untraced batch's headers %v", h)
	}
}

// TestPack: the relay's rows come out as one batch per partition
// with its header and id, order events as they were, and every command
// once, each key's in order.
func TestPack(t *testing.T) {
	t.Parallel()
	// A nonce the test can derive again from the command it decodes.
	nonce := func(c events.Command) string { return fmt.Sprintf("nonce-%s-%06d", c.Key, c.Version) }
	row := func(c events.Command) outbox.Message {
		data, err := json.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		return outbox.Message{Subject: c.Subject(), MsgID: c.MsgID(nonce(c)), Data: data}
	}
	event := outbox.Message{Subject: events.OrderEventSubject(events.OrderPaid, "o-1"), MsgID: "order.paid:o-1:2", Data: []byte(`{}`)}
	var rows []outbox.Message
	for v := range int64(3) {
		for i := range 200 {
			rows = append(rows, row(events.Command{Schema: 1, Kind: events.KindClear, Key: "o-" + strconv.Itoa(i), Version: v + 1}))
		}
		rows = append(rows, event)
	}
	msgs := timeouts.Pack(rows)
	if len(msgs) >= len(rows)/4 {
		t.Fatalf("%d rows packed into %d messages, want far fewer", len(rows), len(msgs))
	}
	var got []string // msg ids of the commands, in delivery order
	orderEvents := 0
	for _, m := range msgs {
		if m.Subject == event.Subject {
			orderEvents++
			if m.Header.Get(jetstream.MsgIDHeader) != event.MsgID || m.Header.Get(events.HeaderBatch) != "" {
				t.Errorf("order event became %v", m.Header)
			}
			continue
		}
		lines := [][]byte{m.Data}
		if h := m.Header.Get(events.HeaderBatch); h != "" {
			var err error
			if lines, err = events.SplitBatch(m.Data, h); err != nil {
				t.Fatal(err)
			}
		}
		var ids []string
		for _, l := range lines {
			c, err := events.DecodeCommand(l)
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, c.MsgID(nonce(c)))
		}
		want := ids[0]
		if len(ids) > 1 {
			want = events.BatchMsgID(ids)
		}
		if id := m.Header.Get(jetstream.MsgIDHeader); id != want {
			t.Errorf("message id %s, want %s", id, want)
		}
		got = append(got, ids...)
	}
	if orderEvents != 3 || len(got) != 600 {
		t.Fatalf("%d order events and %d commands out, want 3 and 600", orderEvents, len(got))
	}
	for i := range 200 {
		key := "o-" + strconv.Itoa(i)
		var order []string
		for _, id := range got {
			if strings.HasPrefix(id, "clear:"+key+":") {
				order = append(order, id)
			}
		}
		if want := []string{"clear:" + key + ":1:nonce-" + key + "-000001", "clear:" + key + ":2:nonce-" + key + "-000002", "clear:" + key + ":3:nonce-" + key + "-000003"}; !slices.Equal(order, want) {
			t.Fatalf("key %s: %v, want %v", key, order, want)
		}
	}
}
