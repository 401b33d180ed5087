package timeouts_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ordertimeout/ordertimeout/pkg/events"
	"github.com/ordertimeout/ordertimeout/pkg/outbox"
	"github.com/ordertimeout/ordertimeout/pkg/timeouts"
)

// printTx stands for the caller's pgx.Tx: it prints what would be
// inserted into the outbox.
type printTx struct{}

func (printTx) Exec(_ context.Context, _ string, args ...any) (pgconn.CommandTag, error) {
	subjects, ids := args[0].([]string), args[1].([]string)
	for i := range subjects {
		fmt.Println(subjects[i], withoutNonce(ids[i]))
	}
	return pgconn.CommandTag{}, nil
}

// withoutNonce returns a command's Nats-Msg-Id without its random nonce
// (events.NewNonce), which an example cannot print.
func withoutNonce(id string) string {
	if i := strings.LastIndexByte(id, ':'); strings.Count(id, ":") == 3 {
		return id[:i] + ":<nonce>"
	}
	return id
}

// A service sets a deadline in the transaction of its own change, extends
// it with a newer version, and clears it when the reservation is
// confirmed. With a pool, tx is the pgx.Tx of the change; after the commit
// the relay (outbox.NewRelay with Config.Pack = timeouts.Pack) publishes.
func ExampleWriter() {
	ctx := context.Background()
	now := time.Date(2026, 11, 26, 9, 0, 0, 0, time.UTC)
	w := timeouts.Writer{Tenant: "reservations", FireSubjectPrefixes: []string{"reservations.expire."}, Now: func() time.Time { return now }}
	var tx printTx
	d := timeouts.Deadline{Key: "res-42", Version: 1, At: now.Add(15 * time.Minute), FireSubject: "reservations.expire.res-42"}
	if err := w.Set(ctx, tx, d); err != nil {
		fmt.Println(err)
	}
	d.Version, d.At = 2, d.At.Add(10*time.Minute) // extend: a newer version
	if err := w.Set(ctx, tx, d); err != nil {
		fmt.Println(err)
	}
	if err := w.Clear(ctx, tx, "res-42", 3); err != nil {
		fmt.Println(err)
	}
	// Output:
	// timeouts.cmd.reservations.res-42 set:reservations.res-42:1:<nonce>
	// timeouts.cmd.reservations.res-42 set:reservations.res-42:2:<nonce>
	// timeouts.cmd.reservations.res-42 clear:reservations.res-42:3:<nonce>
}

// What the platform would refuse is refused at the call, with the reason
// timeoutd would dead-letter it with; nothing is written.
func ExampleRefusedError() {
	w := timeouts.Writer{Tenant: "reservations", FireSubjectPrefixes: []string{"reservations.expire."}}
	for _, d := range []timeouts.Deadline{
		{Key: "res 42", Version: 1, At: time.Now(), FireSubject: "reservations.expire.res-42"},
		{Key: "res-42", Version: 1, At: time.Now(), FireSubject: "orders.cancel.res-42"},
		{Key: "res-42", Version: 1, At: time.Now(), FireSubject: "reservations.expire.res-42", Payload: []byte(`[1]`)},
	} {
		err := w.Set(context.Background(), printTx{}, d)
		var r *timeouts.RefusedError
		if errors.As(err, &r) {
			fmt.Println(errors.Is(err, timeouts.ErrRefused), r.Reason, r.Field)
		}
	}
	// Another tenant's key, in a command written as it is.
	orders, _ := timeouts.ClearCommand("01a206f9-f111-7d86-b38b-7b1371060b99", 1000, time.Now())
	var r *timeouts.RefusedError
	if errors.As(w.Write(context.Background(), printTx{}, orders), &r) {
		fmt.Println(r.Reason, r.Field)
	}
	// Output:
	// true invalid_key key
	// true subject_not_allowed fire_subject
	// true invalid_payload payload
	// foreign_key key
}

// The command a deadline becomes, as published: its subject, its dedupe
// id and its JSON.
func ExampleSetCommand() {
	at := time.Date(2026, 11, 26, 9, 15, 0, 0, time.UTC)
	c, err := timeouts.SetCommand(timeouts.Deadline{Key: "res-42", Version: 1, At: at,
		FireSubject: "reservations.expire.res-42", Payload: []byte(`{"sku":"A-1","qty":2}`)}, at.Add(-15*time.Minute))
	if err != nil {
		fmt.Println(err)
		return
	}
	m, _ := timeouts.Message(c)
	fmt.Println(m.Subject)
	fmt.Println(withoutNonce(m.MsgID))
	fmt.Println(string(m.Data))
	// Output:
	// timeouts.cmd.res-42
	// set:res-42:1:<nonce>
	// {"schema":1,"kind":"set","key":"res-42","version":1,"deadline":"2026-11-26T09:15:00Z","fire_subject":"reservations.expire.res-42","payload":{"sku":"A-1","qty":2},"issued_at":"2026-11-26T09:00:00Z"}
}

// The relay packs a claim's commands into one message per partition, with
// the batch header and a dedupe id of the batch's commands.
func ExamplePack() {
	var rows []outbox.Message
	for _, key := range []string{"res-33", "res-7", "res-46"} { // res-33 and res-46: partition 10
		c, _ := timeouts.ClearCommand(key, 7, time.Date(2026, 11, 26, 9, 0, 0, 0, time.UTC))
		m, _ := timeouts.Message(c)
		rows = append(rows, m)
	}
	for _, m := range timeouts.Pack(rows) {
		id := m.Header.Get(jetstream.MsgIDHeader)
		if strings.HasPrefix(id, "batch:") {
			id = "batch:<32 hex digits of the commands' ids>"
		}
		fmt.Println(m.Subject, m.Header.Get(events.HeaderBatch), withoutNonce(id))
	}
	// Output:
	// timeouts.cmd.res-33 2 batch:<32 hex digits of the commands' ids>
	// timeouts.cmd.res-7  clear:res-7:7:<nonce>
}

// A consumer decodes expiry events strictly: what does not decode is
// dead-lettered with its reason, never handled.
func ExampleDecodeExpiry() {
	_, err := timeouts.DecodeExpiry("reservations.expire.res-42",
		[]byte(`{"schema":1,"outcome":"missed","key":"res-42","version":1,"deadline":"2026-11-26T09:15:00Z","fired_at":"2026-11-26T10:15:00Z"}`))
	fmt.Println(events.ReasonOf(err))
	// Output:
	// unknown_kind
}
