-- Every charge request the fake gateway accepted for processing, booked or not. The ledger deduplicates on the key, so
-- it cannot tell whether the application called the gateway once or three times; this log can, and the crash tests
-- count it to show that a resolved claim does not charge again.
CREATE TABLE gateway_calls (
    id              bigserial   PRIMARY KEY,
    idempotency_key varchar(64) NOT NULL,
    order_id        varchar(64) NOT NULL,
    called_at       timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX gateway_calls_order_id_idx ON gateway_calls (order_id);
