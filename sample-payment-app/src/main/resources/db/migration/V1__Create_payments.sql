-- The sample's business table. Amounts are exact decimals; the currency is an ISO 4217 code.
-- There is deliberately no unique index on order_id: one order may be paid in several parts, and duplicates
-- must be prevented by the idempotency key, which is what this sample demonstrates.
CREATE TABLE payments (
    id         bigserial      PRIMARY KEY,
    order_id   varchar(64)    NOT NULL,
    amount     numeric(19, 2) NOT NULL,
    currency   char(3)        NOT NULL,
    created_at timestamptz    NOT NULL DEFAULT now()
);

CREATE INDEX payments_order_id_idx ON payments (order_id);

-- An audit trail of payments. The foreign key is checked only at COMMIT (deferred), which lets the fault
-- injection "fail-at-commit" produce a failure that the database raises at commit time, after the handler has
-- returned normally: a row pointing to a payment that does not exist passes the INSERT and fails the COMMIT
-- with SQLSTATE 23503.
CREATE TABLE payment_audit (
    id         bigserial   PRIMARY KEY,
    payment_id bigint      NOT NULL,
    event      varchar(32) NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT payment_audit_payment_fk FOREIGN KEY (payment_id) REFERENCES payments (id)
        DEFERRABLE INITIALLY DEFERRED
);

CREATE INDEX payment_audit_payment_id_idx ON payment_audit (payment_id);
