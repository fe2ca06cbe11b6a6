--liquibase formatted sql

--changeset shop:orders
CREATE TABLE orders (id bigserial PRIMARY KEY, reference varchar(64) NOT NULL UNIQUE);

--changeset shop:idempotency-keys
-- Idempotency records for PostgreSQL 14 and later.
-- Shipped as-is for teams that apply schemas themselves (Liquibase, a DBA); the starter's Flyway migration runs
-- this same file, with the table name replaced when idempotency.jdbc.table-name is set.
-- The table lives in the connection's default schema (search_path).

CREATE TABLE idempotency_keys (
    caller           varchar(255) NOT NULL,  -- caller namespace (principal, tenant); '' when anonymous
    scope            varchar(255) NOT NULL,  -- the operation, e.g. 'POST /payments'
    idempotency_key  varchar(255) NOT NULL,  -- the client's key, as parsed
    status           varchar(16)  NOT NULL,  -- PROCESSING, SUCCEEDED or FAILED
    request_hash     char(64)     NOT NULL,  -- hex SHA-256 of the request that claimed the key
    fencing_token    uuid         NOT NULL,  -- identifies the current claim; only its holder may finish it
    response_status  integer,                -- the stored answer (SUCCEEDED only)
    response_headers text,                   -- 'Name: value' lines, allow-listed headers only
    response_body    bytea,
    created_at       timestamptz  NOT NULL DEFAULT now(),
    updated_at       timestamptz  NOT NULL DEFAULT now(),
    expires_at       timestamptz  NOT NULL,  -- cleanup may delete the record after this (database clock)
    locked_until     timestamptz,            -- end of the claim's lease, for claims committed before their work
    CONSTRAINT idempotency_keys_pkey PRIMARY KEY (caller, scope, idempotency_key),
    CONSTRAINT idempotency_keys_status_check CHECK (status IN ('PROCESSING', 'SUCCEEDED', 'FAILED')),
    CONSTRAINT idempotency_keys_response_check CHECK ((status = 'SUCCEEDED') = (response_status IS NOT NULL))
) WITH (fillfactor = 90);  -- room on each page, so that completing a claim can be a HOT update

CREATE INDEX idempotency_keys_expires_at_idx ON idempotency_keys (expires_at);

-- claims committed before their work, found by the sweeper when their lease ran out. Only leased claims are indexed,
-- so claims of the default mode (no lease) cost no entry here; and not by status, which would keep completing a claim
-- (PROCESSING -> SUCCEEDED) from being a HOT update.
CREATE INDEX idempotency_keys_locked_until_idx ON idempotency_keys (locked_until) WHERE locked_until IS NOT NULL;
