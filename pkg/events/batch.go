package events

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"strings"
)

// HeaderBatch marks a command batch: several commands of one partition in
// one message, so the broker stores, delivers and acknowledges them once.
// Its value is the number of commands; the data holds them one per line,
// each a compact JSON command as DecodeCommand reads it, separated by '\n'.
// A batch is published on the command subject of its first command's key
// (CommandSubject), so the server files it in that key's partition stream,
// and every command in it must be of that partition. Its Nats-Msg-Id is
// BatchMsgID of its commands' ids. A message without the header is one
// command.
const HeaderBatch = "Timeouts-Batch"

// HeaderBatchTraceParents carries the trace contexts of a batch's
// commands: the W3C traceparent of each line's command, in line order,
// separated by ',', empty for a command written untraced. A message of one
// command carries its own in the standard traceparent header instead. It
// is optional, and a value that does not hold one entry per line is
// ignored: a trace context never makes a command refused.
const HeaderBatchTraceParents = "Timeouts-Batch-Traceparents"

// Limits of a command batch.
const (
	// MaxBatchCommands is the most commands a batch holds. At 32 the
	// broker's cost per message is spread thin over its commands
	// (docs/ARCHITECTURE.md, "Ingest"); more would save little, and the consumer's
	// buffers are sized in messages: timeoutd's prefetch of 128 messages a
	// partition is then at most 4,096 commands a partition, a few seconds'
	// work for all 64, inside its 10 s AckWait.
	MaxBatchCommands = 32
	// MaxBatchBytes bounds a batch's data, well under NATS's default
	// max_payload of 1 MiB. Valid commands (at most about 4.7 KiB each) never
	// reach it at MaxBatchCommands; it bounds batches of commands padded
	// with unknown fields.
	MaxBatchBytes = 256 << 10
)

// CommandMessage is an encoded command message ready to publish: one
// command, or a batch of commands of one partition.
type CommandMessage struct {
	Subject string
	MsgID   string
	Data    []byte
	// Count is how many commands Data holds. A message of more than one is
	// a batch: publish it with HeaderBatch set to strconv.Itoa(Count).
	Count int
	// TraceParents are the W3C traceparents of its commands, one per
	// command ("" for none), or nil when none has one. Publish a batch's
	// with HeaderBatchTraceParents (TraceParentsHeader), a single command's
	// as its traceparent header.
	TraceParents []string
}

// TraceParentsHeader returns the value of HeaderBatchTraceParents for
// m's TraceParents, or "" when none is set.
func (m CommandMessage) TraceParentsHeader() string {
	for _, tp := range m.TraceParents {
		if tp != "" {
			return strings.Join(m.TraceParents, ",")
		}
	}
	return ""
}

// SplitTraceParents returns the traceparents of a batch of count commands
// given its HeaderBatchTraceParents value, or nil when the value is empty
// or does not hold count entries.
func SplitTraceParents(header string, count int) []string {
	if header == "" {
		return nil
	}
	tps := strings.Split(header, ",")
	if len(tps) != count {
		return nil
	}
	return tps
}

// Batch packs messages of one command each (Count 1, on CommandSubject of
// their key, data without a newline, as json.Marshal writes a Command)
// into batches of one partition's commands, in the order given, of at
// most MaxBatchCommands commands and MaxBatchBytes bytes. A batch starts
// where the first of its commands was, so the commands of a key keep
// their order. A batch of one is returned as the message it was; any
// other message (another subject, a batch already, data with a newline)
// is returned as it is, where it was.
func Batch(msgs []CommandMessage) []CommandMessage {
	type batch struct {
		at      int   // its index in out
		members []int // its commands' indexes in msgs
		size    int   // its data's length
	}
	out := make([]CommandMessage, 0, len(msgs))
	var batches []*batch
	var open [Partitions]*batch
	for i, m := range msgs {
		key, ok := strings.CutPrefix(m.Subject, CommandSubjectPrefix)
		if !ok || m.Count != 1 || !ValidTimeoutKey(key) || bytes.IndexByte(m.Data, '\n') >= 0 {
			out = append(out, m)
			continue
		}
		p := PartitionOf(key)
		if b := open[p]; b != nil && len(b.members) < MaxBatchCommands && b.size+1+len(m.Data) <= MaxBatchBytes {
			b.members, b.size = append(b.members, i), b.size+1+len(m.Data)
			continue
		}
		open[p] = &batch{at: len(out), members: []int{i}, size: len(m.Data)}
		batches = append(batches, open[p])
		out = append(out, m)
	}
	for _, b := range batches {
		if len(b.members) == 1 {
			continue
		}
		data := make([]byte, 0, b.size)
		ids := make([]string, len(b.members))
		var tps []string
		for j, i := range b.members {
			if j > 0 {
				data = append(data, '\n')
			}
			data = append(data, msgs[i].Data...)
			ids[j] = msgs[i].MsgID
			if len(msgs[i].TraceParents) == 1 && msgs[i].TraceParents[0] != "" {
				if tps == nil {
					tps = make([]string, len(b.members))
				}
				tps[j] = msgs[i].TraceParents[0]
			}
		}
		out[b.at] = CommandMessage{Subject: out[b.at].Subject, MsgID: BatchMsgID(ids), Data: data, Count: len(b.members), TraceParents: tps}
	}
	return out
}

// BatchMsgID returns the Nats-Msg-Id of a batch of the commands with the
// given ids, in order: batch:<128 bits of SHA-256 of the ids, in hex>. It
// depends on the commands and nothing else, so a batch republished with
// the same commands is dropped as a duplicate, and a batch with other
// commands never is.
func BatchMsgID(ids []string) string {
	h := sha256.New()
	for _, id := range ids {
		h.Write([]byte(id))
		h.Write([]byte{0})
	}
	return "batch:" + hex.EncodeToString(h.Sum(nil)[:16])
}

// BatchCount returns how many commands a message holds, given the value
// of its HeaderBatch header: the count when it is one from 2 to
// MaxBatchCommands, else 1. A message without the header is one command;
// one whose count is malformed is refused whole by SplitBatch, so it counts
// as one message's worth of work.
func BatchCount(header string) int {
	if n, err := strconv.Atoi(header); err == nil && n > 1 && n <= MaxBatchCommands {
		return n
	}
	return 1
}

// SplitBatch returns the commands of a batch message, one per line of
// data, given the value of its HeaderBatch header. The lines are slices of
// data, still to be decoded. It returns an *Error with ReasonMalformed
// when the header is not a count from 1 to MaxBatchCommands or data does
// not hold that many lines.
func SplitBatch(data []byte, header string) ([][]byte, error) {
	n, err := strconv.Atoi(header)
	if err != nil || n < 1 || n > MaxBatchCommands {
		return nil, invalid(ReasonMalformed, HeaderBatch, "must be a count of commands from 1 to %d, got %q", MaxBatchCommands, truncate(header))
	}
	if got := bytes.Count(data, []byte{'\n'}) + 1; got != n {
		return nil, invalid(ReasonMalformed, HeaderBatch, "says %d commands, the data holds %d lines", n, got)
	}
	lines := make([][]byte, 0, n)
	for line := range bytes.SplitSeq(data, []byte{'\n'}) {
		lines = append(lines, line)
	}
	return lines, nil
}
