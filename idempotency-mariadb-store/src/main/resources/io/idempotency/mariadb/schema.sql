-- Idempotency records for MariaDB 10.6 and later (InnoDB). Apply it with the application's own migrations (Flyway,
-- Liquibase) or by hand, with the table name replaced when the store is given another one.
--
-- The key columns compare byte for byte (utf8mb4_nopad_bin): a case-insensitive or PAD SPACE collation would make
-- "Alice" and "alice", or "k" and "k ", one caller or one key. Times are UTC (UTC_TIMESTAMP), from the database's
-- clock, whatever the session's time zone. Index and constraint names belong to the table, so they do not repeat its
-- name (which may take all of MariaDB's 64 characters).

CREATE TABLE idempotency_keys (
    caller           varchar(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin NOT NULL,  -- '' when anonymous
    scope            varchar(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin NOT NULL,  -- e.g. 'POST /payments'
    idempotency_key  varchar(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin NOT NULL,  -- the key, as parsed
    status           varchar(16)  CHARACTER SET ascii NOT NULL,  -- PROCESSING, SUCCEEDED or FAILED
    request_hash     char(64)     CHARACTER SET ascii NOT NULL,  -- hex SHA-256 of the request that claimed the key
    fencing_token    char(36)     CHARACTER SET ascii NOT NULL,  -- identifies the current claim
    response_status  int,                                        -- the stored answer (SUCCEEDED only)
    response_headers mediumtext   CHARACTER SET utf8mb4,         -- 'Name: value' lines, allow-listed headers only
    response_body    longblob,
    created_at       datetime(6)  NOT NULL,                      -- UTC
    updated_at       datetime(6)  NOT NULL,                      -- UTC
    expires_at       datetime(6)  NOT NULL,                      -- UTC; cleanup may delete the record after this
    locked_until     datetime(6),                                -- UTC; end of the lease of a claim committed first
    PRIMARY KEY (caller, scope, idempotency_key),
    KEY expires_at_idx (expires_at),
    KEY locked_until_idx (locked_until),
    CONSTRAINT status_check CHECK (status IN ('PROCESSING', 'SUCCEEDED', 'FAILED')),
    CONSTRAINT response_check CHECK ((status = 'SUCCEEDED') = (response_status IS NOT NULL))
) ENGINE = InnoDB ROW_FORMAT = DYNAMIC;
