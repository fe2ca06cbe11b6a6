package io.idempotency.sample.payment;

import org.springframework.jdbc.core.RowMapper;
import org.springframework.jdbc.core.simple.JdbcClient;
import org.springframework.stereotype.Repository;

import java.util.List;
import java.util.Optional;

/**
 * SQL access to {@code provider_payments} and {@code provider_events}. Inside an {@code @Idempotent} request every
 * statement joins the starter's transaction, and commits or rolls back with the idempotency record.
 */
@Repository
public class ProviderPaymentRepository {

    private static final RowMapper<ProviderPayment> PAYMENT = (rs, rowNum) -> new ProviderPayment(
            rs.getString("transaction_id"),
            rs.getString("order_id"),
            ProviderStatus.valueOf(rs.getString("status")),
            rs.getLong("version"));

    private final JdbcClient jdbc;

    /** @param jdbc the client on the application's DataSource */
    public ProviderPaymentRepository(JdbcClient jdbc) {
        this.jdbc = jdbc;
    }

    /**
     * Records the event's status if the payment is unknown here, or if the event is for the order recorded, newer
     * than the version recorded, and its status may directly follow the one recorded — in one statement, so that two
     * events of one payment delivered at once are applied one after the other, each judged against what the other
     * left.
     *
     * <p>When nothing changes, the statement still locks the payment's row (PostgreSQL locks the conflicting row of
     * {@code ON CONFLICT DO UPDATE} whether or not its {@code WHERE} holds): {@link #lockedState} then reads the state
     * the event was judged against, which no other transaction can change before this one ends.
     *
     * @return the payment as the event left it, or empty when the event changed nothing
     */
    public Optional<ProviderPayment> advance(ProviderNotification.Valid event) {
        List<String> predecessors = event.status().predecessors().stream().map(Enum::name).toList();
        // a status without predecessors (PENDING) only ever starts a payment: it follows nothing
        String mayFollow = predecessors.isEmpty() ? "false" : "provider_payments.status IN (:predecessors)";
        JdbcClient.StatementSpec statement = jdbc.sql("""
                        INSERT INTO provider_payments (transaction_id, order_id, status, version)
                        VALUES (:transactionId, :orderId, :status, :version)
                        ON CONFLICT (transaction_id) DO UPDATE
                            SET status = EXCLUDED.status, version = EXCLUDED.version, updated_at = now()
                            WHERE provider_payments.version < EXCLUDED.version
                              AND provider_payments.order_id = EXCLUDED.order_id AND %s
                        RETURNING transaction_id, order_id, status, version""".formatted(mayFollow))
                .param("transactionId", event.transactionId())
                .param("orderId", event.orderId())
                .param("status", event.status().name())
                .param("version", event.version());
        if (!predecessors.isEmpty()) {
            statement = statement.param("predecessors", predecessors);
        }
        return statement.query(PAYMENT).optional();
    }

    /** The payment's state, as locked by an {@link #advance} in this transaction that changed nothing. */
    public ProviderPayment lockedState(String transactionId) {
        return jdbc.sql("""
                        SELECT transaction_id, order_id, status, version FROM provider_payments
                        WHERE transaction_id = :transactionId""")
                .param("transactionId", transactionId)
                .query(PAYMENT)
                .single();
    }

    /**
     * Logs an acknowledged event with what was done about it. An event logged before (delivered again after its
     * idempotency record was deleted) keeps its first entry.
     */
    public void logEvent(ProviderNotification.Valid event, NotificationOutcome.Outcome outcome) {
        jdbc.sql("""
                        INSERT INTO provider_events (event_id, transaction_id, status, version, outcome)
                        VALUES (:eventId, :transactionId, :status, :version, :outcome)
                        ON CONFLICT (event_id) DO NOTHING""")
                .param("eventId", event.eventId())
                .param("transactionId", event.transactionId())
                .param("status", event.status().name())
                .param("version", event.version())
                .param("outcome", outcome.name())
                .update();
    }
}
