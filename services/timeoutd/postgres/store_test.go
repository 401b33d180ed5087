package postgres

import (
	"bytes"
	"cmp"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/ordertimeout/ordertimeout/internal/migrate"
	"github.com/ordertimeout/ordertimeout/internal/testinfra"
	"github.com/ordertimeout/ordertimeout/pkg/events"
	"github.com/ordertimeout/ordertimeout/pkg/outbox"
	"github.com/ordertimeout/ordertimeout/services/timeoutd"
	"github.com/ordertimeout/ordertimeout/services/timeoutd/internal/lease"
)

func TestMain(m *testing.M) { testinfra.Main(m) }

// newPool returns a pool on a fresh, unmigrated database.
func newPool(t *testing.T) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), testinfra.Postgres(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// newStore returns a Store on a fresh, migrated database.
func newStore(t *testing.T) (*Store, *pgxpool.Pool) {
	t.Helper()
	pool := newPool(t)
	if err := Migrate(context.Background(), pool); err != nil {
		t.Fatal(err)
	}
	return NewStore(pool, events.OrderCancelSubjectPrefix), pool
}

func setCmd(key string, version int64, deadline time.Time, maxLatenessMs int64) events.Command {
	return events.Command{Schema: events.SchemaVersion, Kind: events.KindSet, Key: key, Version: version,
		Deadline: deadline, FireSubject: events.OrderCancelSubject(key), MaxLatenessMs: maxLatenessMs}
}

// listAll pages through ListPending with limit and returns the keys in the
// order the pages gave them.
func listAll(t *testing.T, s *Store, prefix string, limit int) []string {
	t.Helper()
	var keys []string
	q := timeoutd.Query{KeyPrefix: prefix, Limit: limit}
	for {
		page, err := s.ListPending(context.Background(), q)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range page {
			keys = append(keys, p.Key)
		}
		if len(page) < limit {
			return keys
		}
		last := page[len(page)-1]
		q.After = timeoutd.Cursor{Deadline: last.Deadline, Key: last.Key}
	}
}

// TestListPendingPagesEveryRowOnce pages through pending rows whose
// deadlines tie in large groups, between tombstones, and checks every
// pending row comes exactly once in (deadline, key) order.
func TestListPendingPagesEveryRowOnce(t *testing.T) {
	t.Parallel()
	s, _ := newStore(t)
	ctx := context.Background()
	base := time.Now().Add(time.Hour).UTC()
	type row struct {
		deadline time.Time
		key      string
	}
	var cmds []events.Command
	var want []row
	for i := range 1000 {
		// 13 distinct deadlines: groups of ~77 ties, larger than a page.
		d := base.Add(time.Duration(i%13) * time.Millisecond)
		key := fmt.Sprintf("%c-%d", "ab"[i%2], i)
		if i%3 == 0 { // UUIDs, stored in 17 bytes, among the other keys
			key = fmt.Sprintf("019a%04x-0000-7000-8000-%012x", i%7, i)
		}
		cmds = append(cmds, setCmd(key, 1, d, 0))
		if i%5 != 0 {
			want = append(want, row{d, key})
		}
	}
	if _, _, err := s.Apply(ctx, fenceAll(t, s), cmds, time.Now()); err != nil {
		t.Fatal(err)
	}
	var clears []events.Command
	for i := 0; i < 1000; i += 5 {
		clears = append(clears, events.Command{Schema: events.SchemaVersion, Kind: events.KindClear, Key: cmds[i].Key, Version: 2})
	}
	if _, _, err := s.Apply(ctx, fenceAll(t, s), clears, time.Now()); err != nil {
		t.Fatal(err)
	}
	// Keys of equal deadlines come in the order of their stored form.
	slices.SortFunc(want, func(a, b row) int {
		return cmp.Or(a.deadline.Compare(b.deadline), bytes.Compare(encodeKey(a.key), encodeKey(b.key)))
	})
	for _, tc := range []struct {
		name   string
		prefix string
		limit  int
	}{
		{"all, pages smaller than a tie group", "", 7},
		{"all, pages larger than a tie group", "", 100},
		{"key prefix", "b-", 9},
		{"key prefix matching one key", "a-998", 3},
		{"UUID prefix, even digits", "019a0003", 4},
		{"UUID prefix, odd digits", "019a000", 11},
		{"UUID prefix to a dash", "019a0001-0000-", 5},
		{"whole UUID", fmt.Sprintf("019a%04x-0000-7000-8000-%012x", 999%7, 999), 2},
		{"one-digit UUID prefix", "0", 50},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var keys []string
			for _, w := range want {
				if strings.HasPrefix(w.key, tc.prefix) {
					keys = append(keys, w.key)
				}
			}
			if got := listAll(t, s, tc.prefix, tc.limit); !slices.Equal(got, keys) {
				t.Fatalf("pages gave %d keys, want %d in (deadline, key) order:\ngot  %v\nwant %v", len(got), len(keys), got, keys)
			}
		})
	}
}

