package events_test

import (
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/ordertimeout/ordertimeout/pkg/events"
)

// A producer builds a set command and publishes it on its subject with its
// message id as the Nats-Msg-Id header: the command's kind, key and
// version and a nonce it mints once (NewNonce) and sends again on every
// republish of this command.
func ExampleCommand() {
	cmd := events.Command{
		Schema:      events.SchemaVersion,
		Kind:        events.KindSet,
		Key:         "ord-42",
		Version:     1,
		Deadline:    time.Date(2026, 11, 22, 12, 30, 0, 0, time.UTC),
		FireSubject: events.OrderCancelSubject("ord-42"),
	}
	data, _ := json.Marshal(cmd)
	fmt.Println(cmd.Subject())
	nonce := "q3M1vNxL0o8Ztk4pWmB2aA" // events.NewNonce(), kept with the command
	fmt.Println(cmd.MsgID(nonce))
	fmt.Println(string(data))
	// Output:
	// timeouts.cmd.ord-42
	// set:ord-42:1:q3M1vNxL0o8Ztk4pWmB2aA
	// {"schema":1,"kind":"set","key":"ord-42","version":1,"deadline":"2026-11-22T12:30:00Z","fire_subject":"orders.cancel.ord-42"}
}

// A consumer decodes what it receives; a rejected message carries a reason
// to dead-letter it with.
func ExampleDecodeExpiry() {
	_, err := events.DecodeExpiry([]byte(`{"schema":9,"outcome":"fired","key":"ord-42","version":1}`))
	fmt.Println(events.ReasonOf(err))
	fmt.Println(err)
	// Output:
	// unsupported_schema
	// events: schema: schema version 9 is not supported (newest is 1)
}

// A producer with many commands to send packs them into batches, one
// message per partition, and publishes each with HeaderBatch; a consumer
// splits a batch with SplitBatch and decodes each line.
func ExampleBatch() {
	var msgs []events.CommandMessage
	for _, key := range []string{"ord-1", "ord-15", "ord-14", "ord-1"} { // ord-1 and ord-14: partition 50
		cmd := events.Command{Schema: events.SchemaVersion, Kind: events.KindClear, Key: key, Version: int64(len(msgs) + 1)}
		data, _ := json.Marshal(cmd)
		nonce := fmt.Sprintf("nonce-of-command-%06d", len(msgs)) // events.NewNonce() in production
		msgs = append(msgs, events.CommandMessage{Subject: cmd.Subject(), MsgID: cmd.MsgID(nonce), Data: data, Count: 1})
	}
	for _, m := range events.Batch(msgs) {
		fmt.Println(m.Subject, m.Count, m.MsgID)
		if m.Count > 1 { // publish with the header HeaderBatch: strconv.Itoa(m.Count)
			lines, _ := events.SplitBatch(m.Data, strconv.Itoa(m.Count))
			for _, l := range lines {
				c, _ := events.DecodeCommand(l)
				fmt.Println(" ", c.Key, c.Version)
			}
		}
	}
	// Output:
	// timeouts.cmd.ord-1 3 batch:aa82c9401ea7b7bcbe83ca0b0a7466a1
	//   ord-1 1
	//   ord-14 3
	//   ord-1 4
	// timeouts.cmd.ord-15 1 clear:ord-15:2:nonce-of-command-000001
}
