-- POST /charges: a charge through an external payment gateway, a side effect outside the application's database.
-- Three tables: the fake gateway's own ledger, the application's local record of its charges, and an audit of every
-- decision about a charge whose outcome was unknown.

-- The fake gateway's ledger. Conceptually another system with its own database: it lives here only to keep the sample
-- self-contained. The application reaches it over HTTP only (/gateway/**); no code on the charges side reads or writes
-- this table. The gateway deduplicates on the idempotency key it receives (the key the application derives from the
-- client's key, never the client's key itself): a charge sent twice with one key is booked once.
CREATE TABLE gateway_ledger (
    id              bigserial      PRIMARY KEY,
    idempotency_key varchar(64)    NOT NULL,
    order_id        varchar(64)    NOT NULL,
    amount          numeric(19, 2) NOT NULL,
    currency        char(3)        NOT NULL,
    created_at      timestamptz    NOT NULL DEFAULT now(),
    CONSTRAINT gateway_ledger_idempotency_key_uq UNIQUE (idempotency_key)
);

CREATE INDEX gateway_ledger_order_id_idx ON gateway_ledger (order_id);

-- The application's record of a charge the gateway made, written after the gateway answered, in the transaction that
-- also records the idempotency key as SUCCEEDED. A charge whose request died after the gateway call is recorded later
-- by the stale-claim resolver, outside any request: the unique gateway_charge_id makes both writers idempotent
-- (INSERT ... ON CONFLICT (gateway_charge_id) DO NOTHING), so one gateway charge is never recorded twice.
-- No foreign key to gateway_ledger: that table belongs to another system.
CREATE TABLE charges (
    id                bigserial      PRIMARY KEY,
    order_id          varchar(64)    NOT NULL,
    amount            numeric(19, 2) NOT NULL,
    currency          char(3)        NOT NULL,
    payer             varchar(255)   NOT NULL,   -- the caller, '' when anonymous (the starter's key namespace)
    gateway_charge_id bigint         NOT NULL,   -- the gateway's id of the charge (its ledger entry)
    created_at        timestamptz    NOT NULL DEFAULT now(),
    CONSTRAINT charges_gateway_charge_id_uq UNIQUE (gateway_charge_id)
);

CREATE INDEX charges_order_id_idx ON charges (order_id);

-- One row per consultation of the stale-claim resolver (GatewayChargeResolver): which claim, what the gateway said,
-- and who asked — a retry of the request or the background sweeper. For operators, and for the tests, which count
-- the rows to prove that a stale claim is resolved once.
CREATE TABLE charge_resolutions (
    id                bigserial   PRIMARY KEY,
    caller            text        NOT NULL,
    idempotency_key   text        NOT NULL,   -- the client's key
    downstream_key    text        NOT NULL,   -- the key the gateway was (or would have been) sent
    decision          text        NOT NULL,
    resolved_by       text        NOT NULL,
    gateway_charge_id bigint,                 -- the charge the gateway has under the downstream key, if any
    created_at        timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT charge_resolutions_decision_check CHECK (decision IN ('complete', 'rerun', 'error')),
    CONSTRAINT charge_resolutions_resolved_by_check CHECK (resolved_by IN ('retry', 'sweeper'))
);

CREATE INDEX charge_resolutions_key_idx ON charge_resolutions (idempotency_key);
