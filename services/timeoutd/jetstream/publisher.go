package jetstream

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ordertimeout/ordertimeout/internal/tracing"
	"github.com/ordertimeout/ordertimeout/pkg/events"
	"github.com/ordertimeout/ordertimeout/services/timeoutd"
	"github.com/ordertimeout/ordertimeout/services/timeoutd/internal/lease"
)

// AckTimeoutDefault bounds the wait for a batch's PubAcks.
const AckTimeoutDefault = 5 * time.Second

// Publisher publishes expiry events asynchronously and waits for their
// PubAcks. It implements timeoutd.Publisher.
type Publisher struct {
	js         jetstream.JetStream
	ackTimeout time.Duration
}

var _ timeoutd.Publisher = Publisher{}

// NewPublisher returns a Publisher through js whose batches wait at most
// ackTimeout for their PubAcks (0: AckTimeoutDefault). js's
// PublishAsyncMaxPending must hold the batches in flight (FireBatch times
// FireConcurrency), or publishing stalls.
func NewPublisher(js jetstream.JetStream, ackTimeout time.Duration) Publisher {
	return Publisher{js: js, ackTimeout: cmp.Or(ackTimeout, AckTimeoutDefault)}
}

// Publish implements timeoutd.Publisher. The wait for the PubAcks is
// bounded from the first send, not from the wait, so that when a
// connection drops the batches in flight time out together.
func (p Publisher) Publish(ctx context.Context, evs []timeoutd.Event) (time.Time, error) {
	ctx, cancel := context.WithTimeout(ctx, p.ackTimeout)
	defer cancel()
	futures := make([]jetstream.PubAckFuture, len(evs))
	for i, e := range evs {
		m := &nats.Msg{Subject: e.Subject, Data: e.Data, Header: nats.Header{}}
		m.Header.Set(jetstream.MsgIDHeader, e.MsgID)
		if e.TraceParent != "" {
			m.Header.Set(tracing.HeaderTraceParent, e.TraceParent)
		}
		if e.Fence != 0 {
			m.Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(e.Fence, 10))
			m.Header.Set(jetstream.ExpectedLastSubjSeqSubjHeader, events.FenceSubject(e.Partition))
		}
		f, err := p.js.PublishMsgAsync(m)
		if err != nil {
			return time.Time{}, fmt.Errorf("publish %s: %w", e.Subject, err)
		}
		futures[i] = f
	}
	for i, f := range futures {
		select {
		case <-f.Ok():
		case err := <-f.Err():
			if wrongLastSequence(err) {
				err = fmt.Errorf("%w (fence %d of partition %d): %w", timeoutd.ErrFenced, evs[i].Fence, evs[i].Partition, err)
			}
			return time.Time{}, fmt.Errorf("publish %s (%s): %w", evs[i].Subject, evs[i].MsgID, err)
		case <-ctx.Done():
			return time.Time{}, fmt.Errorf("wait for the PubAck of %s: %w", evs[i].MsgID, ctx.Err())
		}
	}
	return time.Now(), nil
}

// wrongLastSequence reports whether err is the stream's refusal of an
// expected last sequence (JSStreamWrongLastSequenceErr).
func wrongLastSequence(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence
}

// fenceData is what a fence message holds.
type fenceData struct {
	Owner string `json:"owner"`
	Epoch int64  `json:"epoch"`
}

// Fence implements timeoutd.Publisher: one message per lease on its
// partition's fence subject, holding the owner and the epoch, its
// Nats-Msg-Id naming them and the partition (a retry is deduplicated, and
// its PubAck gives the first one's sequence), published without waiting
// between them. With expect, each expects its subject's last sequence
// (Nats-Expected-Last-Subject-Sequence), and a refusal leaves the
// partition's sequence 0.
func (p Publisher) Fence(ctx context.Context, fence lease.Fence, expect []uint64) ([]uint64, error) {
	ctx, cancel := context.WithTimeout(ctx, p.ackTimeout)
	defer cancel()
	futures := make([]jetstream.PubAckFuture, len(fence.Leases))
	for i, l := range fence.Leases {
		data, _ := json.Marshal(fenceData{Owner: fence.Owner, Epoch: l.Epoch}) // cannot fail: plain fields
		m := &nats.Msg{Subject: events.FenceSubject(l.Partition), Data: data, Header: nats.Header{}}
		m.Header.Set(jetstream.MsgIDHeader, fmt.Sprintf("fence:%d:%d:%s", l.Partition, l.Epoch, fence.Owner))
		if expect != nil {
			m.Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(expect[i], 10))
		}
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
			if expect == nil || !wrongLastSequence(err) {
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
func (p Publisher) LastFence(ctx context.Context, part int) (uint64, int64, error) {
	ctx, cancel := context.WithTimeout(ctx, p.ackTimeout)
	defer cancel()
	s, err := p.js.Stream(ctx, events.StreamExpiries)
	if err != nil {
		return 0, 0, fmt.Errorf("expiry stream: %w", err)
	}
	m, err := s.GetLastMsgForSubject(ctx, events.FenceSubject(part))
	switch {
	case errors.Is(err, jetstream.ErrMsgNotFound):
		return 0, 0, nil
	case err != nil:
		return 0, 0, fmt.Errorf("partition %d's fence: %w", part, err)
	}
	var d fenceData
	if err := json.Unmarshal(m.Data, &d); err != nil {
		return 0, 0, fmt.Errorf("partition %d's fence at %d: %w", part, m.Sequence, err)
	}
	return m.Sequence, d.Epoch, nil
}

// Stored implements timeoutd.Publisher with gets of the subject's
// messages on the expiry stream, each the next on the subject after the
// last ($JS.API.STREAM.MSG.GET with next_by_subj, which timeoutd's NATS
// user may call on that stream; the server finds them by its subject
// index), until one has the Nats-Msg-Id msgID or none is left: one get a
// message of the subject, usually one or two (a key's own fire subject).
func (p Publisher) Stored(ctx context.Context, subject, msgID string) (bool, error) {
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
