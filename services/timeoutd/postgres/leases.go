package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ordertimeout/ordertimeout/services/timeoutd"
)

// Leases implements timeoutd.Leases on the timeout_leases and
// timeoutd_instances tables (migration 00005). Every expiry is computed with
// Postgres's now(), and every statement that takes several lease rows takes
// them in partition order, as fenceSQL does, so that lease changes and
// fenced writes never deadlock.
type Leases struct{ store *Store }

var _ timeoutd.Leases = Leases{}

// Leases returns the lease table on the store's pool.
func (s *Store) Leases() Leases { return Leases{store: s} }

const heartbeatSQL = `
WITH beat AS (
	INSERT INTO timeoutd_instances AS i (id, expires_at, info) VALUES ($1, now() + $2 * interval '1 millisecond', $3)
	ON CONFLICT (id) DO UPDATE SET expires_at = EXCLUDED.expires_at, info = EXCLUDED.info,
		started_at = CASE WHEN i.expires_at > now() THEN i.started_at ELSE now() END
	RETURNING id)
SELECT 1 + count(*),
	coalesce((SELECT ceil(extract(epoch FROM min(expires_at) - now()) * 1000)::int8
		FROM timeout_leases WHERE owner <> $1 AND expires_at > now()), 0)
FROM timeoutd_instances WHERE expires_at > now() AND id <> $1`

// Heartbeat implements timeoutd.Leases.
func (l Leases) Heartbeat(ctx context.Context, id string, ttl time.Duration, info []byte) (int, time.Duration, error) {
	var live int
	var nextMs int64
	if err := l.store.pool.QueryRow(ctx, heartbeatSQL, id, ttl.Milliseconds(), info).Scan(&live, &nextMs); err != nil {
		return 0, 0, fmt.Errorf("heartbeat: %w", err)
	}
	return live, time.Duration(nextMs) * time.Millisecond, nil
}

const acquireSQL = `
WITH pick AS (
	SELECT part FROM timeout_leases
	WHERE (owner IS NULL OR expires_at <= now() OR owner = $1) AND part <> ALL($3::int2[])
	ORDER BY part LIMIT $2
	FOR UPDATE SKIP LOCKED)
UPDATE timeout_leases l SET owner = $1, epoch = l.epoch + 1, expires_at = now() + $4 * interval '1 millisecond'
FROM pick WHERE l.part = pick.part
RETURNING l.part, l.epoch`

// Acquire implements timeoutd.Leases.
func (l Leases) Acquire(ctx context.Context, id string, n int, held []int, ttl time.Duration) ([]timeoutd.Lease, error) {
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
	WHERE l.owner = $1 AND l.expires_at > now()
	ORDER BY l.part
	FOR NO KEY UPDATE OF l)
UPDATE timeout_leases l SET expires_at = now() + $4 * interval '1 millisecond'
FROM mine WHERE l.part = mine.part
RETURNING l.part, l.epoch`

// Renew implements timeoutd.Leases.
func (l Leases) Renew(ctx context.Context, id string, held []timeoutd.Lease, ttl time.Duration) ([]timeoutd.Lease, error) {
	parts, epochs := fenceArrays(timeoutd.Fence{Leases: held})
	return l.leases(ctx, "renew leases", renewSQL, id, parts, epochs, ttl.Milliseconds())
}

func (l Leases) leases(ctx context.Context, what, sql string, args ...any) ([]timeoutd.Lease, error) {
	rows, err := l.store.pool.Query(ctx, sql, args...)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (timeoutd.Lease, error) {
		var p int16
		var e int64
		err := r.Scan(&p, &e)
		return timeoutd.Lease{Partition: int(p), Epoch: e}, err
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

// Release implements timeoutd.Leases.
func (l Leases) Release(ctx context.Context, id string, leases []timeoutd.Lease) error {
	parts, epochs := fenceArrays(timeoutd.Fence{Leases: leases})
	if _, err := l.store.pool.Exec(ctx, releaseSQL, id, parts, epochs); err != nil {
		return fmt.Errorf("release leases: %w", err)
	}
	return nil
}

// Leave implements timeoutd.Leases.
func (l Leases) Leave(ctx context.Context, id string) error {
	if _, err := l.store.pool.Exec(ctx, `DELETE FROM timeoutd_instances WHERE id = $1`, id); err != nil {
		return fmt.Errorf("leave: %w", err)
	}
	return nil
}

const instancesSQL = `
SELECT i.id, i.started_at, i.info,
	coalesce(array_agg(l.part ORDER BY l.part) FILTER (WHERE l.part IS NOT NULL), '{}')
FROM timeoutd_instances i
LEFT JOIN timeout_leases l ON l.owner = i.id AND l.expires_at > now()
WHERE i.expires_at > now()
GROUP BY i.id ORDER BY i.id`

// Instances implements timeoutd.Leases.
func (l Leases) Instances(ctx context.Context) ([]timeoutd.Instance, error) {
	rows, err := l.store.pool.Query(ctx, instancesSQL)
	if err != nil {
		return nil, fmt.Errorf("list instances: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (timeoutd.Instance, error) {
		var in timeoutd.Instance
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
