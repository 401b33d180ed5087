package outbox

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/ordertimeout/ordertimeout/internal/testinfra"
)

// TestSetIDs feeds setIDs (id, msg_id) rows in the orders Postgres may
// return them in: the array order, a shuffled order, with repeated msg_ids,
// and rows that do not match the messages.
func TestSetIDs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, testinfra.Postgres(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(ctx) })
	msgs := func(ids ...string) []Message {
		m := make([]Message, len(ids))
		for i, id := range ids {
			m[i].MsgID = id
		}
		return m
	}
	tests := []struct {
		name    string
		msgs    []Message
		ids     []int64
		msgIDs  []string // the rows returned, in this order
		want    []int64  // each message's ID after setIDs
		wantErr string
	}{
		{"array order", msgs("a", "b", "c"), []int64{1, 2, 3}, []string{"a", "b", "c"}, []int64{1, 2, 3}, ""},
		{"shuffled after the first", msgs("a", "b", "c"), []int64{1, 3, 2}, []string{"a", "c", "b"}, []int64{1, 2, 3}, ""},
		{"reversed", msgs("a", "b", "c"), []int64{3, 2, 1}, []string{"c", "b", "a"}, []int64{1, 2, 3}, ""},
		{"repeated msg_id takes the ids in turn", msgs("a", "x", "x", "b"), []int64{4, 2, 3, 1}, []string{"b", "x", "x", "a"}, []int64{1, 2, 3, 4}, ""},
		{"unknown msg_id", msgs("a", "b"), []int64{1, 2}, []string{"a", "z"}, nil, `unexpected msg_id "z"`},
		{"a row too many", msgs("a"), []int64{1, 2}, []string{"a", "a"}, nil, `unexpected msg_id "a"`},
		{"a row missing", msgs("a", "b"), []int64{1}, []string{"a"}, nil, "1 ids returned"},
	}
	for _, tc := range tests { // one connection: sequential
		rows, err := conn.Query(ctx, `SELECT * FROM unnest($1::int8[], $2::text[])`, tc.ids, tc.msgIDs)
		if err != nil {
			t.Fatal(err)
		}
		err = setIDs(rows, tc.msgs)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%s: error %v, want one containing %q", tc.name, err, tc.wantErr)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		for i, m := range tc.msgs {
			if m.ID != tc.want[i] {
				t.Errorf("%s: message %d (%s) got id %d, want %d", tc.name, i, m.MsgID, m.ID, tc.want[i])
			}
		}
	}
}
