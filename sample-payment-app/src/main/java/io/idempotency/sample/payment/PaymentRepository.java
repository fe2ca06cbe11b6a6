package io.idempotency.sample.payment;

import org.springframework.jdbc.core.RowMapper;
import org.springframework.jdbc.core.simple.JdbcClient;
import org.springframework.stereotype.Repository;

import java.math.BigDecimal;
import java.time.OffsetDateTime;
import java.util.List;
import java.util.Optional;

/**
 * SQL access to the {@code payments} and {@code payment_audit} tables. Uses {@link JdbcClient}, so inside an
 * {@code @Idempotent} request every statement joins the transaction the starter opened, and commits or rolls back
 * together with the idempotency record.
 */
@Repository
public class PaymentRepository {

    private static final RowMapper<Payment> PAYMENT = (rs, rowNum) -> new Payment(
            rs.getLong("id"),
            rs.getString("order_id"),
            rs.getBigDecimal("amount").toPlainString(),
            rs.getString("currency"),
            rs.getObject("created_at", OffsetDateTime.class));

    private final JdbcClient jdbc;

    /** @param jdbc the client on the application's DataSource */
    public PaymentRepository(JdbcClient jdbc) {
        this.jdbc = jdbc;
    }

    /**
     * Inserts a payment that the second wall does not cover ({@code second_wall = false}): used while the wall is
     * switched off, so the same payer may pay the same order any number of times.
     *
     * @return the payment as stored (id and creation time from the database)
     */
    public Payment insert(String payer, String orderId, BigDecimal amount, String currency) {
        return jdbc.sql("""
                        INSERT INTO payments (payer, order_id, amount, currency, second_wall)
                        VALUES (:payer, :orderId, :amount, :currency, false)
                        RETURNING id, order_id, amount, currency, created_at""")
                .param("payer", payer)
                .param("orderId", orderId)
                .param("amount", amount)
                .param("currency", currency)
                .query(PAYMENT)
                .single();
    }

    /**
     * Inserts a payment covered by the second wall, unless the payer already has a covered payment for the order.
     *
     * <p>The conflict target names the partial unique index {@code payments_payer_order_uq}. When another
     * transaction has just inserted a payment for the same payer and order and not yet committed, this statement
     * waits for it: if it commits, nothing is inserted here; if it rolls back, the payment is inserted here.
     *
     * @return the payment as stored, or empty when the payer had already paid the order (nothing was written; read
     *         that payment with {@link #findCovered(String, String)})
     */
    public Optional<Payment> insertUnlessPaid(String payer, String orderId, BigDecimal amount, String currency) {
        return jdbc.sql("""
                        INSERT INTO payments (payer, order_id, amount, currency, second_wall)
                        VALUES (:payer, :orderId, :amount, :currency, true)
                        ON CONFLICT (payer, order_id) WHERE second_wall DO NOTHING
                        RETURNING id, order_id, amount, currency, created_at""")
                .param("payer", payer)
                .param("orderId", orderId)
                .param("amount", amount)
                .param("currency", currency)
                .query(PAYMENT)
                .optional();
    }

    /**
     * The payment of this payer for this order that the second wall covers, if any. Under READ COMMITTED (which the
     * starter's transactions use) this statement sees a payment that a concurrent transaction committed while
     * {@link #insertUnlessPaid} waited for it.
     */
    public Optional<Payment> findCovered(String payer, String orderId) {
        return jdbc.sql("""
                        SELECT id, order_id, amount, currency, created_at
                        FROM payments WHERE payer = :payer AND order_id = :orderId AND second_wall""")
                .param("payer", payer)
                .param("orderId", orderId)
                .query(PAYMENT)
                .optional();
    }

    /** The payment with this id, if it is this payer's: another payer's is as absent as one never made. */
    public Optional<Payment> findOf(String payer, long id) {
        return jdbc.sql("""
                        SELECT id, order_id, amount, currency, created_at
                        FROM payments WHERE id = :id AND payer = :payer""")
                .param("id", id)
                .param("payer", payer)
                .query(PAYMENT)
                .optional();
    }

    /** This payer's payments of one order, oldest first. */
    public List<Payment> findAllOf(String payer, String orderId) {
        return jdbc.sql("""
                        SELECT id, order_id, amount, currency, created_at
                        FROM payments WHERE payer = :payer AND order_id = :orderId ORDER BY id""")
                .param("payer", payer)
                .param("orderId", orderId)
                .query(PAYMENT)
                .list();
    }

    /**
     * Inserts an audit row. Its foreign key to {@code payments} is checked only at commit, so a row for a payment
     * that does not exist is accepted here and makes the surrounding transaction's commit fail (SQLSTATE 23503).
     */
    public void insertAudit(long paymentId, String event) {
        jdbc.sql("INSERT INTO payment_audit (payment_id, event) VALUES (:paymentId, :event)")
                .param("paymentId", paymentId)
                .param("event", event)
                .update();
    }
}
