package postgres

import (
	"bytes"
	"context"
	"embed"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ordertimeout/ordertimeout/internal/migrate"
	"github.com/ordertimeout/ordertimeout/pkg/events"
	"github.com/ordertimeout/ordertimeout/services/timeoutd"
	"github.com/ordertimeout/ordertimeout/services/timeoutd/internal/lease"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// Migrations are timeoutd's tables' migrations.
var Migrations = migrate.Set{Name: "timeoutd", FS: migrationFiles, Dir: "migrations", Table: "goose_db_version"}

// Migrate applies timeoutd's migrations under a Postgres advisory lock so
// that instances starting together (a cluster) migrate once.
func Migrate(ctx context.Context, pool *pgxpool.Pool) error {
	return migrate.Up(ctx, pool, Migrations)
}

// Store implements timeoutd.Store on a pgxpool.
type Store struct {
	pool *pgxpool.Pool
	// defaultPrefix makes the default fire subject (prefix plus key),
	// stored as NULL (timeoutd.Config.DefaultFireSubjectPrefix).
	defaultPrefix string
}

var _ timeoutd.Store = (*Store)(nil)

// NewStore returns a Store on pool whose default fire subject is
// defaultPrefix plus the key (timeoutd.Config.DefaultFireSubjectPrefix);
// run Migrate, then PinDefaultFireSubject, first.
func NewStore(pool *pgxpool.Pool, defaultPrefix string) *Store {
	return &Store{pool: pool, defaultPrefix: defaultPrefix}
}

// pinDefaultSQL records the store's default fire subject prefix ($1),
// unless another is recorded and a pending row was stored with it (its
// fire subject NULL): then it returns the recorded one, and nothing
// changes. With no such row left, the new default replaces the old.
const pinDefaultSQL = `
WITH recorded AS (SELECT value FROM timeoutd_settings WHERE name = 'default_fire_subject_prefix'),
kept AS (SELECT value FROM recorded WHERE value <> $1
	AND EXISTS (SELECT 1 FROM timeouts WHERE state = 0 AND fire_subject IS NULL)),
pinned AS (INSERT INTO timeoutd_settings (name, value)
	SELECT 'default_fire_subject_prefix', $1 WHERE NOT EXISTS (SELECT 1 FROM kept)
	ON CONFLICT (name) DO UPDATE SET value = EXCLUDED.value)
SELECT coalesce((SELECT value FROM kept), $1)`

// ErrDefaultFireSubject is returned by PinDefaultFireSubject when pending
// rows were stored with another default fire subject.
var ErrDefaultFireSubject = errors.New("postgres: pending timeouts were stored with another default fire subject")

// PinDefaultFireSubject records the store's default fire subject prefix
// in the database, or fails with ErrDefaultFireSubject (naming the one
// recorded) when pending rows stored with another would be sent elsewhere.
func (s *Store) PinDefaultFireSubject(ctx context.Context) error {
	var recorded string
	if err := s.pool.QueryRow(ctx, pinDefaultSQL, s.defaultPrefix).Scan(&recorded); err != nil {
		return fmt.Errorf("pin the default fire subject: %w", err)
	}
	if recorded != s.defaultPrefix {
		return fmt.Errorf("%w: %q, not %q; fire them first, or keep %q", ErrDefaultFireSubject, recorded, s.defaultPrefix, recorded)
	}
	return nil
}

// fenceSQL key-share-locks, in partition order, the lease rows that $3
// holds at the epochs of $1/$2 and that have not expired by Postgres's
// clock, and returns their partitions. Held until the transaction ends, the
// locks keep an acquisition by another instance (which locks the row FOR
// UPDATE) from taking the lease before the commit: the new owner then
// loads what this transaction wrote. The owner's own renewal (FOR NO KEY
// UPDATE, which a key-share lock does not block) never waits for them: with
// FOR SHARE, the overlapping fences of ingest and fire under load starved
// the renewal until the leases lapsed and every partition stopped.
var fenceSQL = granted(1, 2, 3) + `
ORDER BY l.part
FOR KEY SHARE OF l`

// granted returns the fence's condition, written once: a query of the
// partitions whose lease rows the owner $o holds at the epochs of the
// arrays $p (partitions) and $e (epochs), unexpired by Postgres's clock.
func granted(p, e, o int) string {
	return fmt.Sprintf(`SELECT l.part FROM timeout_leases l
	JOIN unnest($%d::int2[], $%d::int8[]) AS f(part, epoch) ON l.part = f.part AND l.epoch = f.epoch
	WHERE l.owner = $%d AND l.expires_at > now()`, p, e, o)
}

// appliedSQL returns, as stored, the rows of the partitions fenceSQL locked
// that already have the version and state of a command ($1..$3): an
// earlier attempt committed it and its reply was lost. It runs before the
// upsert, which changes nothing for them, so that the retry schedules what
// the lost reply would have without writing the row again (a producer that
// reused a version changes nothing either). A rewrite would give the row a
// new tuple while its timeout may be firing, and the fire's mark, which
// finds its rows by ctid, would then mark nothing. One of the same version
// and another state (a set whose timeout fired, or was retired to a mark)
// is not returned.
var appliedSQL = `
SELECT t.key, t.version, t.state, t.deadline_ns, ` + plainSQL + ` FROM timeouts t
JOIN unnest($1::bytea[], $2::int8[], $3::int2[]) AS u(k, v, s) ON t.key = u.k AND t.version = u.v AND t.state = u.s
WHERE t.part IN (` + granted(4, 5, 6) + `)`

// plainSQL is timeoutd.Timeout.Plain of the row t: it stores nothing the
// expiry event needs beyond its key, version and deadline (a misfire bound
// of 0, the default fire subject and a set without trace context are
// stored as NULL).
const plainSQL = `(t.payload IS NULL AND t.fire_subject IS NULL AND t.max_lateness_ms IS NULL AND t.traceparent IS NULL)`

// applySQL upserts the commands of the partitions whose lease rows fenceSQL
// locked earlier in the same transaction (the same condition, on $9..$11),
// where the command's version is newer than the row's.
var applySQL = `
INSERT INTO timeouts AS t (version, deadline_ns, max_lateness_ms, part, state, key, fire_subject, payload, traceparent)
SELECT v, d, NULLIF(l, 0), p, s, k, f, pl, tp
FROM unnest($1::int8[], $2::int8[], $3::int4[], $4::int2[], $5::int2[], $6::bytea[], $7::text[], $8::bytea[], $12::text[]) AS u(v, d, l, p, s, k, f, pl, tp)
WHERE p IN (` + granted(9, 10, 11) + `)
ON CONFLICT (key) DO UPDATE SET
	version = EXCLUDED.version,
	deadline_ns = CASE WHEN t.version < EXCLUDED.version THEN EXCLUDED.deadline_ns ELSE t.deadline_ns END,
	max_lateness_ms = CASE WHEN t.version < EXCLUDED.version THEN EXCLUDED.max_lateness_ms ELSE t.max_lateness_ms END,
	state = EXCLUDED.state,
	fire_subject = CASE WHEN t.version < EXCLUDED.version THEN EXCLUDED.fire_subject ELSE t.fire_subject END,
	payload = CASE WHEN t.version < EXCLUDED.version THEN EXCLUDED.payload ELSE t.payload END,
	traceparent = CASE WHEN t.version < EXCLUDED.version THEN EXCLUDED.traceparent ELSE t.traceparent END
WHERE t.version < EXCLUDED.version
RETURNING key, version, state, deadline_ns, ` + plainSQL

// Apply implements timeoutd.Store: in one transaction, pipelined in one
// round trip, the fence (fenceSQL) and one INSERT … ON CONFLICT DO UPDATE …
// WHERE version is newer, over unnest arrays, of the commands of the
// partitions the fence grants. A max_lateness_ms of 0 is stored as NULL,
// which takes no byte of the row, and so is a set's trace context when it
// has none (Command.TraceParent, stored for the fire to link back to). The
// rows go in the order of their stored
// keys (key.go), so the upsert locks them in the order Fire does and the two
// never deadlock.
func (s *Store) Apply(ctx context.Context, fence lease.Fence, cmds []events.Command, now time.Time) ([]timeoutd.Change, []int, error) {
	n := len(cmds)
	order, stored := storedKeyOrder(n, func(i int) string { return cmds[i].Key })
	versions, deadlines := make([]int64, n), make([]int64, n)
	lateness, parts, states := make([]int32, n), make([]int16, n), make([]int16, n)
	keys, subjects, payloads, traces := make([][]byte, n), make([]*string, n), make([][]byte, n), make([]*string, n)
	for i, j := range order {
		c := cmds[j]
		versions[i], keys[i] = c.Version, stored[j]
		parts[i] = int16(events.PartitionOf(c.Key))
		if c.Kind == events.KindClear {
			states[i], deadlines[i] = int16(timeoutd.StateCleared), now.UnixNano()
			continue
		}
		if err := events.CheckTime("deadline", c.Deadline); err != nil {
			// Validated commands never get here: the deadline would wrap.
			return nil, nil, fmt.Errorf("upsert timeout %s: %w", c.Key, err)
		}
		states[i], deadlines[i] = int16(timeoutd.StatePending), c.Deadline.UnixNano()
		lateness[i] = int32(min(c.MaxLatenessMs, math.MaxInt32))
		if c.FireSubject != s.defaultPrefix+c.Key {
			subjects[i] = &c.FireSubject
		}
		if len(c.Payload) > 0 {
			payloads[i] = c.Payload
		}
		if c.TraceParent != "" {
			traces[i] = &c.TraceParent
		}
	}
	fp, fe := fenceArrays(fence)
	var granted []int16
	var applied, changes []timeoutd.Change
	err := s.inTx(ctx, func(b *pgx.Batch) {
		queueFence(b, fp, fe, fence.Owner, &granted)
		b.Queue(appliedSQL, keys, versions, states, fp, fe, fence.Owner).Query(collectChanges(&applied))
		b.Queue(applySQL, versions, deadlines, lateness, parts, states, keys, subjects, payloads, fp, fe, fence.Owner, traces).Query(collectChanges(&changes))
	})
	if err != nil {
		return nil, nil, fmt.Errorf("upsert timeouts: %w", err)
	}
	return append(applied, changes...), refused(parts, granted), nil
}

// collectChanges returns a batch callback that reads rows of (key,
// version, state, deadline_ns) into *out.
func collectChanges(out *[]timeoutd.Change) func(pgx.Rows) error {
	return func(rows pgx.Rows) error {
		var err error
		*out, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (timeoutd.Change, error) {
			var c timeoutd.Change
			var state int16
			var deadline int64
			err := r.Scan((*keyDest)(&c.Key), &c.Version, &state, &deadline, &c.Plain)
			c.State, c.Deadline = timeoutd.State(state), time.Unix(0, deadline).UTC()
			return c, err
		})
		return err
	}
}

