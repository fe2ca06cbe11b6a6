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

    /** Inserts a payment and returns it as stored (id and creation time from the database). */
    public Payment insert(String orderId, BigDecimal amount, String currency) {
        return jdbc.sql("""
                        INSERT INTO payments (order_id, amount, currency)
                        VALUES (:orderId, :amount, :currency)
                        RETURNING id, order_id, amount, currency, created_at""")
                .param("orderId", orderId)
                .param("amount", amount)
                .param("currency", currency)
                .query(PAYMENT)
                .single();
    }

    /** The payment with this id, if any. */
    public Optional<Payment> findById(long id) {
        return jdbc.sql("SELECT id, order_id, amount, currency, created_at FROM payments WHERE id = :id")
                .param("id", id)
                .query(PAYMENT)
                .optional();
    }

    /** The payments of one order, oldest first. */
    public List<Payment> findByOrderId(String orderId) {
        return jdbc.sql("""
                        SELECT id, order_id, amount, currency, created_at
                        FROM payments WHERE order_id = :orderId ORDER BY id""")
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
