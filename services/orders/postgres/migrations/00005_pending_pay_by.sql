-- +goose NO TRANSACTION
-- +goose Up
-- The reconciler's sweep: pending orders by deadline. Partial, so it holds
-- only the orders still pending (few, whatever the table's size), and built
-- concurrently, so creating it does not block writes to a large table.
CREATE INDEX CONCURRENTLY IF NOT EXISTS orders_pending_pay_by ON orders (pay_by) WHERE status = 'pending_payment';

-- +goose Down
DROP INDEX CONCURRENTLY IF EXISTS orders_pending_pay_by;