// fenceArrays returns the partitions and epochs of fence's leases.
func fenceArrays(fence lease.Fence) ([]int16, []int64) {
	parts, epochs := make([]int16, len(fence.Leases)), make([]int64, len(fence.Leases))
	for i, l := range fence.Leases {
		parts[i], epochs[i] = int16(l.Partition), l.Epoch
	}
	return parts, epochs
}

// queueFence queues fenceSQL, collecting the granted partitions.
func queueFence(b *pgx.Batch, parts []int16, epochs []int64, owner string, granted *[]int16) {
	b.Queue(fenceSQL, parts, epochs, owner).Query(func(rows pgx.Rows) error {
		var err error
		*granted, err = pgx.CollectRows(rows, pgx.RowTo[int16])
		return err
	})
}

// refused returns the distinct partitions of parts not among granted.
func refused(parts, granted []int16) []int {
	var out []int
	for _, p := range parts {
		if !slices.Contains(granted, p) && !slices.Contains(out, int(p)) {
			out = append(out, int(p))
		}
	}
	return out
}

// inTx runs the statements queue adds in one transaction, pipelined in one
// round trip with BEGIN and COMMIT. A connection left inside the
// transaction by a failure is closed by the pool on release, which rolls
// the transaction back.
func (s *Store) inTx(ctx context.Context, queue func(*pgx.Batch)) error {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	b := &pgx.Batch{}
	b.Queue("BEGIN")
	queue(b)
	b.Queue("COMMIT")
	return conn.SendBatch(ctx, b).Close()
}

