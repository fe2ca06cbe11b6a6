package io.idempotency.sample.payment.gateway;

import org.springframework.jdbc.core.RowMapper;
import org.springframework.jdbc.core.simple.JdbcClient;
import org.springframework.stereotype.Repository;

import java.math.BigDecimal;
import java.time.OffsetDateTime;
import java.util.List;
import java.util.Optional;

/**
 * The fake gateway's ledger table, {@code gateway_ledger}. Only the gateway uses it. Its statements run outside any
 * transaction of the application (the gateway serves its own HTTP requests), so each one commits on its own, before
 * the gateway answers: a booked charge exists whatever happens to the caller afterwards.
 */
@Repository
public class GatewayLedger {

    private static final String COLUMNS = "id, idempotency_key, order_id, amount, currency, created_at";

    private static final RowMapper<LedgerEntry> ENTRY = (rs, rowNum) -> new LedgerEntry(
            rs.getLong("id"),
            rs.getString("idempotency_key"),
            rs.getString("order_id"),
            rs.getBigDecimal("amount").toPlainString(),
            rs.getString("currency"),
            rs.getObject("created_at", OffsetDateTime.class));

    private final JdbcClient jdbc;

    /** @param jdbc the client on the DataSource the sample shares with its fake gateway */
    public GatewayLedger(JdbcClient jdbc) {
        this.jdbc = jdbc;
    }

    /**
     * Books a charge under {@code key}, unless one is booked under it already. The unique index on the key
     * arbitrates concurrent calls: a second insert with the key waits for the first and then inserts nothing.
     *
     * @return the new entry, or empty when the key was booked before (read it with {@link #findByKey})
     */
    public Optional<LedgerEntry> insertUnlessBooked(String key, String orderId, BigDecimal amount, String currency) {
        return jdbc.sql("""
                        INSERT INTO gateway_ledger (idempotency_key, order_id, amount, currency)
                        VALUES (:key, :orderId, :amount, :currency)
                        ON CONFLICT (idempotency_key) DO NOTHING
                        RETURNING\s""" + COLUMNS)
                .param("key", key)
                .param("orderId", orderId)
                .param("amount", amount)
                .param("currency", currency)
                .query(ENTRY)
                .optional();
    }

    /** Logs a charge request, booked or not (table {@code gateway_calls}), so that calls can be counted. */
    public void logCall(String key, String orderId) {
        jdbc.sql("INSERT INTO gateway_calls (idempotency_key, order_id) VALUES (:key, :orderId)")
                .param("key", key)
                .param("orderId", orderId)
                .update();
    }

    /** The charge booked under {@code key}, if any. */
    public Optional<LedgerEntry> findByKey(String key) {
        return jdbc.sql("SELECT " + COLUMNS + " FROM gateway_ledger WHERE idempotency_key = :key")
                .param("key", key)
                .query(ENTRY)
                .optional();
    }

    /** The charges of one order, oldest first. */
    public List<LedgerEntry> findByOrderId(String orderId) {
        return jdbc.sql("SELECT " + COLUMNS + " FROM gateway_ledger WHERE order_id = :orderId ORDER BY id")
                .param("orderId", orderId)
                .query(ENTRY)
                .list();
    }
}
