-- +goose Up
-- Keys as bytea (issue 3, bytes per pending timeout): a canonical UUID key,
-- the orders service's ids, is stored as a zero byte and its 16 bytes (17
-- bytes instead of 36, in the heap and in the primary key); any other key
-- as its own bytes, which never start with a zero byte (keys are ASCII
-- letters, digits, '-' and '_'). key.go holds the same encoding; the two
-- functions are for migrations and for people at a psql prompt:
--   SELECT * FROM timeouts WHERE key = timeout_key('019a…');
--   SELECT timeout_key_text(key), state FROM timeouts LIMIT 10;
-- Rewrites the table and its indexes under an exclusive lock.
CREATE FUNCTION timeout_key(k text) RETURNS bytea
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
RETURN CASE WHEN k ~ '^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$'
    THEN '\x00'::bytea || decode(replace(k, '-', ''), 'hex')
    ELSE convert_to(k, 'UTF8')
END;

CREATE FUNCTION timeout_key_text(b bytea) RETURNS text
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
RETURN CASE WHEN length(b) = 17 AND get_byte(b, 0) = 0
    THEN regexp_replace(encode(substring(b FROM 2), 'hex'),
        '^(.{8})(.{4})(.{4})(.{4})(.{12})$', '\1-\2-\3-\4-\5')
    ELSE convert_from(b, 'UTF8')
END;

ALTER TABLE timeouts ALTER COLUMN key TYPE bytea USING timeout_key(key);

-- +goose Down
ALTER TABLE timeouts ALTER COLUMN key TYPE text COLLATE "C" USING timeout_key_text(key);
DROP FUNCTION timeout_key_text(bytea);
DROP FUNCTION timeout_key(text);