// dueSQL reads the rows of due ($1 keys, $2 versions) still pending at
// their version, with what their expiry events carry: one primary-key
// lookup per key. The lookup is a LATERAL subquery with LIMIT 1 (the key is
// unique, so the limit changes no result) so that no plan can turn the
// batch into a join against every pending row (written as a plain join, it
// was planned as a hash join over a scan of them all: docs/ARCHITECTURE.md,
// "The fire path").
const dueSQL = `
SELECT t.key, t.version, t.deadline_ns, t.part, coalesce(t.max_lateness_ms, 0), t.fire_subject, t.payload, coalesce(t.traceparent, '')
FROM unnest($1::bytea[], $2::int8[]) AS d(key, version)
CROSS JOIN LATERAL (SELECT * FROM timeouts t
	WHERE t.key = d.key AND t.version = d.version AND t.state = 0 LIMIT 1) t`

// DueRows implements timeoutd.Store with one read, no transaction: the
// fire path publishes the events first and marks the rows with MarkFired.
func (s *Store) DueRows(ctx context.Context, due []timeoutd.Due) ([]timeoutd.Timeout, error) {
	keys, versions := dueArrays(due)
	rows, err := s.pool.Query(ctx, dueSQL, keys, versions)
	if err != nil {
		return nil, fmt.Errorf("read due timeouts: %w", err)
	}
	out, err := pgx.CollectRows(rows, s.scanTimeout)
	if err != nil {
		return nil, fmt.Errorf("read due timeouts: %w", err)
	}
	return out, nil
}

