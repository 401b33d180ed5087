package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/ordertimeout/ordertimeout/services/timeoutd/internal/lease"
)

// Leases implements lease.Table on the timeout_leases and
// timeoutd_instances tables (migration 00005). Every expiry is computed with
// Postgres's now(), and every statement that takes several lease rows takes
// them in partition order, as fenceSQL does, so that lease changes and
// fenced writes never deadlock.
type Leases struct{ pool *pgxpool.Pool }

var _ lease.Table = Leases{}

// NewLeases returns the lease table on pool: a pool of its own (see
// LeasePoolConfig), so that renewals never wait for a connection behind
// ingest and fire, nor for their statements.
func NewLeases(pool *pgxpool.Pool) Leases { return Leases{pool: pool} }

// LeasePoolConns is the size of the lease pool: the round's calls are
// sequential, a heartbeat or renewal unanswered for a while is sent again
// on another connection (lease.Membership's hedge), and a call abandoned
// may still hold its connection while it closes.
const LeasePoolConns = 3

// LeasePoolConfig adapts cfg, the configuration of a pool for NewLeases:
// LeasePoolConns connections kept open for the life of the process, so
// that the instance's sessions in pg_stat_activity, by which the others
// tell it crashed, are never all closed while it lives.
func LeasePoolConfig(cfg *pgxpool.Config) {
	cfg.MaxConns, cfg.MinConns = LeasePoolConns, 1
	cfg.MaxConnLifetime, cfg.MaxConnIdleTime = 0, 0
}

// The rules of liveness, shared by the statements below. Every instance
// lost its sessions to a restart of the database: the instances and their
// leases count as live for one TTL after the start (graceExpiry), so that
// they renew their own before any is taken, even one whose heartbeat came
// back before its renewal did. The same grace follows a silence of the whole
// cluster (resumedCTE): Postgres frozen, or every instance cut off from
// it, long enough for the leases to expire by Postgres's clock meanwhile.
// Either grace is for the rows still live when the quiet began (the last
// time any instance was seen before it): one expired by then was dead
// already, and stays so.
// An instance whose last heartbeat came after the start, and after the
// cluster last resumed from a silence, and whose sessions are all gone
// (sessionlessSQL) crashed, unless a session comes back within CrashGrace
// (a connection reset: the instance reconnects at once): past it, it is
// dead (goneSQL) and its partitions orphaned. Before its first heartbeat
// since the resume it is not judged by its sessions: after a failover the
// promoted standby has none of them (and its own, earlier, start), and an
// instance whose connections to the old primary hang may take seconds to
// reconnect; its leases have the grace. Nor is any instance for a TTL
// after the resume: its first heartbeat there may commit while its client
// gives up on it (a deadline closes that session), and it reconnects
// through the same failover.
// gone_at records when an instance was first seen without a session;
// every heartbeat and probe keeps it (watchSQL).
func sessionlessSQL(ttl string) string {
	return `beat_at > ` + resumedAtSQL + ` AND now() >= ` + resumedAtSQL + ` + ` + ttl + ` * interval '1 millisecond' AND app <> ''
	AND NOT EXISTS (SELECT 1 FROM pg_stat_activity a WHERE a.datname = current_database() AND a.application_name = app)`
}

// CrashGrace is how long an instance's sessions must stay gone before it
// is dead: longer than a live instance takes to reconnect after its
// connections were reset (it probes every 100 ms), short beside the lease
// TTL a paused or cut-off instance is judged by.
const CrashGrace = 250 * time.Millisecond

// goneSQL is the condition of a dead instance, for statements whose TTL
// is the parameter ttl (milliseconds).
func goneSQL(ttl string) string {
	return fmt.Sprintf(`gone_at <= now() - interval '%d milliseconds' AND %s`, CrashGrace.Milliseconds(), sessionlessSQL(ttl))
}