// TestMaxLatenessRoundTrip checks a bound of 0 is stored as NULL (no byte
// of the row) and every read gives back the bound that was set.
func TestMaxLatenessRoundTrip(t *testing.T) {
	t.Parallel()
	s, pool := newStore(t)
	ctx := context.Background()
	d := time.Now().Add(time.Hour).UTC()
	if _, _, err := s.Apply(ctx, fenceAll(t, s), []events.Command{setCmd("none", 1, d, 0), setCmd("bounded", 1, d, 1500)}, time.Now()); err != nil {
		t.Fatal(err)
	}
	var nulls int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM timeouts WHERE max_lateness_ms IS NULL`).Scan(&nulls); err != nil {
		t.Fatal(err)
	}
	if nulls != 1 {
		t.Fatalf("%d rows with a NULL bound, want 1 (the one without a bound)", nulls)
	}
	want := map[string]time.Duration{"none": 0, "bounded": 1500 * time.Millisecond}
	page, err := s.ListPending(ctx, timeoutd.Query{Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range page {
		if p.MaxLateness != want[p.Key] {
			t.Errorf("ListPending %s: max lateness %v, want %v", p.Key, p.MaxLateness, want[p.Key])
		}
		if g, err := s.GetPending(ctx, p.Key); err != nil || g.MaxLateness != want[p.Key] {
			t.Errorf("GetPending %s: max lateness %v (%v), want %v", p.Key, g.MaxLateness, err, want[p.Key])
		}
	}
	due := []timeoutd.Due{{Key: "none", Version: 1, Deadline: d}, {Key: "bounded", Version: 1, Deadline: d}}
	rows, err := s.DueRows(ctx, due)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 2 {
		t.Fatalf("DueRows returned %d rows, want 2", len(rows))
	}
	for _, r := range rows {
		if r.MaxLateness != want[r.Key] || !r.Deadline.Equal(d) || r.FireSubject != events.OrderCancelSubject(r.Key) {
			t.Errorf("DueRows %s: max lateness %v, deadline %v, subject %s; want %v, %v, the default", r.Key, r.MaxLateness, r.Deadline, r.FireSubject, want[r.Key], d)
		}
	}
}

// explain returns the plan of sql with args, joined on one line, as a
// prepared statement with a custom plan, or with generic a generic plan:
// the plan pgx's statement cache may settle on after five executions.
func explain(t *testing.T, pool *pgxpool.Pool, generic bool, sql string, args ...any) string {
	t.Helper()
	ctx := context.Background()
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	mode := "force_custom_plan"
	if generic {
		mode = "force_generic_plan"
	}
	if _, err := conn.Exec(ctx, "SET plan_cache_mode = "+mode); err != nil {
		t.Fatal(err)
	}
	defer conn.Exec(ctx, "RESET plan_cache_mode")
	if _, err := conn.Exec(ctx, "PREPARE explained AS "+sql); err != nil {
		t.Fatalf("prepare %s: %v", sql, err)
	}
	defer conn.Exec(ctx, "DEALLOCATE explained")
	lits := make([]string, len(args))
	for i, a := range args {
		lits[i] = literal(a)
	}
	rows, err := conn.Query(ctx, "EXPLAIN EXECUTE explained("+strings.Join(lits, ", ")+")")
	if err != nil {
		t.Fatalf("explain %s: %v", sql, err)
	}
	plan, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	for i := range plan {
		plan[i] = strings.TrimSpace(plan[i])
	}
	return strings.Join(plan, " | ")
}

// literal is v as an SQL literal, for the argument types the store uses.
func literal(v any) string {
	switch v := v.(type) {
	case []byte:
		return `'\x` + hex.EncodeToString(v) + `'::bytea`
	case [][]byte:
		lits := make([]string, len(v))
		for i, b := range v {
			lits[i] = literal(b)
		}
		return "ARRAY[" + strings.Join(lits, ", ") + "]"
	case []int64:
		return strings.ReplaceAll(fmt.Sprintf("ARRAY%v", v), " ", ", ")
	case []int16:
		return strings.ReplaceAll(fmt.Sprintf("ARRAY%v", v), " ", ", ") + "::int2[]"
	case string:
		return "'" + strings.ReplaceAll(v, "'", "''") + "'"
	default:
		return fmt.Sprint(v)
	}
}

// TestQueriesUseIndexes checks, on a table large enough for the planner to
// weigh a sequential scan (200k pending rows, 50k tombstones), that every
// read of the store goes through the index meant for it, with custom and
// with generic plans, and that a fire batch is read and marked by key
// lookups, never by a scan of the pending rows.
func TestQueriesUseIndexes(t *testing.T) {
	t.Parallel()
	_, pool := newStore(t)
	ctx := context.Background()
	now := time.Now().UnixNano()
	if _, err := pool.Exec(ctx, `INSERT INTO timeouts (version, deadline_ns, part, state, key)
		SELECT 1, $1::int8 + i::int8 * 1000000, i % 16, CASE WHEN i % 5 = 0 THEN 1 WHEN i % 5 = 1 THEN 3 ELSE 0 END,
			timeout_key('order-' || lpad(i::text, 7, '0'))
		FROM generate_series(1, 250000) i`, now); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `VACUUM ANALYZE timeouts`); err != nil {
		t.Fatal(err)
	}
	mid := now + 125000*1000000
	// A fire batch of 1,000 keys spread over the table.
	batch := make([]timeoutd.Due, 1000)
	for i := range batch {
		batch[i] = timeoutd.Due{Key: fmt.Sprintf("order-%07d", 1+i*250), Version: 1}
	}
	keys, versions := dueArrays(batch)
	ranges := func(prefix string) []any {
		plain, uuids, ok := prefixRanges(prefix)
		args := []any{int64(math.MinInt64), []byte{}, 100, plain[0], plain[1]}
		if ok {
			args = append(args, uuids[0], uuids[1])
		}
		return args
	}
	for _, tc := range []struct {
		name string
		sql  string
		args []any
		// index is the index the custom plan uses; genericIndex the one the
		// generic plan uses, empty when any index will do (a generic plan
		// cannot know how selective a key prefix is).
		index, genericIndex string
		// lookups is set for a fire batch's statements: one index lookup
		// per key, no scan of a range of rows.
		lookups bool
	}{
		{"ListPending first page", listPendingSQL(false, false), []any{int64(math.MinInt64), []byte{}, 100}, "timeouts_pending", "timeouts_pending", false},
		{"ListPending after a cursor", listPendingSQL(false, false), []any{mid, encodeKey("order-0125000"), 100}, "timeouts_pending", "timeouts_pending", false},
		{"ListPending wide key prefix", listPendingSQL(true, false), ranges("order-"), "timeouts_pending", "", false},
		{"ListPending narrow key prefix", listPendingSQL(true, false), ranges("order-012345"), "timeouts_pkey", "", false},
		{"ListPending UUID key prefix", listPendingSQL(true, true), ranges("0190"), "timeouts_pkey", "", false},
		{"LoadPending", loadPendingSQL, []any{int16(3), encodeKey("order-0125000"), 5000}, "timeouts_pending_part", "timeouts_pending_part", false},
		{"GetPending", getPendingSQL, []any{encodeKey("order-0125001")}, "timeouts_pkey", "timeouts_pkey", false},
		{"RetireTombstones", retireTombstonesSQL, []any{mid, 1000, []int16{0}, "test", []int64{1}}, "timeouts_tombstones", "timeouts_tombstones", false},
		{"ForgetMarks", forgetMarksSQL, []any{mid, 1000, []int16{0}, "test", []int64{1}}, "timeouts_marks", "timeouts_marks", false},
		{"MarkFired", markFiredSQL, []any{[][]byte{encodeKey("order-0125001")}, []int64{1}, now, []int16{1}, []int64{1}, "test"}, "timeouts_pkey", "timeouts_pkey", false},
		{"DueRows 1,000 keys", dueSQL, []any{keys, versions}, "timeouts_pkey", "timeouts_pkey", true},
		{"MarkFired 1,000 keys", markFiredSQL, []any{keys, versions, now, []int16{1}, []int64{1}, "test"}, "timeouts_pkey", "timeouts_pkey", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, generic := range []bool{false, true} {
				plan := explain(t, pool, generic, tc.sql, tc.args...)
				want := tc.index
				if generic {
					want = tc.genericIndex
				}
				uses := strings.Contains(plan, "Index Scan using "+want) || strings.Contains(plan, "Bitmap Index Scan on "+want)
				scans := tc.lookups && strings.Contains(plan, "Bitmap Heap Scan on timeouts")
				if strings.Contains(plan, "Seq Scan on timeouts") || scans || !uses {
					t.Errorf("generic plan %v does not use index %q: %s", generic, want, plan)
				}
			}
		})
	}
}

// TestMigrationOnPopulatedTable applies 00002 and 00003 to a table written
// under 00001 and checks the rows read the same, the indexes and storage
// parameters changed, a UUID key shrank to 17 bytes, and the down
// migrations restore 00001's shape and keys.
func TestMigrationOnPopulatedTable(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	ctx := context.Background()
	db := stdlib.OpenDBFromPool(pool)
	t.Cleanup(func() { db.Close() })
	p, err := migrate.Provider(db, Migrations)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.UpTo(ctx, 1); err != nil {
		t.Fatal(err)
	}
	d := time.Now().Add(time.Hour).UTC()
	const uuidKey = "019abcde-f012-7345-8678-9abcdef01234"
	if _, err := pool.Exec(ctx, `INSERT INTO timeouts (version, deadline_ns, max_lateness_ms, part, state, key)
		VALUES (1, $1, 0, 0, 0, 'old-none'), (1, $1, 1500, 0, 0, 'old-bounded'), (1, $1, 0, 0, 1, 'old-cleared'),
		(1, $1, 0, 0, 0, $2)`, d.UnixNano(), uuidKey); err != nil {
		t.Fatal(err)
	}
	// keySize is the stored size of the UUID key: 36 as text, 17 as bytea.
	keySize := func() int {
		t.Helper()
		var n int
		if err := pool.QueryRow(ctx, `SELECT octet_length(key) FROM timeouts WHERE version = 1 AND octet_length(key) IN (17, 36)`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	shape := func() string {
		t.Helper()
		var def, opts, nullable string
		if err := pool.QueryRow(ctx, `SELECT pg_get_indexdef('timeouts_pending'::regclass),
			coalesce(array_to_string(c.reloptions, ','), ''), a.is_nullable
			FROM pg_class c, information_schema.columns a
			WHERE c.relname = 'timeouts' AND a.table_name = 'timeouts' AND a.column_name = 'max_lateness_ms'`).Scan(&def, &opts, &nullable); err != nil {
			t.Fatal(err)
		}
		return def[strings.Index(def, "("):] + "; " + opts + "; nullable " + nullable
	}
	const v1 = "(deadline_ns, key) WHERE (state = 0); fillfactor=90; nullable NO"
	const v2 = "(deadline_ns) WHERE (state = 0); ; nullable YES"
	if got := shape(); got != v1 {
		t.Fatalf("00001: %s, want %s", got, v1)
	}
	s := NewStore(pool, events.OrderCancelSubjectPrefix)
	check := func(step string) {
		t.Helper()
		page, err := s.ListPending(ctx, timeoutd.Query{KeyPrefix: "old-", Limit: 10})
		if err != nil {
			t.Fatalf("%s: %v", step, err)
		}
		want := []timeoutd.Timeout{
			{Key: "old-bounded", Version: 1, Deadline: d, MaxLateness: 1500 * time.Millisecond, FireSubject: events.OrderCancelSubject("old-bounded")},
			{Key: "old-none", Version: 1, Deadline: d, FireSubject: events.OrderCancelSubject("old-none")},
		}
		if len(page) != len(want) {
			t.Fatalf("%s: listed %+v, want %+v", step, page, want)
		}
		for i := range want {
			g, w := page[i], want[i]
			if g.Key != w.Key || g.Version != w.Version || !g.Deadline.Equal(w.Deadline) || g.MaxLateness != w.MaxLateness || g.FireSubject != w.FireSubject {
				t.Errorf("%s: listed %+v, want %+v", step, g, w)
			}
		}
	}
	if err := Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	if got := shape(); got != v2 {
		t.Fatalf("00002: %s, want %s", got, v2)
	}
	check("after up")
	if g, err := s.GetPending(ctx, uuidKey); err != nil || g.Key != uuidKey || keySize() != 17 {
		t.Fatalf("after up: UUID key read as %q (%v), stored in %d bytes; want it in 17", g.Key, err, keySize())
	}
	// 00005: every row's partition is events.PartitionOf of its key.
	rows, err := pool.Query(ctx, `SELECT key, part FROM timeouts`)
	if err != nil {
		t.Fatal(err)
	}
	parts, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (string, error) {
		var k string
		var p int16
		err := r.Scan((*keyDest)(&k), &p)
		if err == nil && int(p) != events.PartitionOf(k) {
			t.Errorf("after up: %s in partition %d, want %d", k, p, events.PartitionOf(k))
		}
		return k, err
	})
	if err != nil || len(parts) != 4 {
		t.Fatalf("after up: %d rows (%v), want 4", len(parts), err)
	}
	if _, _, err := s.Apply(ctx, fenceAll(t, s), []events.Command{setCmd("new-none", 1, d.Add(time.Second), 0)}, time.Now()); err != nil {
		t.Fatal(err)
	}
	if _, err := p.DownTo(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if got := shape(); got != v1 {
		t.Fatalf("down to 00001: %s, want %s", got, v1)
	}
	var back string
	if err := pool.QueryRow(ctx, `SELECT key FROM timeouts WHERE octet_length(key) = 36`).Scan(&back); err != nil || back != uuidKey {
		t.Fatalf("down to 00001: UUID key %q (%v), want %q", back, err, uuidKey)
	}
	var lateness int
	if err := pool.QueryRow(ctx, `SELECT max_lateness_ms FROM timeouts WHERE key = 'new-none'`).Scan(&lateness); err != nil || lateness != 0 {
		t.Fatalf("down to 00001: new-none max_lateness_ms %d (%v), want 0", lateness, err)
	}
	if err := Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	check("after down and up")
}

// TestFireAndApplyDoNotDeadlock: a fire's mark and an ingest upsert
// over the same keys, given in opposite orders, run at once round after
// round: both lock rows in key order, so neither fails with a deadlock (a
// deadlock costs deadlock_timeout, 1 s, and a retry; under load that piled
// up into minutes of lag in a long soak).
func TestFireAndApplyDoNotDeadlock(t *testing.T) {
	t.Parallel()
	s, _ := newStore(t)
	ctx := context.Background()
	const n = 300
	deadline := time.Now().Add(time.Hour)
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("dl-%03d", i)
	}
	set := func(version int64, order []string) []events.Command {
		cmds := make([]events.Command, len(order))
		for i, k := range order {
			cmds[i] = setCmd(k, version, deadline, 0)
		}
		return cmds
	}
	reversed := slices.Clone(keys)
	slices.Reverse(reversed)
	for round := int64(1); round <= 15; round++ {
		if _, _, err := s.Apply(ctx, fenceAll(t, s), set(2*round-1, keys), time.Now()); err != nil {
			t.Fatal(err)
		}
		due := make([]timeoutd.Due, n)
		for i, k := range keys {
			due[i] = timeoutd.Due{Key: k, Version: 2*round - 1, Deadline: deadline}
		}
		errs := make(chan error, 2)
		go func() {
			_, err := s.MarkFired(ctx, fenceAll(t, s), due, deadline)
			errs <- err
		}()
		go func() {
			_, _, err := s.Apply(ctx, fenceAll(t, s), set(2*round, reversed), time.Now())
			errs <- err
		}()
		for range 2 {
			if err := <-errs; err != nil {
				t.Fatalf("round %d: %v", round, err)
			}
		}
	}
}

// TestDueRowsAndMarkFired: DueRows reads only the rows still pending at
// the version asked, and MarkFired marks only those, at the fire time,
// leaving a row a newer command replaced pending.
func TestDueRowsAndMarkFired(t *testing.T) {
	t.Parallel()
	s, pool := newStore(t)
	ctx := context.Background()
	d := time.Now().Add(time.Hour).UTC()
	firedAt := d.Add(3 * time.Millisecond)
	cmds := []events.Command{setCmd("mf-1", 1, d, 0), setCmd("mf-2", 2, d, 0), setCmd("mf-3", 1, d, 0)}
	cmds[0].Payload = []byte(`{"order":1}`)
	if _, _, err := s.Apply(ctx, fenceAll(t, s), cmds, time.Now()); err != nil {
		t.Fatal(err)
	}
	// mf-2 was replaced by version 2; mf-4 does not exist.
	due := []timeoutd.Due{{Key: "mf-1", Version: 1, Deadline: d}, {Key: "mf-2", Version: 1, Deadline: d},
		{Key: "mf-3", Version: 1, Deadline: d}, {Key: "mf-4", Version: 1, Deadline: d}}
	rows, err := s.DueRows(ctx, due)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]timeoutd.Timeout{}
	for _, r := range rows {
		got[r.Key] = r
	}
	if len(rows) != 2 || string(got["mf-1"].Payload) != `{"order":1}` || got["mf-3"].Version != 1 {
		t.Fatalf("DueRows = %+v, want mf-1 with its payload and mf-3", rows)
	}
	refused, err := s.MarkFired(ctx, fenceAll(t, s), due, firedAt)
	if err != nil || len(refused) != 0 {
		t.Fatalf("MarkFired: refused %v, %v", refused, err)
	}
	for _, tc := range []struct {
		key   string
		state timeoutd.State
		ns    int64
	}{{"mf-1", timeoutd.StateFired, firedAt.UnixNano()}, {"mf-2", timeoutd.StatePending, d.UnixNano()}, {"mf-3", timeoutd.StateFired, firedAt.UnixNano()}} {
		var state int16
		var ns int64
		if err := pool.QueryRow(ctx, `SELECT state, deadline_ns FROM timeouts WHERE key = $1`, encodeKey(tc.key)).Scan(&state, &ns); err != nil {
			t.Fatal(err)
		}
		if timeoutd.State(state) != tc.state || ns != tc.ns {
			t.Errorf("%s: state %d at %d, want %d at %d", tc.key, state, ns, tc.state, tc.ns)
		}
	}
	if rows, err := s.DueRows(ctx, due); err != nil || len(rows) != 0 {
		t.Fatalf("DueRows after the mark = %+v, %v; want none", rows, err)
	}
}

// TestPlainRows: Apply (a first commit and its retry after a lost reply)
// and LoadPending report as plain the rows that store nothing the expiry
// event needs beyond the key, version and deadline, and no other.
func TestPlainRows(t *testing.T) {
	t.Parallel()
	s, _ := newStore(t)
	ctx := context.Background()
	d := time.Now().Add(time.Hour).UTC()
	cmd := func(key string, change func(*events.Command)) events.Command {
		c := setCmd(key, 1, d, 0)
		if change != nil {
			change(&c)
		}
		return c
	}
	cmds := []events.Command{
		cmd("plain", nil),
		cmd("payload", func(c *events.Command) { c.Payload = []byte(`{"sku":1}`) }),
		cmd("subject", func(c *events.Command) { c.FireSubject = "orders.cancel.elsewhere" }),
		cmd("bounded", func(c *events.Command) { c.MaxLatenessMs = 100 }),
		cmd("traced", func(c *events.Command) { c.TraceParent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01" }),
	}
	want := map[string]bool{"plain": true, "payload": false, "subject": false, "bounded": false, "traced": false}
	check := func(what string, got map[string]bool) {
		t.Helper()
		if !maps.Equal(got, want) {
			t.Errorf("%s: plain %v, want %v", what, got, want)
		}
	}
	for _, attempt := range []string{"Apply", "Apply retried"} {
		changes, _, err := s.Apply(ctx, fenceAll(t, s), cmds, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]bool{}
		for _, c := range changes {
			got[c.Key] = c.Plain
		}
		check(attempt, got)
	}
	got := map[string]bool{}
	for p := range events.Partitions {
		rows, err := s.LoadPending(ctx, p, "", 100)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range rows {
			got[r.Key] = r.Plain
		}
	}
	check("LoadPending", got)
}

// TestMigrationRepublishesTheOutbox: 00006 turns the expiry events an
// earlier release left in its outbox back into pending rows at their
// deadline (to the nanosecond), for recovery to publish, and drops the
// outbox; a fired row whose event was published stays fired.
func TestMigrationRepublishesTheOutbox(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	ctx := context.Background()
	db := stdlib.OpenDBFromPool(pool)
	t.Cleanup(func() { db.Close() })
	if err := migrate.Up(ctx, pool, outbox.Migrations); err != nil {
		t.Fatal(err)
	}
	p, err := migrate.Provider(db, Migrations)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.UpTo(ctx, 5); err != nil {
		t.Fatal(err)
	}
	deadline := time.Date(2026, 11, 25, 10, 0, 0, 123456789, time.UTC)
	firedAt := deadline.Add(time.Millisecond)
	const uuidKey = "019abcde-f012-7345-8678-9abcdef01234"
	for _, k := range []string{uuidKey, "published"} {
		if _, err := pool.Exec(ctx, `INSERT INTO timeouts (version, deadline_ns, part, state, key) VALUES (7, $1, $2, 2, $3)`,
			firedAt.UnixNano(), events.PartitionOf(k), encodeKey(k)); err != nil {
			t.Fatal(err)
		}
	}
	e := events.Expiry{Schema: events.SchemaVersion, Outcome: events.OutcomeFired, Key: uuidKey, Version: 7, Deadline: deadline, FiredAt: firedAt}
	data, err := json.Marshal(e)
	if err != nil {
		t.Fatal(err)
	}
	if err := outbox.Insert(ctx, pool, "outbox", []outbox.Message{{Subject: events.OrderCancelSubject(uuidKey), MsgID: e.MsgID(), Data: data}}); err != nil {
		t.Fatal(err)
	}
	if err := Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	s := NewStore(pool, events.OrderCancelSubjectPrefix)
	got, err := s.GetPending(ctx, uuidKey)
	if err != nil {
		t.Fatalf("the unpublished event's timeout: %v, want pending", err)
	}
	if got.Version != 7 || !got.Deadline.Equal(deadline) {
		t.Fatalf("pending %+v, want version 7 due at %v", got, deadline)
	}
	if _, err := s.GetPending(ctx, "published"); !errors.Is(err, timeoutd.ErrNotFound) {
		t.Fatalf("the published one: %v, want not pending", err)
	}
	var table *string
	if err := pool.QueryRow(ctx, `SELECT to_regclass('outbox')::text`).Scan(&table); err != nil || table != nil {
		t.Fatalf("outbox table %v (%v), want dropped", table, err)
	}
}

// TestStaleSetAfterJanitorDoesNotResurrect is issue 14 item 2.5: the
// janitor used to delete expired tombstones, after which a stale set (a
// dead letter replayed, a republish past the duplicate window) was stored
// as a new pending timeout. Now the tombstone becomes a version mark.
func TestStaleSetAfterJanitorDoesNotResurrect(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	now := time.Now().UTC()
	tests := []struct {
		name string
		end  func(t *testing.T, s *Store, v1 events.Command) // clears or fires v1
	}{
		{"cleared", func(t *testing.T, s *Store, v1 events.Command) {
			if _, _, err := s.Apply(ctx, fenceAll(t, s), []events.Command{{Schema: 1, Kind: events.KindClear, Key: v1.Key, Version: 2}}, now); err != nil {
				t.Fatal(err)
			}
		}},
		{"fired", func(t *testing.T, s *Store, v1 events.Command) {
			if refused, err := s.MarkFired(ctx, fenceAll(t, s), []timeoutd.Due{{Key: v1.Key, Version: 1, Deadline: v1.Deadline}}, now); err != nil || len(refused) != 0 {
				t.Fatalf("mark fired: refused %v, %v", refused, err)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s, _ := newStore(t)
			v1 := setCmd("o-1", 1, now.Add(-time.Second), 0)
			v1.Payload = []byte(`{"a":1}`)
			if _, _, err := s.Apply(ctx, fenceAll(t, s), []events.Command{v1}, now); err != nil {
				t.Fatal(err)
			}
			tt.end(t, s, v1)
			// The janitor runs past the tombstone TTL.
			n, err := s.RetireTombstones(ctx, fenceAll(t, s), now.Add(2*timeoutd.TombstoneTTLDefault), 1000)
			if err != nil || n != 1 {
				t.Fatalf("janitor: %d tombstones, %v; want 1", n, err)
			}
			// v1 is replayed.
			changes, _, err := s.Apply(ctx, fenceAll(t, s), []events.Command{v1}, now.Add(3*timeoutd.TombstoneTTLDefault))
			if err != nil {
				t.Fatal(err)
			}
			if len(changes) != 0 {
				t.Fatalf("the stale set changed %+v", changes)
			}
			if _, err := s.GetPending(ctx, v1.Key); !errors.Is(err, timeoutd.ErrNotFound) {
				t.Fatalf("GetPending = %v, want ErrNotFound: nothing pending", err)
			}
			if rows, err := s.LoadPending(ctx, events.PartitionOf(v1.Key), "", 10); err != nil || len(rows) != 0 {
				t.Fatalf("recovery would load %+v (%v): nothing may fire", rows, err)
			}
			// A newer set still takes the key.
			v3 := setCmd("o-1", 3, now.Add(time.Hour), 0)
			if changes, _, err := s.Apply(ctx, fenceAll(t, s), []events.Command{v3}, now); err != nil || len(changes) != 1 {
				t.Fatalf("newer set: %+v, %v", changes, err)
			}
			got, err := s.GetPending(ctx, v3.Key)
			if err != nil || got.Version != 3 || len(got.Payload) != 0 || !got.Deadline.Equal(v3.Deadline) {
				t.Fatalf("after the newer set: %+v, %v", got, err)
			}
		})
	}
}

// TestApplyRefusesDeadlineOutOfRange is part of issue 14 item 2.3: a
// deadline outside the int64 Unix-nanosecond range wrapped when stored (a
// set dated 1500 was stored as 2084).
func TestApplyRefusesDeadlineOutOfRange(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := newStore(t)
	c := setCmd("o-1500", 1, time.Date(1500, 1, 1, 0, 0, 0, 0, time.UTC), 0)
	_, _, err := s.Apply(ctx, fenceAll(t, s), []events.Command{c}, time.Now())
	if events.ReasonOf(err) != events.ReasonDeadlineOutOfRange || !strings.Contains(err.Error(), "deadline") {
		t.Fatalf("err = %v, want %s naming deadline", err, events.ReasonDeadlineOutOfRange)
	}
	if got, err := s.GetPending(ctx, c.Key); !errors.Is(err, timeoutd.ErrNotFound) {
		t.Fatalf("stored %+v (%v)", got, err)
	}
}

// fences holds each test store's fence: every partition, acquired once.
var fences sync.Map // *Store → lease.Fence

// fenceAll returns a fence granting every partition on s's database, to
// the owner "test", acquiring the leases at the first call.
func fenceAll(t testing.TB, s *Store) lease.Fence {
	t.Helper()
	if f, ok := fences.Load(s); ok {
		return f.(lease.Fence)
	}
	leases, err := NewLeases(s.pool).Acquire(context.Background(), "test", events.Partitions, nil, time.Hour)
	if err != nil || len(leases) != events.Partitions {
		t.Fatalf("acquire every lease: %d, %v", len(leases), err)
	}
	f := lease.Fence{Owner: "test", Leases: leases}
	fences.Store(s, f)
	return f
}

// TestForgetMarksDeletesOnlyOldMarks: ForgetMarks deletes the version
// marks whose tombstone time is before its bound, and nothing else: not a
// newer mark, not a live tombstone, not a pending row. A key whose mark is
// gone is new again.
func TestForgetMarksDeletesOnlyOldMarks(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := newStore(t)
	t0 := time.Now().UTC().Add(-48 * time.Hour)
	clearOf := func(key string) events.Command {
		return events.Command{Schema: 1, Kind: events.KindClear, Key: key, Version: 2}
	}
	apply := func(at time.Time, cmds ...events.Command) []timeoutd.Change {
		t.Helper()
		changes, _, err := s.Apply(ctx, fenceAll(t, s), cmds, at)
		if err != nil {
			t.Fatal(err)
		}
		return changes
	}
	apply(t0, setCmd("old", 1, t0.Add(time.Hour), 0), setCmd("newer", 1, t0.Add(time.Hour), 0), setCmd("live", 1, t0.Add(time.Hour), 0),
		setCmd("pending", 1, t0.Add(time.Hour), 0))
	apply(t0, clearOf("old"))
	apply(t0.Add(10*time.Hour), clearOf("newer"))
	if n, err := s.RetireTombstones(ctx, fenceAll(t, s), t0.Add(11*time.Hour), 100); err != nil || n != 2 {
		t.Fatalf("retired %d, %v; want old and newer", n, err)
	}
	apply(t0.Add(12*time.Hour), clearOf("live")) // a tombstone, not yet a mark
	for _, want := range []int{1, 0} {
		if n, err := s.ForgetMarks(ctx, fenceAll(t, s), t0.Add(5*time.Hour), 100); err != nil || n != want {
			t.Fatalf("forgot %d marks, %v; want %d", n, err, want)
		}
	}
	if changes := apply(t0.Add(13*time.Hour), setCmd("old", 1, t0.Add(20*time.Hour), 0)); len(changes) != 1 {
		t.Fatalf("a set of the forgotten key changed %+v, want it stored as new", changes)
	}
	for _, stale := range []events.Command{setCmd("newer", 1, t0.Add(20*time.Hour), 0), setCmd("live", 1, t0.Add(20*time.Hour), 0)} {
		if changes := apply(t0.Add(13*time.Hour), stale); len(changes) != 0 {
			t.Fatalf("a stale set of %s changed %+v: its mark or tombstone is gone", stale.Key, changes)
		}
	}
	if got, err := s.GetPending(ctx, "pending"); err != nil || got.Version != 1 {
		t.Fatalf("pending row: %+v, %v", got, err)
	}
}

// TestApplyRetriedAfterAnAmbiguousCommit: the retry of an Apply whose
// commit went through but whose reply was lost (a reset after COMMIT, a
// Postgres failover) returns the rows the lost reply carried, so that they
// are scheduled; the retry of a set whose timeout has fired since changes
// nothing and returns nothing.
func TestApplyRetriedAfterAnAmbiguousCommit(t *testing.T) {
	t.Parallel()
	s, _ := newStore(t)
	ctx := context.Background()
	d := time.Now().Add(time.Hour).UTC().Truncate(time.Microsecond)
	cmds := []events.Command{setCmd("amb-set", 1, d, 0), {Schema: events.SchemaVersion, Kind: events.KindClear, Key: "amb-clear", Version: 3},
		setCmd("amb-fired", 1, d, 0)}
	if changes, _, err := s.Apply(ctx, fenceAll(t, s), cmds, time.Now()); err != nil || len(changes) != 3 {
		t.Fatalf("first apply: %+v, %v", changes, err)
	}
	if _, err := s.MarkFired(ctx, fenceAll(t, s), []timeoutd.Due{{Key: "amb-fired", Version: 1, Deadline: d}}, d); err != nil {
		t.Fatal(err)
	}
	tuple := func() string {
		var ctid, xmin string
		if err := s.pool.QueryRow(ctx, `SELECT ctid::text, xmin::text FROM timeouts WHERE key = $1`, encodeKey("amb-set")).Scan(&ctid, &xmin); err != nil {
			t.Fatal(err)
		}
		return ctid + "/" + xmin
	}
	before := tuple()
	changes, _, err := s.Apply(ctx, fenceAll(t, s), cmds, time.Now()) // the retry
	if err != nil {
		t.Fatal(err)
	}
	// The retry writes no row: a new tuple of a row whose timeout is
	// firing would hide it from the fire's mark, which finds rows by ctid.
	if after := tuple(); after != before {
		t.Errorf("the retry rewrote amb-set: tuple %s, then %s", before, after)
	}
	got := map[string]timeoutd.Change{}
	for _, c := range changes {
		got[c.Key] = c
	}
	if len(got) != 2 || got["amb-set"].Version != 1 || got["amb-set"].State != timeoutd.StatePending || !got["amb-set"].Deadline.Equal(d) ||
		got["amb-clear"].Version != 3 || got["amb-clear"].State != timeoutd.StateCleared {
		t.Fatalf("retry returned %+v; want amb-set pending at 1 and amb-clear cleared at 3, not amb-fired", changes)
	}
	if st, v := stateOf(t, s, "amb-fired"); st != timeoutd.StateFired || v != 1 {
		t.Fatalf("amb-fired after the retry: state %d version %d, want fired at 1", st, v)
	}
}

// TestTheJanitorIsFenced: the janitor's statements write nothing unless
// their fence holds its lease: a former owner of the janitor's partition,
// or an instance that never held it, retires and forgets nothing.
func TestTheJanitorIsFenced(t *testing.T) {
	t.Parallel()
	s, pool := newStore(t)
	ctx := context.Background()
	t0 := time.Now().Add(-48 * time.Hour).UTC()
	for _, c := range []events.Command{setCmd("jf", 1, t0.Add(time.Hour), 0), {Schema: events.SchemaVersion, Kind: events.KindClear, Key: "jf", Version: 2}} {
		if _, _, err := s.Apply(ctx, fenceAll(t, s), []events.Command{c}, t0); err != nil {
			t.Fatal(err)
		}
	}
	owner := fenceAll(t, s)
	zero := lease.Fence{Owner: owner.Owner, Leases: owner.Leases[:1]}
	stale := lease.Fence{Owner: owner.Owner, Leases: []lease.Lease{{Partition: 0, Epoch: owner.Leases[0].Epoch - 1}}}
	for name, f := range map[string]lease.Fence{"no lease": {Owner: "other"}, "another owner": {Owner: "other", Leases: zero.Leases}, "a former epoch": stale} {
		if n, err := s.RetireTombstones(ctx, f, time.Now(), 100); err != nil || n != 0 {
			t.Fatalf("%s: retired %d, %v; want none", name, n, err)
		}
	}
	if n, err := s.RetireTombstones(ctx, zero, time.Now(), 100); err != nil || n != 1 {
		t.Fatalf("the owner of partition 0 retired %d, %v; want 1", n, err)
	}
	if _, err := pool.Exec(ctx, `UPDATE timeout_leases SET expires_at = now() - interval '1 second' WHERE part = 0`); err != nil {
		t.Fatal(err)
	}
	if n, err := s.ForgetMarks(ctx, zero, time.Now(), 100); err != nil || n != 0 {
		t.Fatalf("an expired lease forgot %d marks, %v; want none", n, err)
	}
}

// TestAReleaseWaitsForTheJanitor: the janitor's fence locks the lease rows
// as the data fence does, so a release (or another instance's
// acquisition) waits for a janitor statement in progress, and a deposed
// owner's janitor writes nothing after its leases were given up.
func TestAReleaseWaitsForTheJanitor(t *testing.T) {
	t.Parallel()
	s, pool := newStore(t)
	ctx := context.Background()
	owner := fenceAll(t, s)
	zero := lease.Fence{Owner: owner.Owner, Leases: owner.Leases[:1]}
	fp, fe := fenceArrays(zero)
	tx, err := pool.Begin(ctx) // a janitor statement in progress: its transaction still open
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, retireTombstonesSQL, time.Now().UnixNano(), 100, fp, zero.Owner, fe); err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancel()
	if err := NewLeases(pool).Release(rctx, zero.Owner, zero.Leases); err == nil {
		t.Fatal("the release went through while a janitor statement of the lease held it; want it to wait")
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := NewLeases(pool).Release(ctx, zero.Owner, zero.Leases); err != nil {
		t.Fatalf("release once the janitor's statement committed: %v", err)
	}
}

// TestASameVersionNeverChangesARow: a set at the stored version with other
// content (a producer that reused a version) leaves the row as it was; the
// row is returned as stored.
func TestASameVersionNeverChangesARow(t *testing.T) {
	t.Parallel()
	s, _ := newStore(t)
	ctx := context.Background()
	d := time.Now().Add(time.Hour).UTC().Truncate(time.Microsecond)
	first := setCmd("same", 5, d, 0)
	first.Payload = []byte(`{"a":1}`)
	if _, _, err := s.Apply(ctx, fenceAll(t, s), []events.Command{first}, time.Now()); err != nil {
		t.Fatal(err)
	}
	other := setCmd("same", 5, d.Add(-30*time.Minute), 100)
	changes, _, err := s.Apply(ctx, fenceAll(t, s), []events.Command{other}, time.Now())
	if err != nil || len(changes) != 1 || !changes[0].Deadline.Equal(d) {
		t.Fatalf("the same version again returned %+v, %v; want the stored row, deadline %v", changes, err, d)
	}
	got, err := s.GetPending(ctx, "same")
	if err != nil || !got.Deadline.Equal(d) || string(got.Payload) != `{"a":1}` || got.MaxLateness != 0 {
		t.Fatalf("row after the same version: %+v, %v; want it unchanged", got, err)
	}
}

// TestTraceParentIsStoredWithItsVersion: a set's trace context is stored
// with the timeout and read back by DueRows for the fire to link to; a
// newer set replaces it (with none, when untraced), a stale one does not;
// an untraced timeout stores NULL.
func TestTraceParentIsStoredWithItsVersion(t *testing.T) {
	t.Parallel()
	s, pool := newStore(t)
	ctx := context.Background()
	d := time.Now().Add(time.Hour).UTC()
	const tp1, tp2 = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	traced := func(key string, v int64, tp string) events.Command {
		c := setCmd(key, v, d, 0)
		c.TraceParent = tp
		return c
	}
	apply := func(cmds ...events.Command) {
		t.Helper()
		if _, _, err := s.Apply(ctx, fenceAll(t, s), cmds, time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	traceOf := func(key string, v int64) string {
		t.Helper()
		rows, err := s.DueRows(ctx, []timeoutd.Due{{Key: key, Version: v, Deadline: d}})
		if err != nil || len(rows) != 1 {
			t.Fatalf("DueRows %s v%d = %v, %v", key, v, rows, err)
		}
		return rows[0].TraceParent
	}
	apply(traced("a", 1, tp1), traced("b", 1, ""))
	if got := traceOf("a", 1); got != tp1 {
		t.Fatalf("a: %q, want %q", got, tp1)
	}
	if got := traceOf("b", 1); got != "" {
		t.Fatalf("untraced b: %q", got)
	}
	apply(traced("a", 3, tp2))
	apply(traced("a", 2, tp1)) // stale
	if got := traceOf("a", 3); got != tp2 {
		t.Fatalf("a after a newer and a stale set: %q, want %q", got, tp2)
	}
	apply(traced("a", 4, ""))
	if got := traceOf("a", 4); got != "" {
		t.Fatalf("a after an untraced newer set: %q, want none", got)
	}
	var nulls int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM timeouts WHERE traceparent IS NULL`).Scan(&nulls); err != nil {
		t.Fatal(err)
	}
	if nulls != 2 {
		t.Fatalf("%d rows with a NULL traceparent, want 2", nulls)
	}
}