// dueArrays returns the stored keys and the versions of due, in the order
// of the stored keys.
func dueArrays(due []timeoutd.Due) ([][]byte, []int64) {
	order, stored := storedKeyOrder(len(due), func(i int) string { return due[i].Key })
	keys, versions := make([][]byte, len(due)), make([]int64, len(due))
	for i, j := range order {
		keys[i], versions[i] = stored[j], due[j].Version
	}
	return keys, versions
}

// storedKeyOrder encodes n keys (key(i) is the i-th) and returns them with
// the indexes that list them in the order of their stored bytes: the order
// every write takes rows in, so that Apply and MarkFired never deadlock.
func storedKeyOrder(n int, key func(i int) string) (order []int, stored [][]byte) {
	order, stored = make([]int, n), make([][]byte, n)
	for i := range n {
		order[i], stored[i] = i, encodeKey(key(i))
	}
	slices.SortFunc(order, func(a, b int) int { return bytes.Compare(stored[a], stored[b]) })
	return order, stored
}

// markFiredSQL locks the rows of $1/$2 (in stored key order) still pending
// at their version, of the partitions the fence grants (locked by fenceSQL
// in the same transaction), one primary-key lookup each (a LATERAL LIMIT 1,
// as in dueSQL) in the order of the arrays, which is the order Apply's
// upsert takes rows in, so the two cannot deadlock; then it marks them
// fired at $3, found again by their tuple ids. The LATERAL keeps the plan
// off a hash join over every pending row, as in dueSQL.
var markFiredSQL = `
UPDATE timeouts SET state = 2, deadline_ns = $3
WHERE ctid = ANY (ARRAY(
	SELECT t.ctid FROM unnest($1::bytea[], $2::int8[]) AS d(key, version)
	CROSS JOIN LATERAL (SELECT t.ctid FROM timeouts t
		WHERE t.key = d.key AND t.version = d.version AND t.state = 0
			AND t.part = ANY (ARRAY(` + granted(4, 5, 6) + `))
		LIMIT 1 FOR UPDATE) t))
AND state = 0`

// MarkFired implements timeoutd.Store: BEGIN, the fence, the update and
// COMMIT pipelined in one round trip. The commit waits for the WAL flush
// (synchronous_commit stays on): a mark lost with a crash of Postgres would
// leave a row pending that the running process has already taken out of
// its schedule, to be fired again only by the next owner, maybe past its
// misfire bound as a missed event with another Nats-Msg-Id. The wait is
// off the publish path: the events are already stored.
func (s *Store) MarkFired(ctx context.Context, fence lease.Fence, due []timeoutd.Due, firedAt time.Time) ([]int, error) {
	keys, versions := dueArrays(due)
	parts := make([]int16, len(due))
	for i, d := range due {
		parts[i] = int16(events.PartitionOf(d.Key))
	}
	fp, fe := fenceArrays(fence)
	var granted []int16
	err := s.inTx(ctx, func(b *pgx.Batch) {
		queueFence(b, fp, fe, fence.Owner, &granted)
		b.Queue(markFiredSQL, keys, versions, firedAt.UnixNano(), fp, fe, fence.Owner)
	})
	if err != nil {
		return nil, fmt.Errorf("mark fired: %w", err)
	}
	return refused(parts, granted), nil
}

