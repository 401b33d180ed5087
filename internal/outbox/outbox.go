package outbox

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Message is one outbox row: what to publish, where, under which dedupe id.
type Message struct {
	// ID is the row's id: set by QueueInsertReturning and by the relay's
	// claims, zero for a message not yet inserted.
	ID      int64
	Subject string
	MsgID   string
	Data    []byte
	// Tag is the writer's own value, carried with a handed-over message to
	// OnPublished (say, the decoded form of Data) and never stored: nil in
	// the messages the relay claims from the table itself.
	Tag any
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
	sql, args := insertSQL(table, msgs)
	if _, err := tx.Exec(ctx, sql, args...); err != nil {
		return fmt.Errorf("insert %d outbox messages: %w", len(msgs), err)
	}
	return nil
}

// QueueInsertReturning queues on b the statement of Insert that also sets
// each message's ID, so that the rows can be handed to [Relay.Handoff] once
// the transaction committed. The caller pipelines its transaction in b (say
// BEGIN, its own statements, this insert and COMMIT in one round trip); the
// IDs are set when the batch's results are read, and a failure to set them
// is this query's error. An empty msgs queues nothing.
func QueueInsertReturning(b *pgx.Batch, table string, msgs []Message) {
	if len(msgs) == 0 {
		return
	}
	sql, args := insertSQL(table, msgs)
	b.Queue(sql+` RETURNING id, msg_id`, args...).Query(func(rows pgx.Rows) error { return setIDs(rows, msgs) })
}

// setIDs reads the inserted rows' (id, msg_id) into msgs and closes rows.
// RETURNING's order is not specified, though an insert from unnest returns
// the rows in array order: take that order while the msg_ids agree, and
// match the rest by msg_id (a repeated msg_id takes the ids in turn; which
// copy of the same message gets which id is irrelevant).
func setIDs(rows pgx.Rows, msgs []Message) error {
	var at map[string][]int
	var id int64
	var msgID string
	n := 0
	_, err := pgx.ForEachRow(rows, []any{&id, &msgID}, func() error {
		if at == nil && n < len(msgs) && msgs[n].MsgID == msgID {
			msgs[n].ID = id
			n++
			return nil
		}
		if at == nil {
			at = make(map[string][]int, len(msgs)-n)
			for i := n; i < len(msgs); i++ {
				at[msgs[i].MsgID] = append(at[msgs[i].MsgID], i)
			}
		}
		is := at[msgID]
		if len(is) == 0 {
			return fmt.Errorf("unexpected msg_id %q returned", msgID)
		}
		msgs[is[0]].ID, at[msgID] = id, is[1:]
		n++
		return nil
	})
	if err == nil && n != len(msgs) {
		err = fmt.Errorf("%d ids returned", n)
	}
	if err != nil {
		return fmt.Errorf("insert %d outbox messages: %w", len(msgs), err)
	}
	return nil
}

// insertSQL returns the statement and arguments inserting msgs into table.
func insertSQL(table string, msgs []Message) (string, []any) {
	subjects := make([]string, len(msgs))
	ids := make([]string, len(msgs))
	data := make([][]byte, len(msgs))
	for i, m := range msgs {
		subjects[i], ids[i], data[i] = m.Subject, m.MsgID, m.Data
	}
	return `INSERT INTO ` + pgx.Identifier{table}.Sanitize() + ` (subject, msg_id, data)
		SELECT * FROM unnest($1::text[], $2::text[], $3::bytea[])`, []any{subjects, ids, data}
}
