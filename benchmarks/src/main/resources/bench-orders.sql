-- The benchmark's business table, in the connection's default schema. Read by the application under test
-- (BusinessSchema) and by pgbench/run, so that both measure the same table.
CREATE TABLE IF NOT EXISTS bench_orders (
    id          bigserial     PRIMARY KEY,
    reference   varchar(64)   NOT NULL,
    customer    varchar(64)   NOT NULL,
    amount      numeric(12,2) NOT NULL,
    currency    char(3)       NOT NULL,
    description varchar(200)  NOT NULL,
    created_at  timestamptz   NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS bench_orders_reference_idx ON bench_orders (reference);
