package timeouts

import (
	"strconv"

	"github.com/nats-io/nats.go"

	"github.com/ordertimeout/ordertimeout/pkg/events"
	"github.com/ordertimeout/ordertimeout/pkg/outbox"
)

// Pack is the outbox relay's Pack (outbox.Config.Pack) for a producer of
// deadlines: the timeout commands among rows are packed into batches of one
// partition's commands (events.Batch), each published on its first key's
// command subject with events.HeaderBatch and the batch's Nats-Msg-Id, so
// the broker stores, delivers and acknowledges a batch once instead of
// once per command. A key's commands keep their order. Other rows (say,
// domain events written to the same outbox) and lone commands go one
// message each, as they were. It costs one pass over rows and a copy of the
// commands' data.
func Pack(rows []outbox.Message) []*nats.Msg {
	in := make([]events.CommandMessage, len(rows))
	for i, r := range rows {
		in[i] = events.CommandMessage{Subject: r.Subject, MsgID: r.MsgID, Data: r.Data, Count: 1}
		if r.TraceParent != "" {
			in[i].TraceParents = []string{r.TraceParent}
		}
	}
	packed := events.Batch(in)
	msgs := make([]*nats.Msg, len(packed))
	for i, p := range packed {
		m := outbox.Message{Subject: p.Subject, MsgID: p.MsgID, Data: p.Data}
		if p.Count == 1 && len(p.TraceParents) == 1 {
			m.TraceParent = p.TraceParents[0]
		}
		msgs[i] = m.Msg()
		if p.Count > 1 {
			msgs[i].Header.Set(events.HeaderBatch, strconv.Itoa(p.Count))
			if h := p.TraceParentsHeader(); h != "" {
				msgs[i].Header.Set(events.HeaderBatchTraceParents, h)
			}
		}
	}
	return msgs
}
