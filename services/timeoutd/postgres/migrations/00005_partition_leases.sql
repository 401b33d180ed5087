-- +goose Up
-- timeoutd as a cluster (issue 13): the key space is split into 64
-- partitions (pkg/events.Partitions: FNV-1a of the key modulo 64, the hash
-- of NATS's partition() transform), each owned by one instance through a
-- lease row. Rows stored with the earlier 16 partitions are re-partitioned
-- here by the same function in SQL (on the key as text: 00003 stores UUID
-- keys in binary).

-- +goose StatementBegin
CREATE FUNCTION timeout_partition(k text) RETURNS smallint
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $$
DECLARE
    b bytea := convert_to(k, 'UTF8');
    h bigint := 2166136261;
BEGIN
    FOR i IN 0 .. length(b) - 1 LOOP
        h := ((h # get_byte(b, i)) * 16777619) & 4294967295;
    END LOOP;
    RETURN (h % 64)::smallint;
END $$;
-- +goose StatementEnd

UPDATE timeouts SET part = timeout_partition(timeout_key_text(key))
    WHERE part <> timeout_partition(timeout_key_text(key));
DROP FUNCTION timeout_partition(text);

-- A partition's pending rows, in key order, for the load on acquiring it.
CREATE INDEX timeouts_pending_part ON timeouts (part, key) WHERE state = 0;

-- One row per partition. epoch is the fencing token: it grows by one at
-- every acquisition, and every write for the partition (the ingest upsert,
-- the fire transaction) succeeds only while the lease row still holds the
-- writer's owner and epoch and has not expired. expires_at is computed by
-- Postgres's clock, never an instance's.
CREATE TABLE timeout_leases (
    part       smallint    PRIMARY KEY,
    owner      text,
    epoch      bigint      NOT NULL DEFAULT 0,
    expires_at timestamptz NOT NULL DEFAULT '-infinity'
);
INSERT INTO timeout_leases (part) SELECT generate_series(0, 63);

-- The live instances, for the balance (each owns about 64/N partitions)
-- and the cluster view: an instance is live until expires_at, renewed with
-- its leases; info holds what the dashboard shows of it.
CREATE TABLE timeoutd_instances (
    id         text        PRIMARY KEY,
    started_at timestamptz NOT NULL DEFAULT now(),
    expires_at timestamptz NOT NULL,
    info       jsonb       NOT NULL DEFAULT '{}'
);

-- +goose Down
DROP TABLE timeoutd_instances;
DROP TABLE timeout_leases;
DROP INDEX timeouts_pending_part;
