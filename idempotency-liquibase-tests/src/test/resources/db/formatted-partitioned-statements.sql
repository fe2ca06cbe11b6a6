--liquibase formatted sql

--changeset shop:orders
CREATE TABLE orders (id bigserial PRIMARY KEY, reference varchar(64) NOT NULL UNIQUE);

--changeset shop:idempotency-keys
-- Idempotency records for PostgreSQL 14 and later, partitioned by creation time so that old records go by
-- dropping whole partitions. Shipped as-is for teams that apply schemas themselves; the starter's Flyway migration
-- runs this same file when idempotency.retention.cleanup.mode=drop-partitions, with the table name replaced when
-- idempotency.jdbc.table-name is set.
--
-- PostgreSQL refuses a unique index that leaves out the partition key, so the primary key includes created_at and
-- would let one key exist once per partition. The store therefore never relies on it alone: a claim first takes a
-- transaction-scoped advisory lock on the key, then looks the key up across all partitions, and inserts only if it
-- is absent (see PartitionedPostgresIdempotencyStore). Partitions are created ahead of time and attached, and old
-- ones detached concurrently, by PostgresPartitionMaintenance: neither ever makes a claim wait.

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
    CONSTRAINT idempotency_keys_pkey PRIMARY KEY (caller, scope, idempotency_key, created_at),
    CONSTRAINT idempotency_keys_status_check CHECK (status IN ('PROCESSING', 'SUCCEEDED', 'FAILED')),
    CONSTRAINT idempotency_keys_response_check CHECK ((status = 'SUCCEEDED') = (response_status IS NOT NULL))
) PARTITION BY RANGE (created_at);

CREATE INDEX idempotency_keys_expires_at_idx ON idempotency_keys (expires_at);

-- claims committed before their work, found by the sweeper when their lease ran out. Only leased claims are indexed,
-- so claims of the default mode (no lease) cost no entry here; and not by status, which would keep completing a claim
-- (PROCESSING -> SUCCEEDED) from being a HOT update.
CREATE INDEX idempotency_keys_locked_until_idx ON idempotency_keys (locked_until) WHERE locked_until IS NOT NULL;
