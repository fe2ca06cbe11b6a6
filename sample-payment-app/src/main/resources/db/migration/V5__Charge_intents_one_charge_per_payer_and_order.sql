-- The business wall of POST /charges: one charge per payer and order. A charge's local row is written after the
-- gateway took the money, too late to stop a second key for the same order; so before calling the gateway the handler
-- commits an intent here, under the primary key, holding the key it sends the gateway. A request for an order whose
-- intent holds another key does not call the gateway. An attempt that certainly charged nothing (a decline, no
-- connection, or a stale claim the resolver found nothing for) removes its intent.
--
-- payer: the caller the starter scopes keys by, '' when anonymous.
CREATE TABLE charge_intents (
    payer          varchar(255) NOT NULL,
    order_id       varchar(64)  NOT NULL,
    downstream_key varchar(64)  NOT NULL,
    created_at     timestamptz  NOT NULL DEFAULT now(),
    CONSTRAINT charge_intents_pk PRIMARY KEY (payer, order_id)
);

CREATE INDEX charge_intents_downstream_key_idx ON charge_intents (downstream_key);