// TestTheDefaultFireSubjectIsPinned: the default fire subject is a
// setting whose pending rows depend on it (they store none): the store
// records it, reads such a row's subject with it, and refuses another
// while such a row is pending; with none left, another replaces it.
func TestTheDefaultFireSubjectIsPinned(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, pool := newStore(t)
	orders, reservations := NewStore(pool, "orders.cancel."), NewStore(pool, "reservations.expire.")
	if err := orders.PinDefaultFireSubject(ctx); err != nil {
		t.Fatalf("first pin: %v", err)
	}
	if err := reservations.PinDefaultFireSubject(ctx); err != nil {
		t.Fatalf("another default with no pending row stored with the first: %v", err)
	}
	cmd := setCmd("pin-1", 1, time.Now().Add(time.Hour), 0)
	cmd.FireSubject = "reservations.expire.pin-1"
	changes, _, err := reservations.Apply(ctx, fenceAll(t, reservations), []events.Command{cmd}, time.Now())
	if err != nil || len(changes) != 1 || !changes[0].Plain {
		t.Fatalf("apply a set on the default subject: %+v, %v; want one plain row", changes, err)
	}
	if got, err := reservations.GetPending(ctx, "pin-1"); err != nil || got.FireSubject != "reservations.expire.pin-1" {
		t.Fatalf("read back: %+v, %v; want the default subject", got, err)
	}
	if err := orders.PinDefaultFireSubject(ctx); !errors.Is(err, ErrDefaultFireSubject) || !strings.Contains(err.Error(), "reservations.expire.") {
		t.Fatalf("another default while a pending row was stored with the pinned one: %v; want ErrDefaultFireSubject naming it", err)
	}
	if err := reservations.PinDefaultFireSubject(ctx); err != nil {
		t.Fatalf("the same default again: %v", err)
	}
}
