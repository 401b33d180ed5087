package jetstream

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
	"golang.org/x/sync/errgroup"

	"github.com/ordertimeout/ordertimeout/internal/tracing"
	"github.com/ordertimeout/ordertimeout/pkg/events"
	"github.com/ordertimeout/ordertimeout/services/timeoutd"
	"github.com/ordertimeout/ordertimeout/services/timeoutd/internal/lease"
)

// AckTimeoutDefault bounds the wait for a batch's PubAcks.
const AckTimeoutDefault = 5 * time.Second

// maxAtomicBatch is the most events one atomic batch carries: JetStream's
// default limit (a server's jetstream.limits.batch.max_msgs).
const maxAtomicBatch = 1000

// Publisher publishes expiry events and waits for their PubAcks. It
// implements timeoutd.Publisher.
//
// A fenced event expects its partition's fence to be the last message on
// the fence subject (Nats-Expected-Last-Subject-Sequence with -Subject).
// On one server the stream checks that for each message as it stores it,
// so the events go asynchronously, all at once. On a replicated stream the
// leader admits one message at a time per expected subject: it holds the
// subject "in process" until the message is committed by the replicas,
// and refuses any other that expects it meanwhile (error 10164). There the
// events of a partition go as one atomic batch (Nats-Batch-Id) whose first
// message carries the expectation, one batch per partition at a time (the
// partition's lane), the partitions' batches side by side: a round trip
// per partition per batch, not per event (docs/ARCHITECTURE.md, "A
// former owner's late publish is refused by the stream").
type Publisher struct {
	js         jetstream.JetStream
	ackTimeout time.Duration
	// lanes holds one token per partition: taken while the partition's
	// batch is in flight.
	lanes [events.Partitions]chan struct{}

	modeMu sync.Mutex
	mode   mode
}

// mode is how fenced events are published, found from the expiry stream's
// configuration on the first publish.
type mode int

const (
	modeUnknown mode = iota
	modeEach         // one message each, asynchronously
	modeBatches      // one atomic batch per partition at a time
)

var _ timeoutd.Publisher = (*Publisher)(nil)

// NewPublisher returns a Publisher through js whose batches wait at most
// ackTimeout for their PubAcks (0: AckTimeoutDefault). js's
// PublishAsyncMaxPending must hold the batches in flight (FireBatch times
// FireConcurrency), or publishing stalls.
func NewPublisher(js jetstream.JetStream, ackTimeout time.Duration) *Publisher {
	p := &Publisher{js: js, ackTimeout: cmp.Or(ackTimeout, AckTimeoutDefault)}
	for i := range p.lanes {
		p.lanes[i] = make(chan struct{}, 1)
	}
	return p
}

// Publish implements timeoutd.Publisher. The wait for the PubAcks is
// bounded from the first send, not from the wait, so that when a
// connection drops the batches in flight time out together.
func (p *Publisher) Publish(ctx context.Context, evs []timeoutd.Event) (time.Time, error) {
	ctx, cancel := context.WithTimeout(ctx, p.ackTimeout)
	defer cancel()
	m, err := p.modeOf(ctx)
	if err != nil {
		return time.Time{}, err
	}
	if m == modeEach {
		err = p.publishEach(ctx, evs)
	} else {
		err = p.publishBatches(ctx, evs)
	}
	if err != nil {
		return time.Time{}, err
	}
	return time.Now(), nil
}

// modeOf returns how fenced events are published: in atomic batches when
// the expiry stream is replicated and allows them, else one by one. An
// expiry stream replicated without atomic batches (created before they
// were allowed; the streams bootstrap updates it) is published to one by
// one, and a refusal for a subject in process is retried.
func (p *Publisher) modeOf(ctx context.Context) (mode, error) {
	p.modeMu.Lock()
	defer p.modeMu.Unlock()
	if p.mode != modeUnknown {
		return p.mode, nil
	}
	s, err := p.js.Stream(ctx, events.StreamExpiries)
	if err != nil {
		return modeUnknown, fmt.Errorf("expiry stream: %w", err)
	}
	p.mode = modeEach
	if cfg := s.CachedInfo().Config; cfg.Replicas > 1 && cfg.AllowAtomicPublish {
		p.mode = modeBatches
	}
	return p.mode, nil
}

