-- +goose Up
-- The outbox is a queue: every row is inserted and soon deleted. Vacuum it
-- after a fixed number of dead rows, not a fraction of a table that is
-- usually empty, so the relay's index scan does not wade through dead rows.
ALTER TABLE outbox SET (autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 5000,
    autovacuum_vacuum_cost_delay = 0, autovacuum_analyze_scale_factor = 0, autovacuum_analyze_threshold = 5000);

-- +goose Down
ALTER TABLE outbox RESET (autovacuum_vacuum_scale_factor, autovacuum_vacuum_threshold,
    autovacuum_vacuum_cost_delay, autovacuum_analyze_scale_factor, autovacuum_analyze_threshold);