// fireSubject returns the fire subject of key's row, stored as NULL when
// it is the default one.
func (s *Store) fireSubject(key string, stored *string) string {
	if stored != nil {
		return *stored
	}
	return s.defaultPrefix + key
}

const loadPendingSQL = `SELECT t.key, t.version, t.deadline_ns, ` + plainSQL + ` FROM timeouts t
	WHERE (t.part, t.key) > ($1, $2) AND t.part = $1 AND t.state = 0 ORDER BY t.part, t.key LIMIT $3`

// LoadPending implements timeoutd.Store with a keyset scan of the
// partition's pending rows (index timeouts_pending_part; the row
// comparison lets a generic plan use it too).
func (s *Store) LoadPending(ctx context.Context, partition int, afterKey string, limit int) ([]timeoutd.Timeout, error) {
	rows, err := s.pool.Query(ctx, loadPendingSQL, int16(partition), encodeKey(afterKey), limit)
	if err != nil {
		return nil, fmt.Errorf("load pending: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (timeoutd.Timeout, error) {
		var t timeoutd.Timeout
		var deadline int64
		err := r.Scan((*keyDest)(&t.Key), &t.Version, &deadline, &t.Plain)
		t.Deadline = time.Unix(0, deadline).UTC()
		return t, err
	})
	if err != nil {
		return nil, fmt.Errorf("load pending: %w", err)
	}
	return out, nil
}

// heldSQL key-share-locks, in partition order, the lease rows that $4
// holds at the epochs of $3/$5 (partitions and epochs), unexpired by
// Postgres's clock: the fence of the janitor's statements, a CTE that
// leaseHeldSQL reads, locked as fenceSQL locks, so that a release or an
// acquisition (FOR UPDATE) waits for the statement, and a deposed owner's
// janitor writes nothing after it.
var heldSQL = `WITH held AS (` + granted(3, 5, 4) + `
	ORDER BY l.part
	FOR KEY SHARE OF l)
`

// leaseHeldSQL is true while every lease of the fence is held (heldSQL).
// Uncorrelated, it is evaluated once, before the statement reads a row.
const leaseHeldSQL = `cardinality($3::int2[]) > 0 AND cardinality($3::int2[]) = (SELECT count(*) FROM held)`

// retireTombstonesSQL turns up to $2 tombstones older than $1 into version
// marks, fenced (leaseHeldSQL). The outer condition re-checks the state, so
// a row a command changed between the two scans is left alone.
var retireTombstonesSQL = heldSQL + `UPDATE timeouts SET state = 3, payload = NULL, fire_subject = NULL, max_lateness_ms = NULL, traceparent = NULL
	WHERE ctid = ANY(ARRAY(SELECT ctid FROM timeouts WHERE state IN (1, 2) AND deadline_ns < $1 LIMIT $2))
	AND state IN (1, 2) AND ` + leaseHeldSQL

// RetireTombstones implements timeoutd.Store.
func (s *Store) RetireTombstones(ctx context.Context, fence lease.Fence, before time.Time, limit int) (int, error) {
	fp, fe := fenceArrays(fence)
	tag, err := s.pool.Exec(ctx, retireTombstonesSQL, before.UnixNano(), limit, fp, fence.Owner, fe)
	if err != nil {
		return 0, fmt.Errorf("retire tombstones: %w", err)
	}
	return int(tag.RowsAffected()), nil
}

// forgetMarksSQL deletes up to $2 version marks whose tombstone time is
// before $1, found by the marks' index, fenced (leaseHeldSQL).
var forgetMarksSQL = heldSQL + `DELETE FROM timeouts
	WHERE ctid = ANY(ARRAY(SELECT ctid FROM timeouts WHERE state = 3 AND deadline_ns < $1 LIMIT $2))
	AND state = 3 AND ` + leaseHeldSQL