// message returns e as a NATS message: its subject, data, Nats-Msg-Id and
// traceparent.
func message(e timeoutd.Event) *nats.Msg {
	m := &nats.Msg{Subject: e.Subject, Data: e.Data, Header: nats.Header{}}
	m.Header.Set(jetstream.MsgIDHeader, e.MsgID)
	if e.TraceParent != "" {
		m.Header.Set(tracing.HeaderTraceParent, e.TraceParent)
	}
	return m
}

// expectFence sets on m the expectation that e's partition's fence is the
// last message on its fence subject.
func expectFence(m *nats.Msg, e timeoutd.Event) {
	m.Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(e.Fence, 10))
	m.Header.Set(jetstream.ExpectedLastSubjSeqSubjHeader, events.FenceSubject(e.Partition))
}

// publishEach publishes evs asynchronously, each expecting its fence, and
// waits for every PubAck.
func (p *Publisher) publishEach(ctx context.Context, evs []timeoutd.Event) error {
	futures := make([]jetstream.PubAckFuture, len(evs))
	for i, e := range evs {
		m := message(e)
		if e.Fence != 0 {
			expectFence(m, e)
		}
		f, err := p.js.PublishMsgAsync(m)
		if err != nil {
			return fmt.Errorf("publish %s: %w", e.Subject, err)
		}
		futures[i] = f
	}
	for i, f := range futures {
		select {
		case <-f.Ok():
		case err := <-f.Err():
			if code := errorCode(err); code == jetstream.JSErrCodeStreamWrongLastSequenceConstant && evs[i].Fence != 0 {
				// Another message expecting the fence is in process (a
				// replicated stream without atomic batches): this one
				// alone, again.
				if err := p.publishOne(ctx, evs[i]); err != nil {
					return err
				}
				continue
			}
			return publishError(evs[i], err)
		case <-ctx.Done():
			return fmt.Errorf("wait for the PubAck of %s: %w", evs[i].MsgID, ctx.Err())
		}
	}
	return nil
}

// publishBatches publishes the fenced events of evs as one atomic batch
// per partition (publishPartition), the partitions side by side, and the
// unfenced ones (a tool's, a test's) one by one.
func (p *Publisher) publishBatches(ctx context.Context, evs []timeoutd.Event) error {
	var byPart [events.Partitions][]timeoutd.Event
	var unfenced []timeoutd.Event
	for _, e := range evs {
		if e.Fence == 0 {
			unfenced = append(unfenced, e)
			continue
		}
		byPart[e.Partition] = append(byPart[e.Partition], e)
	}
	var g errgroup.Group
	if len(unfenced) > 0 {
		g.Go(func() error { return p.publishEach(ctx, unfenced) })
	}
	for part, pe := range byPart {
		if len(pe) > 0 {
			g.Go(func() error { return p.publishPartition(ctx, part, pe) })
		}
	}
	return g.Wait()
}

// publishPartition publishes evs, all of partition part, in atomic
// batches of at most maxAtomicBatch, holding the partition's lane.
func (p *Publisher) publishPartition(ctx context.Context, part int, evs []timeoutd.Event) error {
	select {
	case p.lanes[part] <- struct{}{}:
	case <-ctx.Done():
		return fmt.Errorf("wait for partition %d's batch in flight: %w", part, ctx.Err())
	}
	defer func() { <-p.lanes[part] }()
	for len(evs) > 0 {
		n := min(len(evs), maxAtomicBatch)
		if err := p.commit(ctx, evs[:n]); err != nil {
			return err
		}
		evs = evs[n:]
	}
	return nil
}

// busyRetries bounds the retries of a message or batch refused because its
// fence subject is in process (error 10164): on a replicated stream the
// leader clears it just after the PubAck of the batch before, and a late
// publish of a former owner holds it for a round trip.
const busyRetries = 8

