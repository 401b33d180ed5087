-- +goose Up
-- timeoutd_settings holds what the stored rows depend on. A pending row
-- whose fire subject is the default one stores none; the default is
-- TIMEOUTD_DEFAULT_FIRE_SUBJECT_PREFIX plus the key. Rows stored before
-- the setting existed used orders.cancel.; the store refuses another
-- default while such a pending row is left (Store.PinDefaultFireSubject).
CREATE TABLE timeoutd_settings (
	name text PRIMARY KEY,
	value text NOT NULL
);
INSERT INTO timeoutd_settings (name, value)
SELECT 'default_fire_subject_prefix', 'orders.cancel.'
WHERE EXISTS (SELECT 1 FROM timeouts WHERE state = 0 AND fire_subject IS NULL);

-- +goose Down
DROP TABLE timeoutd_settings;
