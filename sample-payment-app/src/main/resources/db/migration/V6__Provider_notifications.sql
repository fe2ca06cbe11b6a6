-- POST /provider/notifications: a payment provider tells the app what became of a payment it handles (a checkout the
-- customer completed on the provider's pages). Providers deliver each event at least once, re-send it with a fresh
-- nonce and signature until it is answered 2xx, and deliver events out of order.

-- What the app knows of each of the provider's payments: the status of the newest event applied, and that event's
-- version (the provider's sequence number for the payment). An event changes the row only when it is newer than the
-- version here and its status may follow the one here (UPDATE ... WHERE version < ? AND status IN (...)), so a late
-- "closed" sent before "succeeded" cannot undo the success.
CREATE TABLE provider_payments (
    transaction_id varchar(64) PRIMARY KEY,  -- the provider's id of the payment
    order_id       varchar(64) NOT NULL,
    status         varchar(16) NOT NULL,
    version        bigint      NOT NULL,
    updated_at     timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT provider_payments_status_ck
        CHECK (status IN ('PENDING', 'SUCCEEDED', 'FAILED', 'CLOSED', 'DISPUTED', 'REFUNDED'))
);

-- Every event the app acknowledged, with what it did about it. The primary key makes a re-sent event that comes after
-- its idempotency record was deleted (retention) leave this log as it was.
CREATE TABLE provider_events (
    event_id       varchar(64) PRIMARY KEY,
    transaction_id varchar(64) NOT NULL,
    status         varchar(16) NOT NULL,
    version        bigint      NOT NULL,
    outcome        varchar(16) NOT NULL,     -- APPLIED, SUPERSEDED or CONTRADICTED
    received_at    timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX provider_events_transaction_id_idx ON provider_events (transaction_id);