// commit publishes evs, of one partition, as one atomic batch: every
// message but the last without a reply, the first expecting the fence,
// the last committing the batch and answered with its PubAck or the
// refusal of the whole batch. A batch refused for holding an event the
// stream already has (a retry after a PubAck lost: atomic batches do not
// deduplicate) is published again one event at a time.
func (p *Publisher) commit(ctx context.Context, evs []timeoutd.Event) error {
	nc := p.js.Conn()
	for attempt := 0; ; attempt++ {
		id := nuid.Next()
		var reply *nats.Msg
		for i, e := range evs {
			m := message(e)
			m.Header.Set(headerBatchID, id)
			m.Header.Set(headerBatchSeq, strconv.Itoa(i+1))
			if i == 0 {
				expectFence(m, e)
			}
			if i < len(evs)-1 {
				if err := nc.PublishMsg(m); err != nil {
					return fmt.Errorf("publish %s: %w", e.Subject, err)
				}
				continue
			}
			m.Header.Set(headerBatchCommit, "1")
			var err error
			if reply, err = nc.RequestMsgWithContext(ctx, m); err != nil {
				return fmt.Errorf("commit the batch of %d events of partition %d: %w", len(evs), e.Partition, err)
			}
		}
		var ack struct {
			Error *jetstream.APIError `json:"error"`
		}
		if err := json.Unmarshal(reply.Data, &ack); err != nil {
			return fmt.Errorf("the PubAck of a batch of partition %d: %w", evs[0].Partition, err)
		}
		if ack.Error == nil {
			return nil
		}
		switch ack.Error.ErrorCode {
		case jetstream.JSErrCodeStreamWrongLastSequenceConstant:
			if attempt < busyRetries && sleep(ctx, attempt) {
				continue
			}
		case errCodeBatchHasDuplicate:
			for _, e := range evs {
				if err := p.publishOne(ctx, e); err != nil {
					return err
				}
			}
			return nil
		}
		return publishError(evs[0], ack.Error)
	}
}

// publishOne publishes e alone and waits for its PubAck, again while its
// fence subject is in process.
func (p *Publisher) publishOne(ctx context.Context, e timeoutd.Event) error {
	for attempt := 0; ; attempt++ {
		m := message(e)
		if e.Fence != 0 {
			expectFence(m, e)
		}
		_, err := p.js.PublishMsg(ctx, m)
		if err == nil {
			return nil
		}
		if errorCode(err) != jetstream.JSErrCodeStreamWrongLastSequenceConstant || attempt >= busyRetries || !sleep(ctx, attempt) {
			return publishError(e, err)
		}
	}
}

// sleep waits a millisecond doubled attempt times, or until ctx ends.
func sleep(ctx context.Context, attempt int) bool {
	t := time.NewTimer(time.Millisecond << attempt)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// The headers of an atomic batch (nats-server's JSBatchId, JSBatchSeq,
// JSBatchCommit), and its refusal of a batch holding a message the stream
// already has (JSAtomicPublishContainsDuplicateMessageErr); nats.go names
// neither.
const (
	headerBatchID     = "Nats-Batch-Id"
	headerBatchSeq    = "Nats-Batch-Sequence"
	headerBatchCommit = "Nats-Batch-Commit"

	errCodeBatchHasDuplicate jetstream.ErrorCode = 10201
)

// errorCode returns the JetStream error code of err, 0 if it has none.
func errorCode(err error) jetstream.ErrorCode {
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) {
		return apiErr.ErrorCode
	}
	return 0
}

// publishError wraps err, the refusal or failure of e's publish, with
// timeoutd.ErrFenced when the stream refused it for its fence.
func publishError(e timeoutd.Event, err error) error {
	if errorCode(err) == jetstream.JSErrCodeStreamWrongLastSequence {
		err = fmt.Errorf("%w (fence %d of partition %d): %w", timeoutd.ErrFenced, e.Fence, e.Partition, err)
	}
	return fmt.Errorf("publish %s (%s): %w", e.Subject, e.MsgID, err)
}

// fenceData is what a fence message holds.
type fenceData struct {
	Owner string `json:"owner"`
	Epoch int64  `json:"epoch"`
}

