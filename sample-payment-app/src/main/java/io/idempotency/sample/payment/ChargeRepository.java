package io.idempotency.sample.payment;

import org.springframework.jdbc.core.RowMapper;
import org.springframework.jdbc.core.simple.JdbcClient;
import org.springframework.stereotype.Repository;

import java.math.BigDecimal;
import java.time.OffsetDateTime;
import java.util.List;
import java.util.Optional;

/**
 * SQL access to {@code charges} and {@code charge_resolutions}. Through {@link JdbcClient}: inside a
 * {@code POST /charges} request the statements join the handler's transaction, which commits together with the
 * SUCCEEDED record; in the stale-claim resolver, which runs outside any request transaction, each statement commits on
 * its own.
 */
@Repository
public class ChargeRepository {

    private static final String COLUMNS = "id, order_id, amount, currency, gateway_charge_id, created_at";

    private static final RowMapper<Charge> CHARGE = (rs, rowNum) -> new Charge(
            rs.getLong("id"),
            rs.getString("order_id"),
            rs.getBigDecimal("amount").toPlainString(),
            rs.getString("currency"),
            rs.getLong("gateway_charge_id"),
            rs.getObject("created_at", OffsetDateTime.class));

    /** Who consulted the resolver, as recorded in {@code charge_resolutions.resolved_by}. */
    public enum ResolvedBy {
        /** A retry of the request found the claim stale and waits for the decision. */
        RETRY,
        /** The background sweeper found the claim stale; no request waits. */
        SWEEPER
    }

    private final JdbcClient jdbc;

    /** @param jdbc the client on the application's DataSource */
    public ChargeRepository(JdbcClient jdbc) {
        this.jdbc = jdbc;
    }

    /**
     * Records the charge the gateway made, once: a second call for the same gateway charge (the handler and the
     * resolver, or two resolutions) writes nothing and returns the row already recorded. When another transaction has
     * just recorded the same gateway charge and not committed yet, this waits for it; under READ COMMITTED the
     * following read sees its row once it committed.
     *
     * @return the charge as recorded (id and creation time from the database)
     */
    public Charge record(String payer, String orderId, BigDecimal amount, String currency, long gatewayChargeId) {
        Optional<Charge> inserted = jdbc.sql("""
                        INSERT INTO charges (order_id, amount, currency, payer, gateway_charge_id)
                        VALUES (:orderId, :amount, :currency, :payer, :gatewayChargeId)
                        ON CONFLICT (gateway_charge_id) DO NOTHING
                        RETURNING\s""" + COLUMNS)
                .param("orderId", orderId)
                .param("amount", amount)
                .param("currency", currency)
                .param("payer", payer)
                .param("gatewayChargeId", gatewayChargeId)
                .query(CHARGE)
                .optional();
        return inserted.orElseGet(() -> findByGatewayChargeId(gatewayChargeId).orElseThrow(() ->
                new IllegalStateException("gateway charge " + gatewayChargeId + " conflicted on insert but its"
                        + " charge cannot be read")));
    }

    /** The charge recorded for a gateway charge, if any. */
    public Optional<Charge> findByGatewayChargeId(long gatewayChargeId) {
        return jdbc.sql("SELECT " + COLUMNS + " FROM charges WHERE gateway_charge_id = :id")
                .param("id", gatewayChargeId)
                .query(CHARGE)
                .optional();
    }

    /** The latest charge recorded for this payer and order, if any. */
    public Optional<Charge> findLatestOf(String payer, String orderId) {
        return jdbc.sql("SELECT " + COLUMNS + " FROM charges WHERE payer = :payer AND order_id = :orderId"
                        + " ORDER BY id DESC LIMIT 1")
                .param("payer", payer)
                .param("orderId", orderId)
                .query(CHARGE)
                .optional();
    }

    /** The charge with this id, if it is this payer's: another payer's is as absent as one never made. */
    public Optional<Charge> findOf(String payer, long id) {
        return jdbc.sql("SELECT " + COLUMNS + " FROM charges WHERE id = :id AND payer = :payer")
                .param("id", id)
                .param("payer", payer)
                .query(CHARGE)
                .optional();
    }

    /** This payer's charges of one order, oldest first. */
    public List<Charge> findAllOf(String payer, String orderId) {
        return jdbc.sql("SELECT " + COLUMNS + " FROM charges WHERE payer = :payer AND order_id = :orderId"
                        + " ORDER BY id")
                .param("payer", payer)
                .param("orderId", orderId)
                .query(CHARGE)
                .list();
    }

    /**
     * Records one consultation of the stale-claim resolver.
     *
     * @param decision        {@code complete}, {@code rerun} or {@code error} (the gateway could not be asked)
     * @param gatewayChargeId the charge the gateway has under the downstream key, or null
     */
    public void recordResolution(String caller, String idempotencyKey, String downstreamKey, String decision,
                                 ResolvedBy resolvedBy, Long gatewayChargeId) {
        jdbc.sql("""
                        INSERT INTO charge_resolutions (caller, idempotency_key, downstream_key, decision, resolved_by,
                                                        gateway_charge_id)
                        VALUES (:caller, :key, :downstreamKey, :decision, :resolvedBy, :gatewayChargeId)""")
                .param("caller", caller)
                .param("key", idempotencyKey)
                .param("downstreamKey", downstreamKey)
                .param("decision", decision)
                .param("resolvedBy", resolvedBy.name().toLowerCase(java.util.Locale.ROOT))
                .param("gatewayChargeId", gatewayChargeId, java.sql.Types.BIGINT)
                .update();
    }
}