// ForgetMarks implements timeoutd.Store.
func (s *Store) ForgetMarks(ctx context.Context, fence lease.Fence, before time.Time, limit int) (int, error) {
	fp, fe := fenceArrays(fence)
	tag, err := s.pool.Exec(ctx, forgetMarksSQL, before.UnixNano(), limit, fp, fence.Owner, fe)
	if err != nil {
		return 0, fmt.Errorf("forget version marks: %w", err)
	}
	return int(tag.RowsAffected()), nil
}

const timeoutCols = `key, version, deadline_ns, part, coalesce(max_lateness_ms, 0), fire_subject, payload, coalesce(traceparent, '')`

func (s *Store) scanTimeout(r pgx.CollectableRow) (timeoutd.Timeout, error) {
	var t timeoutd.Timeout
	var deadline int64
	var part int16
	var lateness int32
	var subject *string
	err := r.Scan((*keyDest)(&t.Key), &t.Version, &deadline, &part, &lateness, &subject, &t.Payload, &t.TraceParent)
	t.Deadline, t.Partition, t.MaxLateness = time.Unix(0, deadline).UTC(), int(part), time.Duration(lateness)*time.Millisecond
	t.FireSubject = s.fireSubject(t.Key, subject)
	return t, err
}

// listPendingSQL is ListPending's query: $1, $2 the cursor's deadline and
// stored key, $3 the limit; with a key prefix, [$4, $5) the range of the
// stored keys that start with it and, with uuids, [$6, $7) the range of the
// UUID keys that do (prefixRanges).
func listPendingSQL(prefix, uuids bool) string {
	sql := `SELECT ` + timeoutCols + ` FROM timeouts WHERE state = 0 AND (deadline_ns, key) > ($1, $2)`
	switch {
	case uuids:
		sql += ` AND (key >= $4 AND key < $5 OR key >= $6 AND key < $7)`
	case prefix:
		sql += ` AND key >= $4 AND key < $5`
	}
	return sql + ` ORDER BY deadline_ns, key LIMIT $3`
}

// ListPending implements timeoutd.Store on the partial index of pending
// deadlines, which does not carry the key (to save its bytes): Postgres
// turns the row comparison into the index condition deadline_ns >= $1 and
// orders the keys of equal deadlines with an incremental sort, so a page
// also reads the rows that share the cursor's or its last deadline. A
// selective key prefix is planned on the primary key instead. Keys of
// equal deadlines come in the order of their stored form: UUIDs first.
func (s *Store) ListPending(ctx context.Context, q timeoutd.Query) ([]timeoutd.Timeout, error) {
	after := int64(math.MinInt64)
	if !q.After.Deadline.IsZero() {
		after = q.After.Deadline.UnixNano()
	}
	args := []any{after, encodeKey(q.After.Key), q.Limit}
	var uuids bool
	if q.KeyPrefix != "" {
		var plain, uuid [2][]byte
		plain, uuid, uuids = prefixRanges(q.KeyPrefix)
		args = append(args, plain[0], plain[1])
		if uuids {
			args = append(args, uuid[0], uuid[1])
		}
	}
	rows, err := s.pool.Query(ctx, listPendingSQL(q.KeyPrefix != "", uuids), args...)
	if err != nil {
		return nil, fmt.Errorf("list pending: %w", err)
	}
	out, err := pgx.CollectRows(rows, s.scanTimeout)
	if err != nil {
		return nil, fmt.Errorf("list pending: %w", err)
	}
	return out, nil
}

const getPendingSQL = `SELECT ` + timeoutCols + ` FROM timeouts WHERE key = $1 AND state = 0`

// GetPending implements timeoutd.Store.
func (s *Store) GetPending(ctx context.Context, key string) (timeoutd.Timeout, error) {
	rows, err := s.pool.Query(ctx, getPendingSQL, encodeKey(key))
	if err != nil {
		return timeoutd.Timeout{}, fmt.Errorf("get pending: %w", err)
	}
	t, err := pgx.CollectExactlyOneRow(rows, s.scanTimeout)
	if errors.Is(err, pgx.ErrNoRows) {
		return timeoutd.Timeout{}, timeoutd.ErrNotFound
	}
	if err != nil {
		return timeoutd.Timeout{}, fmt.Errorf("get pending: %w", err)
	}
	return t, nil
}

// Ping implements timeoutd.Store.
func (s *Store) Ping(ctx context.Context) error { return s.pool.Ping(ctx) }