// watchSQL are the CTEs that record when another instance was first seen
// without a session, and forget it once one is back (TTL $2).
var watchSQL = `seen AS (UPDATE timeoutd_instances SET gone_at = now()
	WHERE id <> $1 AND gone_at IS NULL AND ` + sessionlessSQL("$2") + ` RETURNING 1),
back AS (UPDATE timeoutd_instances SET gone_at = NULL
	WHERE id <> $1 AND gone_at IS NOT NULL AND NOT (` + sessionlessSQL("$2") + `) RETURNING 1)`

// graceExpiry returns the expiry of a row whose expiry is the column
// expires and whose owner's last heartbeat is the column beatAt (NULL: no
// such instance), with the grace of ttl (a parameter, in milliseconds)
// after the cluster resumed at resumed from a quiet that began at quiet
// (resumedCTE's at and quiet, or resumedAtSQL and quietAtSQL): for a row
// still live at quiet, whether or not its owner beat since the resume (a
// heartbeat back is not a renewal back: the owner's renewal may still be
// on its way through the failover, or its heartbeat's answer lost). No
// row has a grace when no instance was seen before the quiet (a new
// database: quiet is infinity).
func graceExpiry(expires, beatAt, resumed, quiet, ttl string) string {
	return fmt.Sprintf(`CASE WHEN %[2]s IS NOT NULL AND %[1]s > %[4]s
		THEN greatest(%[1]s, %[3]s + %[5]s * interval '1 millisecond') ELSE %[1]s END`, expires, beatAt, resumed, quiet, ttl)
}

// resumedCTE is the CTE resumed of a heartbeat or probe with TTL $2: at is
// when the cluster last resumed, and quiet when the quiet it resumed from
// began. That is this statement when no instance was seen (a heartbeat or
// probe recorded in seen_at) for a third of the TTL before it: a silence
// that long may let a lease expire unrenewed (a renewal is due every renew
// interval, below two thirds of the TTL). It is Postgres's start when no
// statement recorded a resume since. Either way quiet is the last time an
// instance was seen before it. Otherwise both are the latest resume's, as
// recorded. The statement records them in its instance's resumed_at and
// quiet_at.
const resumedCTE = `resumed AS (SELECT
	CASE WHEN r.silent THEN now() WHEN r.restarted THEN pg_postmaster_start_time() ELSE r.last END AS at,
	CASE WHEN r.silent OR r.restarted THEN r.seen ELSE r.quiet END AS quiet
	FROM (SELECT coalesce(max(seen_at) < now() - $2 * interval '1 millisecond' / 3, false) AS silent,
		coalesce(max(resumed_at), '-infinity') < pg_postmaster_start_time() AS restarted,
		max(resumed_at) AS last, coalesce(max(seen_at), 'infinity') AS seen,
		(array_agg(quiet_at ORDER BY resumed_at DESC))[1] AS quiet
		FROM timeoutd_instances) r)`

// resumedAtSQL and quietAtSQL are when the cluster last resumed and when
// the quiet it resumed from began, for the statements that follow a
// heartbeat (which recorded them).
const (
	resumedAtSQL = `greatest(pg_postmaster_start_time(), (SELECT max(resumed_at) FROM timeoutd_instances))`
	quietAtSQL   = `(SELECT quiet_at FROM timeoutd_instances ORDER BY resumed_at DESC LIMIT 1)`
)

// serverSQL names the server that answers, for as long as it runs: its
// address and port (those of the node a multi-host URL reached: another
// one after a failover) and its start.
const serverSQL = `coalesce(host(inet_server_addr()), 'local') || ':' || coalesce(inet_server_port(), 0) || '@' || pg_postmaster_start_time()`

