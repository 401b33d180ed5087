package events_test

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/ordertimeout/ordertimeout/pkg/events"
)

// A producer builds a set command and publishes it on its subject with its
// message id as the Nats-Msg-Id header.
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
	fmt.Println(cmd.MsgID())
	fmt.Println(string(data))
	// Output:
	// timeouts.cmd.ord-42
	// set:ord-42:1
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