// Fence implements timeoutd.Publisher: one message per lease on its
// partition's fence subject, holding the owner and the epoch, its
// Nats-Msg-Id naming them, the partition and what it expects (a retry is
// deduplicated, and its PubAck gives the first one's sequence), published without waiting
// between them. With expect, each expects its subject's last sequence
// (Nats-Expected-Last-Subject-Sequence), and a refusal leaves the
// partition's sequence 0.
func (p *Publisher) Fence(ctx context.Context, fence lease.Fence, expect []uint64) ([]uint64, error) {
	ctx, cancel := context.WithTimeout(ctx, p.ackTimeout)
	defer cancel()
	futures := make([]jetstream.PubAckFuture, len(fence.Leases))
	for i, l := range fence.Leases {
		data, _ := json.Marshal(fenceData{Owner: fence.Owner, Epoch: l.Epoch}) // cannot fail: plain fields
		m := &nats.Msg{Subject: events.FenceSubject(l.Partition), Data: data, Header: nats.Header{}}
		id := fmt.Sprintf("fence:%d:%d:%s", l.Partition, l.Epoch, fence.Owner)
		if expect != nil {
			// A fence again is a message of its own, named by what it
			// expects too: under the first fence's id, a replicated
			// stream would take it for that fence's retry and answer with
			// its sequence, no longer the last.
			id += ":" + strconv.FormatUint(expect[i], 10)
			m.Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(expect[i], 10))
		}
		m.Header.Set(jetstream.MsgIDHeader, id)
		f, err := p.js.PublishMsgAsync(m)
		if err != nil {
			return nil, fmt.Errorf("fence partition %d: %w", l.Partition, err)
		}
		futures[i] = f
	}
	seqs := make([]uint64, len(futures))
	for i, f := range futures {
		select {
		case ack := <-f.Ok():
			seqs[i] = ack.Sequence
		case err := <-f.Err():
			if expect == nil || errorCode(err) != jetstream.JSErrCodeStreamWrongLastSequence {
				return nil, fmt.Errorf("fence partition %d: %w", fence.Leases[i].Partition, err)
			}
		case <-ctx.Done():
			return nil, fmt.Errorf("wait for the PubAck of partition %d's fence: %w", fence.Leases[i].Partition, ctx.Err())
		}
	}
	return seqs, nil
}

// LastFence implements timeoutd.Publisher with a get of the fence
// subject's last message ($JS.API.STREAM.MSG.GET with last_by_subj).
func (p *Publisher) LastFence(ctx context.Context, part int) (timeoutd.StreamFence, error) {
	ctx, cancel := context.WithTimeout(ctx, p.ackTimeout)
	defer cancel()
	s, err := p.js.Stream(ctx, events.StreamExpiries)
	if err != nil {
		return timeoutd.StreamFence{}, fmt.Errorf("expiry stream: %w", err)
	}
	m, err := s.GetLastMsgForSubject(ctx, events.FenceSubject(part))
	switch {
	case errors.Is(err, jetstream.ErrMsgNotFound):
		return timeoutd.StreamFence{}, nil
	case err != nil:
		return timeoutd.StreamFence{}, fmt.Errorf("partition %d's fence: %w", part, err)
	}
	var d fenceData
	if err := json.Unmarshal(m.Data, &d); err != nil {
		return timeoutd.StreamFence{}, fmt.Errorf("partition %d's fence at %d: %w", part, m.Sequence, err)
	}
	return timeoutd.StreamFence{Seq: m.Sequence, Owner: d.Owner, Epoch: d.Epoch}, nil
}

// Stored implements timeoutd.Publisher with gets of the subject's
// messages on the expiry stream, each the next on the subject after the
// last ($JS.API.STREAM.MSG.GET with next_by_subj, which timeoutd's NATS
// user may call on that stream; the server finds them by its subject
// index), until one has the Nats-Msg-Id msgID or none is left: one get a
// message of the subject, usually one or two (a key's own fire subject).
func (p *Publisher) Stored(ctx context.Context, subject, msgID string) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, p.ackTimeout)
	defer cancel()
	s, err := p.js.Stream(ctx, events.StreamExpiries)
	if err != nil {
		return false, fmt.Errorf("expiry stream: %w", err)
	}
	for seq := uint64(1); ; {
		m, err := s.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(subject))
		switch {
		case errors.Is(err, jetstream.ErrMsgNotFound):
			return false, nil
		case err != nil:
			return false, fmt.Errorf("events on %s: %w", subject, err)
		case m.Header.Get(jetstream.MsgIDHeader) == msgID:
			return true, nil
		}
		seq = m.Sequence + 1
	}
}