// standbyLagSQL is lease.Beat.StandbyLag in seconds: the server's clock
// minus each streaming standby's at its last reply (its clock's lag plus
// the reply's age), the most of them. Replies older than 2 s are left
// out: a standby that stopped replying says nothing of its clock, and its
// age would hold every fire back by it. Without pg_read_all_stats (or
// pg_monitor) the replies of the replication user's sessions read NULL,
// and the lag 0.
const standbyLagSQL = `coalesce((SELECT extract(epoch FROM max(now() - reply_time)) FROM pg_stat_replication
	WHERE reply_time > now() - interval '2 seconds'), 0)::float8`

// clusterCTEs and clusterSelect return, for instance $1 and TTL $2, the
// live instances besides $1, the milliseconds until the first lease of
// another instance expires, and the partitions takeable at once: free, or
// of dead instances.
var (
	clusterCTEs = fmt.Sprintf(`gone AS (SELECT id FROM timeoutd_instances WHERE id <> $1 AND %[1]s),
other AS (SELECT %[2]s AS expiry, l.owner FROM timeout_leases l LEFT JOIN timeoutd_instances i ON i.id = l.owner
	WHERE l.owner <> $1)`, goneSQL("$2"), graceExpiry("l.expires_at", "i.beat_at", "(SELECT at FROM resumed)", "(SELECT quiet FROM resumed)", "$2"))
	clusterSelect = fmt.Sprintf(`
	1 + (SELECT count(*) FROM timeoutd_instances WHERE id <> $1 AND serving AND %[1]s > now() AND id NOT IN (SELECT id FROM gone)),
	coalesce((SELECT ceil(extract(epoch FROM min(expiry) - now()) * 1000)::int8 FROM other WHERE expiry > now()), 0),
	(SELECT count(*) FROM timeout_leases WHERE owner IS NULL OR owner IN (SELECT id FROM gone))`,
		graceExpiry("expires_at", "beat_at", "(SELECT at FROM resumed)", "(SELECT quiet FROM resumed)", "$2"))
)

var (
	heartbeatSQL = `
WITH ` + resumedCTE + `,
beat AS (
	INSERT INTO timeoutd_instances AS i (id, expires_at, info, app, beat_at, serving, seen_at, resumed_at, quiet_at)
	VALUES ($1, now() + $2 * interval '1 millisecond', $3, current_setting('application_name'), now(), $4, now(),
		(SELECT at FROM resumed), (SELECT quiet FROM resumed))
	ON CONFLICT (id) DO UPDATE SET expires_at = EXCLUDED.expires_at, info = EXCLUDED.info, app = EXCLUDED.app,
		beat_at = EXCLUDED.beat_at, gone_at = NULL, serving = EXCLUDED.serving,
		seen_at = EXCLUDED.seen_at, resumed_at = EXCLUDED.resumed_at, quiet_at = EXCLUDED.quiet_at,
		started_at = CASE WHEN i.expires_at > now() THEN i.started_at ELSE now() END
	RETURNING id),
` + watchSQL + `,
` + clusterCTEs + `
SELECT ` + clusterSelect + `, now(), ` + serverSQL + `, ` + standbyLagSQL
	probeSQL = `WITH ` + resumedCTE + `,
me AS (UPDATE timeoutd_instances SET seen_at = now(), resumed_at = (SELECT at FROM resumed), quiet_at = (SELECT quiet FROM resumed) WHERE id = $1),
` + watchSQL + `,
` + clusterCTEs + `
SELECT ` + clusterSelect
)

// Heartbeat implements lease.Table.
func (l Leases) Heartbeat(ctx context.Context, id string, ttl time.Duration, info []byte, serving bool) (lease.Beat, error) {
	var b lease.Beat
	var nextMs int64
	var lag float64
	if err := l.pool.QueryRow(ctx, heartbeatSQL, id, ttl.Milliseconds(), info, serving).Scan(&b.Live, &nextMs, &b.Takeable, &b.DBTime, &b.Server, &lag); err != nil {
		return lease.Beat{}, fmt.Errorf("heartbeat: %w", err)
	}
	b.NextExpiry = time.Duration(nextMs) * time.Millisecond
	b.StandbyLag = time.Duration(lag * float64(time.Second))
	return b, nil
}

