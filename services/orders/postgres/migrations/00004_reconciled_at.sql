-- +goose Up
-- When the reconciler (postgres.Reconciler) cancelled the order itself
-- because its cancel event never came; NULL for every other order. It tells
-- reconciled cancellations from those timeoutd's event caused, which carry
-- the same event and reason.
ALTER TABLE orders ADD COLUMN reconciled_at timestamptz;

-- +goose Down
ALTER TABLE orders DROP COLUMN reconciled_at;
