package outbox

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/ordertimeout/ordertimeout/internal/tracing"
)

// Message is one outbox row: what to publish, where, under which dedupe id.
type Message struct {
	Subject string
	MsgID   string
	Data    []byte
	// TraceParent is the W3C traceparent of the span that wrote the
	// message, published as its traceparent header so that its consumer's
	// span continues the trace; "" for none. TraceParent(ctx) reads it
	// from the writer's context. (Insert does not: one statement may
	// insert the rows of several requests.)
	TraceParent string
}

// Execer is what Insert needs of a transaction; pgx.Tx satisfies it.
type Execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// Insert writes msgs into table within the caller's transaction, in one
// statement whatever the number of messages. An empty msgs is a no-op.
func Insert(ctx context.Context, tx Execer, table string, msgs []Message) error {
	if len(msgs) == 0 {
		return nil
	}
	subjects := make([]string, len(msgs))
	ids := make([]string, len(msgs))
	data := make([][]byte, len(msgs))
	traces := make([]*string, len(msgs))
	for i, m := range msgs {
		subjects[i], ids[i], data[i] = m.Subject, m.MsgID, m.Data
		if m.TraceParent != "" {
			traces[i] = &msgs[i].TraceParent
		}
	}
	sql := `INSERT INTO ` + pgx.Identifier{table}.Sanitize() + ` (subject, msg_id, data, traceparent)
		SELECT * FROM unnest($1::text[], $2::text[], $3::bytea[], $4::text[])`
	if _, err := tx.Exec(ctx, sql, subjects, ids, data, traces); err != nil {
		return fmt.Errorf("insert %d outbox messages: %w", len(msgs), err)
	}
	return nil
}

// TraceParent returns the W3C traceparent of the sampled span in ctx, for
// Message.TraceParent, or "" when ctx has none.
func TraceParent(ctx context.Context) string { return tracing.TraceParent(ctx) }
