-- +goose Up
CREATE TABLE orders (
    id            text        PRIMARY KEY,
    customer_id   text        NOT NULL,
    currency      text        NOT NULL,
    items         jsonb       NOT NULL,
    amount_minor  bigint      NOT NULL CHECK (amount_minor >= 0),
    status        text        NOT NULL CHECK (status IN ('pending_payment', 'paid', 'cancelled')),
    cancel_reason text        CHECK (cancel_reason IN ('customer', 'payment_timeout')),
    version       bigint      NOT NULL CHECK (version > 0),
    pay_by        timestamptz NOT NULL,
    created_at    timestamptz NOT NULL,
    updated_at    timestamptz NOT NULL,
    CHECK ((status = 'cancelled') = (cancel_reason IS NOT NULL))
);
-- List pages: newest id first, filtered by status or customer.
CREATE INDEX orders_status_id ON orders (status, id);
CREATE INDEX orders_customer_id_id ON orders (customer_id, id);

-- The Idempotency-Key of POST /v1/orders: the hash of the first request's
-- body and the order it created, returned to retries.
CREATE TABLE idempotency_keys (
    key          text        PRIMARY KEY,
    request_hash bytea       NOT NULL,
    response     jsonb       NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now()
);

-- The transactional outbox: internal/outbox's migrations.

-- +goose Down
DROP TABLE idempotency_keys;
DROP TABLE orders;
