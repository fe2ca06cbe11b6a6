-- The second wall: one payment per payer and order, enforced by the database, behind the idempotency key.
-- The idempotency record is deleted after its retention period; a request replayed after that runs again, and this
-- index is what keeps it from paying the order a second time (the app then answers 200 with the existing payment).
--
-- payer: the authenticated principal's name, '' for anonymous callers (the same namespace the starter uses for keys).
ALTER TABLE payments ADD COLUMN payer varchar(255) NOT NULL DEFAULT '';

-- second_wall: whether the row is covered by the unique index below. The app writes false while the wall is
-- switched off (sample.second-wall.enabled=false, for tests that count the idempotency layer's executions), so
-- switching it off needs no DDL, and switching it back on never fails on the duplicates written meanwhile.
-- Rows that exist before this migration are not covered either: V1 allowed several payments per order and recorded
-- no payer, so they may be duplicates by the new rule. Adding the column with DEFAULT false marks them (a catalogue
-- change in PostgreSQL 11+, no table rewrite); new rows default to covered.
ALTER TABLE payments ADD COLUMN second_wall boolean NOT NULL DEFAULT false;
ALTER TABLE payments ALTER COLUMN second_wall SET DEFAULT true;

-- Partial: only covered rows take part. INSERT ... ON CONFLICT (payer, order_id) WHERE second_wall DO NOTHING
-- infers this index, and a concurrent insert for the same payer and order waits for the first one's transaction
-- and then does nothing once it commits.
CREATE UNIQUE INDEX payments_payer_order_uq ON payments (payer, order_id) WHERE second_wall;