// Probe implements lease.Table.
func (l Leases) Probe(ctx context.Context, id string, ttl time.Duration) (live, takeable int, err error) {
	var nextMs int64
	if err := l.pool.QueryRow(ctx, probeSQL, id, ttl.Milliseconds()).Scan(&live, &nextMs, &takeable); err != nil {
		return 0, 0, fmt.Errorf("probe the cluster: %w", err)
	}
	return live, takeable, nil
}

var acquireSQL = `
WITH gone AS (SELECT id FROM timeoutd_instances WHERE id <> $1 AND ` + goneSQL("$4") + `),
pick AS (
	SELECT l.part FROM timeout_leases l LEFT JOIN timeoutd_instances i ON i.id = l.owner
	WHERE (l.owner IS NULL OR l.owner = $1 OR ` + graceExpiry("l.expires_at", "i.beat_at", resumedAtSQL, quietAtSQL, "$4") + ` <= now()
		OR l.owner IN (SELECT id FROM gone))
		AND l.part <> ALL($3::int2[])
	ORDER BY l.part LIMIT $2
	FOR UPDATE OF l SKIP LOCKED)
UPDATE timeout_leases l SET owner = $1, epoch = l.epoch + 1, expires_at = now() + $4 * interval '1 millisecond'
FROM pick WHERE l.part = pick.part
RETURNING l.part, l.epoch`

// Acquire implements lease.Table.
func (l Leases) Acquire(ctx context.Context, id string, n int, held []int, ttl time.Duration) ([]lease.Lease, error) {
	parts := make([]int16, len(held))
	for i, p := range held {
		parts[i] = int16(p)
	}
	return l.leases(ctx, "acquire leases", acquireSQL, id, n, parts, ttl.Milliseconds())
}

const renewSQL = `
WITH mine AS (
	SELECT l.part FROM timeout_leases l
	JOIN unnest($2::int2[], $3::int8[]) AS f(part, epoch) ON l.part = f.part AND l.epoch = f.epoch
	WHERE l.owner = $1
	ORDER BY l.part
	FOR NO KEY UPDATE OF l)
UPDATE timeout_leases l SET expires_at = now() + $4 * interval '1 millisecond'
FROM mine WHERE l.part = mine.part
RETURNING l.part, l.epoch`

// Renew implements lease.Table.
func (l Leases) Renew(ctx context.Context, id string, held []lease.Lease, ttl time.Duration) ([]lease.Lease, error) {
	parts, epochs := fenceArrays(lease.Fence{Leases: held})
	return l.leases(ctx, "renew leases", renewSQL, id, parts, epochs, ttl.Milliseconds())
}

func (l Leases) leases(ctx context.Context, what, sql string, args ...any) ([]lease.Lease, error) {
	rows, err := l.pool.Query(ctx, sql, args...)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (lease.Lease, error) {
		var p int16
		var e int64
		err := r.Scan(&p, &e)
		return lease.Lease{Partition: int(p), Epoch: e}, err
	})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return out, nil
}

const releaseSQL = `
WITH mine AS (
	SELECT l.part FROM timeout_leases l
	JOIN unnest($2::int2[], $3::int8[]) AS f(part, epoch) ON l.part = f.part AND l.epoch = f.epoch
	WHERE l.owner = $1
	ORDER BY l.part
	FOR UPDATE OF l)
UPDATE timeout_leases l SET owner = NULL, expires_at = '-infinity'
FROM mine WHERE l.part = mine.part`

// Release implements lease.Table. Its row locks (FOR UPDATE) wait
// for the fenced writes in flight (FOR KEY SHARE), so that a released
// lease has no write of its former owner still running.
func (l Leases) Release(ctx context.Context, id string, leases []lease.Lease) error {
	parts, epochs := fenceArrays(lease.Fence{Leases: leases})
	if _, err := l.pool.Exec(ctx, releaseSQL, id, parts, epochs); err != nil {
		return fmt.Errorf("release leases: %w", err)
	}
	return nil
}

