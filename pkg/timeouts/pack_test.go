package timeouts_test

import (
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ordertimeout/ordertimeout/pkg/events"
	"github.com/ordertimeout/ordertimeout/pkg/outbox"
	"github.com/ordertimeout/ordertimeout/pkg/timeouts"
)

// TestPack: the relay's rows come out as one batch per partition
// with its header and id, order events as they were, and every command
// once, each key's in order.
func TestPack(t *testing.T) {
	t.Parallel()
	row := func(c events.Command) outbox.Message {
		data, err := json.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		return outbox.Message{Subject: c.Subject(), MsgID: c.MsgID(), Data: data}
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
			ids = append(ids, c.MsgID())
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
		if want := []string{"clear:" + key + ":1", "clear:" + key + ":2", "clear:" + key + ":3"}; !slices.Equal(order, want) {
			t.Fatalf("key %s: %v, want %v", key, order, want)
		}
	}
}
