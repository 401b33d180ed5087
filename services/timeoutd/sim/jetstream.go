package sim

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/ordertimeout/ordertimeout/internal/eventstest"
	"github.com/ordertimeout/ordertimeout/internal/retry"
	"github.com/ordertimeout/ordertimeout/pkg/events"
	"github.com/ordertimeout/ordertimeout/services/timeoutd"
	"github.com/ordertimeout/ordertimeout/services/timeoutd/internal/lease"
)

// jetStream is the model of JetStream, under the world's lock.
type jetStream struct {
	parts  [events.Partitions]*stream
	stored map[string]storedEvent // the expiry stream, by Nats-Msg-Id
	// notify is closed, and replaced, whenever a command may have become
	// available to a consumer.
	notify chan struct{}
	// refused are the commands dead-lettered, as key@version.
	refused map[string]bool
	// fences are, per partition, its last fence in the expiry stream, and
	// seq the stream's last sequence.
	fences [events.Partitions]fence
	seq    uint64
}

// fence is a partition's fence message: its sequence, and the epoch it
// names.
type fence struct {
	seq   uint64
	owner string
	epoch int64
}

func (js *jetStream) init() {
	js.stored, js.notify, js.refused = map[string]storedEvent{}, make(chan struct{}), map[string]bool{}
	for p := range js.parts {
		js.parts[p] = &stream{}
	}
}

type storedEvent struct {
	at    time.Time
	by    string
	event events.Expiry
}

// stream is a partition's command stream and its durable consumer.
type stream struct {
	msgs []*msg
}

type msg struct {
	seq     uint64
	subject string
	msgID   string
	data    []byte
	cmds    []events.Command // one, or a batch's (events.HeaderBatch)
	done    bool             // acked or terminated
	availAt time.Time        // delivered (or nak'ed) until then
}

// produce appends cmd to its partition's stream, as a producer's publish.
func (w *World) produce(cmd events.Command) { w.produceBatch([]events.Command{cmd}) }