// leaveSQL ends instance $1's registration at once, its row kept as the
// last time it was seen: were it deleted, the cluster's quiet (resumedCTE)
// would begin when the instances before it were last seen, and its own
// restart under the same id would bring back an instance dead since then.
// It deletes the rows expired for an hour, of instances long gone.
const leaveSQL = `WITH purge AS (DELETE FROM timeoutd_instances WHERE id <> $1 AND expires_at < now() - interval '1 hour')
UPDATE timeoutd_instances SET expires_at = now(), serving = false, seen_at = now(), app = '', gone_at = NULL WHERE id = $1`

// Leave implements lease.Table.
func (l Leases) Leave(ctx context.Context, id string) error {
	if _, err := l.pool.Exec(ctx, leaveSQL, id); err != nil {
		return fmt.Errorf("leave: %w", err)
	}
	return nil
}

var ownershipSQL = fmt.Sprintf(`
WITH gone AS (SELECT id FROM timeoutd_instances WHERE %[1]s),
r AS (SELECT l.part, l.owner, l.epoch, l.expires_at, %[2]s AS until
	FROM timeout_leases l LEFT JOIN timeoutd_instances i ON i.id = l.owner)
SELECT part, coalesce(owner, ''), epoch,
	CASE WHEN owner IS NULL THEN 'free' WHEN owner IN (SELECT id FROM gone) THEN 'orphaned'
		WHEN expires_at > now() THEN 'held' WHEN until > now() THEN 'grace' ELSE 'expired' END,
	CASE WHEN owner IS NULL OR owner IN (SELECT id FROM gone) OR until <= now() THEN 0
		ELSE ceil(extract(epoch FROM until - now()) * 1000)::int8 END
FROM r ORDER BY part`, goneSQL("$1"), graceExpiry("l.expires_at", "i.beat_at", resumedAtSQL, quietAtSQL, "$1"))

// Ownership implements lease.Table, with the rules of Acquire: the same
// grace and crash detection.
func (l Leases) Ownership(ctx context.Context, ttl time.Duration) ([]lease.PartitionLease, error) {
	rows, err := l.pool.Query(ctx, ownershipSQL, ttl.Milliseconds())
	if err != nil {
		return nil, fmt.Errorf("read the leases: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (lease.PartitionLease, error) {
		var pl lease.PartitionLease
		var p int16
		var state string
		var leftMs int64
		err := r.Scan(&p, &pl.Owner, &pl.Epoch, &state, &leftMs)
		pl.Partition, pl.State, pl.Left = int(p), lease.LeaseState(state), time.Duration(leftMs)*time.Millisecond
		return pl, err
	})
	if err != nil {
		return nil, fmt.Errorf("read the leases: %w", err)
	}
	return out, nil
}

const instancesSQL = `
SELECT i.id, i.started_at, i.info,
	coalesce(array_agg(l.part ORDER BY l.part) FILTER (WHERE l.part IS NOT NULL), '{}')
FROM timeoutd_instances i
LEFT JOIN timeout_leases l ON l.owner = i.id AND l.expires_at > now()
WHERE i.expires_at > now()
GROUP BY i.id ORDER BY i.id`

// Instances implements lease.Table.
func (l Leases) Instances(ctx context.Context) ([]lease.Instance, error) {
	rows, err := l.pool.Query(ctx, instancesSQL)
	if err != nil {
		return nil, fmt.Errorf("list instances: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (lease.Instance, error) {
		var in lease.Instance
		var parts []int16
		err := r.Scan(&in.ID, &in.StartedAt, &in.Info, &parts)
		for _, p := range parts {
			in.Partitions = append(in.Partitions, int(p))
		}
		return in, err
	})
	if err != nil {
		return nil, fmt.Errorf("list instances: %w", err)
	}
	return out, nil
}