// produceBatch publishes cmds as pkg/timeouts' writer does: packed into
// batches of one partition's commands (events.Batch), each appended to its
// partition's stream.
func (w *World) produceBatch(cmds []events.Command) {
	msgs := make([]events.CommandMessage, len(cmds))
	for i, cmd := range cmds {
		data, err := json.Marshal(cmd)
		if err != nil {
			panic(err)
		}
		msgs[i] = events.CommandMessage{Subject: events.CommandSubject(cmd.Key), MsgID: eventstest.MsgID(cmd), Data: data, Count: 1}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	now := time.Now()
	for _, m := range events.Batch(msgs) {
		var members []events.Command
		for line := range bytes.SplitSeq(m.Data, []byte("\n")) {
			var c events.Command
			if err := json.Unmarshal(line, &c); err != nil {
				panic(err)
			}
			members = append(members, c)
		}
		key := members[0].Key
		s := w.js.parts[events.PartitionOf(key)]
		s.msgs = append(s.msgs, &msg{seq: uint64(len(s.msgs) + 1), subject: events.PartitionedCommandSubject(key), msgID: m.MsgID, data: m.Data, cmds: members})
		for _, c := range members {
			detail := string(c.Kind) + " " + c.Deadline.Format("15:04:05.000")
			if len(members) > 1 {
				detail += fmt.Sprintf(" (batch of %d)", len(members))
			}
			w.hist.add(now, "produce", "", c.Key, c.Version, detail)
		}
	}
	w.wake()
}

// wake tells the consumers that a command may be available, under w.mu.
func (w *World) wake() {
	close(w.js.notify)
	w.js.notify = make(chan struct{})
}

// source is instance id's timeoutd.Source.
type source struct {
	w     *World
	id    string
	parts map[int]bool // guarded by w.mu
}

var _ timeoutd.Source = (*source)(nil)

func (s *source) Next(ctx context.Context) ([]timeoutd.Message, error) {
	for {
		s.w.mu.Lock()
		l := s.w.linkOf(s.id)
		if l.natsCut {
			healed := l.healed
			s.w.mu.Unlock()
			if err := hang(ctx, healed); ctx.Err() != nil {
				return nil, err
			}
			continue
		}
		now := time.Now()
		var out []timeoutd.Message
		var next time.Time
		for p := range s.parts {
			for _, m := range s.w.js.parts[p].msgs {
				if m.done || len(out) == s.w.cfg.Batch {
					continue
				}
				if m.availAt.After(now) {
					if next.IsZero() || m.availAt.Before(next) {
						next = m.availAt
					}
					continue
				}
				m.availAt = now.Add(s.w.cfg.AckWait)
				out = append(out, message{w: s.w, m: m, id: s.id})
			}
		}
		notify := s.w.js.notify
		s.w.mu.Unlock()
		if len(out) > 0 {
			return out, nil
		}
		var timer <-chan time.Time
		if !next.IsZero() {
			t := time.NewTimer(next.Sub(now))
			defer t.Stop()
			timer = t.C
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-notify:
		case <-timer:
		}
	}
}

// Add starts fetching p's commands: the durable consumer is reset, so
// what a previous owner left unacked is redelivered at once. While NATS is
// cut it fails at once, as the client does when disconnected.
func (s *source) Add(_ context.Context, p int) error {
	s.w.mu.Lock()
	defer s.w.mu.Unlock()
	if s.w.linkOf(s.id).natsCut {
		return fmt.Errorf("consume partition %d: %w", p, errSimCut)
	}
	s.parts[p] = true
	for _, m := range s.w.js.parts[p].msgs {
		if !m.done {
			m.availAt = time.Time{}
		}
	}
	s.w.wake()
	return nil
}

func (s *source) Remove(p int) {
	s.w.mu.Lock()
	defer s.w.mu.Unlock()
	delete(s.parts, p)
}

func (s *source) Close() error { return nil }

func (s *source) Mark(_ context.Context, p int) (uint64, error) {
	s.w.mu.Lock()
	defer s.w.mu.Unlock()
	return uint64(len(s.w.js.parts[p].msgs)), nil
}

func (s *source) Consumed(_ context.Context, p int, mark uint64) (bool, error) {
	s.w.mu.Lock()
	defer s.w.mu.Unlock()
	for _, m := range s.w.js.parts[p].msgs[:mark] {
		if !m.done {
			return false, nil
		}
	}
	return true, nil
}

// message is one delivery of a command to instance id.
type message struct {
	w  *World
	m  *msg
	id string
}

func (m message) Subject() string { return m.m.subject }
func (m message) Data() []byte    { return m.m.data }
func (m message) Header(name string) string {
	switch {
	case name == events.HeaderBatch && len(m.m.cmds) > 1:
		return strconv.Itoa(len(m.m.cmds))
	case name == events.HeaderMsgID:
		return m.m.msgID
	}
	return ""
}

func (m message) Seq() uint64 { return m.m.seq }

func (m message) settle(what string, f func(now time.Time)) error {
	m.w.mu.Lock()
	defer m.w.mu.Unlock()
	if m.w.linkOf(m.id).natsCut {
		return errSimCut // lost: redelivered after ackWait
	}
	now := time.Now()
	f(now)
	for _, c := range m.m.cmds {
		m.w.hist.add(now, what, m.id, c.Key, c.Version, string(c.Kind))
	}
	m.w.wake()
	return nil
}

func (m message) Ack() error {
	return m.settle("ack", func(now time.Time) {
		if !m.m.done {
			m.m.done = true
			for _, c := range m.m.cmds {
				if m.w.js.refused[c.Key+"@"+strconv.FormatInt(c.Version, 10)] {
					continue
				}
				m.w.hist.acked(c, now)
				m.w.checkScheduled(m.id, c, now)
			}
		}
	})
}

func (m message) Term() error {
	return m.settle("term", func(time.Time) { m.m.done = true })
}

func (m message) NakWithDelay(d time.Duration) error {
	return m.settle("nak", func(now time.Time) {
		if !m.m.done {
			m.m.availAt = now.Add(d)
		}
	})
}

// publisher is instance id's timeoutd.Publisher and timeoutd.DeadLetterer.
type publisher struct {
	w  *World
	id string
}

var (
	_ timeoutd.Publisher    = publisher{}
	_ timeoutd.DeadLetterer = publisher{}
)

func (p publisher) Publish(ctx context.Context, evs []timeoutd.Event) (time.Time, error) {
	now := time.Now() // the moment of the publish: the checks judge it
	p.w.mu.Lock()
	l := p.w.linkOf(p.id)
	cut, healed, latency := l.natsCut, l.healed, l.natsLatency+p.w.draw()
	idx := make([]int, len(evs))
	for i, ev := range evs {
		e, err := events.DecodeExpiry(ev.Data)
		if err != nil {
			// A consumer would dead-letter it: its deadline lost.
			p.w.hist.violate(now, "decodable", ev.MsgID, fmt.Sprintf("published by %s, refused by the consumers' decoder: %v", p.id, err))
			p.w.mu.Unlock()
			return time.Time{}, fmt.Errorf("sim: the fire path published what DecodeExpiry refuses: %w", err)
		}
		idx[i] = p.w.hist.published(p.id, e, now, p.w.dbNow(), p.w.holds(p.id, events.PartitionOf(e.Key)))
	}
	p.w.mu.Unlock()
	if cut {
		return time.Time{}, hang(ctx, healed)
	}
	if latency > 0 && !retry.Sleep(ctx, latency) {
		return time.Time{}, ctx.Err()
	}
	p.w.mu.Lock()
	defer p.w.mu.Unlock()
	at := time.Now()
	var fenced error
	for i, ev := range evs {
		e, _ := events.DecodeExpiry(ev.Data)
		if s, ok := p.w.js.stored[ev.MsgID]; ok && at.Sub(s.at) < p.w.cfg.Dedupe {
			continue // a duplicate within the window
		}
		if f := p.w.js.fences[ev.Partition]; ev.Fence != 0 && f.seq != ev.Fence {
			p.w.hist.add(at, "refused", p.id, e.Key, e.Version, fmt.Sprintf("fence %d of partition %d, its last %d", ev.Fence, ev.Partition, f.seq))
			fenced = fmt.Errorf("sim: %w (fence %d of partition %d)", timeoutd.ErrFenced, ev.Fence, ev.Partition)
			continue
		}
		// Stored under the lease, or under the partition's last fence: no
		// newer owner fenced it, so none acknowledged a command of it yet.
		p.w.hist.stored(idx[i], at, ev.Fence != 0 || p.w.holds(p.id, events.PartitionOf(e.Key)))
		if _, ok := p.w.js.stored[ev.MsgID]; ok {
			p.w.hist.violate(at, "effectively once", e.Key, fmt.Sprintf("%s stored again by %s after the dedupe window", ev.MsgID, p.id))
		}
		p.w.js.seq++
		p.w.js.stored[ev.MsgID] = storedEvent{at: at, by: p.id, event: e}
	}
	if fenced != nil {
		return time.Time{}, fenced
	}
	if p.w.cfg.PubAckLossP > 0 && p.w.cfg.Rand() < p.w.cfg.PubAckLossP {
		return time.Time{}, errSimPubAck
	}
	return at, nil
}

// Fence publishes fence's partitions' fences as Publish publishes: it
// hangs while NATS is cut, takes the link's latency, and is stored then.
func (p publisher) Fence(ctx context.Context, lf lease.Fence, expect []uint64) ([]uint64, error) {
	p.w.mu.Lock()
	l := p.w.linkOf(p.id)
	cut, healed, latency := l.natsCut, l.healed, l.natsLatency+p.w.draw()
	p.w.mu.Unlock()
	if cut {
		return nil, hang(ctx, healed)
	}
	if latency > 0 && !retry.Sleep(ctx, latency) {
		return nil, ctx.Err()
	}
	p.w.mu.Lock()
	defer p.w.mu.Unlock()
	seqs := make([]uint64, len(lf.Leases))
	for i, ls := range lf.Leases {
		if expect != nil && p.w.js.fences[ls.Partition].seq != expect[i] {
			continue
		}
		p.w.js.seq++
		p.w.js.fences[ls.Partition] = fence{seq: p.w.js.seq, owner: lf.Owner, epoch: ls.Epoch}
		seqs[i] = p.w.js.seq
	}
	p.w.hist.add(time.Now(), "fence", p.id, "-", 0, fmt.Sprint(lf.Leases, seqs))
	return seqs, nil
}

// LastFence returns partition part's last fence; it hangs while NATS is
// cut.
func (p publisher) LastFence(ctx context.Context, part int) (timeoutd.StreamFence, error) {
	p.w.mu.Lock()
	l := p.w.linkOf(p.id)
	cut, healed := l.natsCut, l.healed
	f := p.w.js.fences[part]
	p.w.mu.Unlock()
	if cut {
		return timeoutd.StreamFence{}, hang(ctx, healed)
	}
	return timeoutd.StreamFence{Seq: f.seq, Owner: f.owner, Epoch: f.epoch}, nil
}

func (p publisher) Stored(_ context.Context, _ string, msgID string) (bool, error) {
	p.w.mu.Lock()
	defer p.w.mu.Unlock()
	_, ok := p.w.js.stored[msgID]
	return ok, nil
}

// DeadLetter stores a dead letter as a publish would: it hangs while NATS
// is cut, and takes the link's latency.
func (p publisher) DeadLetter(ctx context.Context, d events.DeadLetter) error {
	p.w.mu.Lock()
	l := p.w.linkOf(p.id)
	cut, healed, latency := l.natsCut, l.healed, l.natsLatency+p.w.draw()
	p.w.hist.add(time.Now(), "dlq", p.id, "-", 0, string(d.Reason))
	p.w.mu.Unlock()
	if cut {
		return hang(ctx, healed)
	}
	if latency > 0 && !retry.Sleep(ctx, latency) {
		return ctx.Err()
	}
	// A batch's acknowledgement does not accept the commands of it that
	// were dead-lettered.
	var c events.Command
	if json.Unmarshal(d.Data, &c) == nil && c.Key != "" {
		p.w.mu.Lock()
		if p.w.js.refused == nil {
			p.w.js.refused = map[string]bool{}
		}
		p.w.js.refused[c.Key+"@"+strconv.FormatInt(c.Version, 10)] = true
		p.w.mu.Unlock()
	}
	return nil
}
