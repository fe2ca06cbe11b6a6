package io.idempotency.sample.payment;

import org.springframework.jdbc.core.simple.JdbcClient;
import org.springframework.stereotype.Repository;
import org.springframework.transaction.PlatformTransactionManager;
import org.springframework.transaction.TransactionDefinition;
import org.springframework.transaction.support.TransactionTemplate;

import java.time.Instant;
import java.time.OffsetDateTime;
import java.time.ZoneOffset;
import java.util.Optional;
import java.util.UUID;

/**
 * The table {@code charge_intents}: which request may charge an order for a payer, one at a time and once.
 *
 * <p>Every statement runs and commits in a transaction of its own, outside the request's: an intent must be visible to
 * every other request before the gateway is called, and must outlive a crash after the call, whatever happens to the
 * request's own transaction.
 */
@Repository
public class ChargeIntents {

    private static final int MAX_ATTEMPTS = 10;

    private final JdbcClient jdbc;
    private final TransactionTemplate ownTransaction;

    /**
     * @param jdbc         the client on the application's DataSource
     * @param transactions the transaction manager of that DataSource
     */
    public ChargeIntents(JdbcClient jdbc, PlatformTransactionManager transactions) {
        this.jdbc = jdbc;
        this.ownTransaction = new TransactionTemplate(transactions);
        this.ownTransaction.setPropagationBehavior(TransactionDefinition.PROPAGATION_REQUIRES_NEW);
        // hold() relies on READ COMMITTED, whatever the pool's default: a concurrent insert of the order waits for the
        // first one's commit, then its re-read sees it (under REPEATABLE READ the insert fails with a serialization
        // error instead)
        this.ownTransaction.setIsolationLevel(TransactionDefinition.ISOLATION_READ_COMMITTED);
    }

    /**
     * Who holds the order after {@link #hold}.
     *
     * @param downstreamKey the gateway key of the request that holds the order
     * @param takenNow      whether this call took it: no earlier attempt of that request held it, so none can have
     *                      called the gateway for it
     * @param attempt       this call's attempt, which holds the intent now when {@code downstreamKey} is its
     *                      request's: the one {@link #release} takes
     */
    public record Holder(String downstreamKey, boolean takenNow, UUID attempt) {
    }

    /**
     * Records the intent of the request whose gateway key is {@code downstreamKey} to charge the order, unless one is
     * recorded already, and returns who holds the order: {@code downstreamKey}, taken now or since an earlier attempt
     * of this request, or another request's key. An intent an earlier attempt of this request took is this attempt's
     * from now on: that attempt, late (its claim taken over by this one), releases nothing. A concurrent insert for the
     * same payer and order waits for the first one's commit and then inserts nothing. The intent that made the insert
     * do nothing may be released before the read that follows it (its charge declined): the order is free then, and
     * the insert is tried again.
     */
    public Holder hold(String payer, String orderId, String downstreamKey) {
        UUID attempt = UUID.randomUUID();
        return ownTransaction.execute(status -> {
            for (int tries = 1; ; tries++) {
                int inserted = jdbc.sql("""
                                INSERT INTO charge_intents (payer, order_id, downstream_key, attempt)
                                VALUES (:payer, :orderId, :downstreamKey, :attempt)
                                ON CONFLICT (payer, order_id) DO NOTHING""")
                        .param("payer", payer)
                        .param("orderId", orderId)
                        .param("downstreamKey", downstreamKey)
                        .param("attempt", attempt)
                        .update();
                if (inserted == 0) {
                    jdbc.sql("""
                                    UPDATE charge_intents SET attempt = :attempt
                                    WHERE payer = :payer AND order_id = :orderId AND downstream_key = :downstreamKey""")
                            .param("payer", payer)
                            .param("orderId", orderId)
                            .param("downstreamKey", downstreamKey)
                            .param("attempt", attempt)
                            .update();
                }
                Optional<String> holder = jdbc.sql("SELECT downstream_key FROM charge_intents WHERE payer = :payer"
                                + " AND order_id = :orderId")
                        .param("payer", payer)
                        .param("orderId", orderId)
                        .query(String.class)
                        .optional();
                if (holder.isPresent()) {
                    return new Holder(holder.get(), inserted == 1, attempt);
                }
                if (tries == MAX_ATTEMPTS) {
                    throw new IllegalStateException("the order " + orderId + " was held and released again "
                            + MAX_ATTEMPTS + " times while this request tried to hold it");
                }
            }
        });
    }

    /**
     * Whether the gateway key {@code downstreamKey} holds an order of the payer other than {@code orderId}: the key was
     * used for a charge of that order before, and its record has been deleted since (retention), so the gateway may
     * know the key by that charge, and would answer a charge of {@code orderId} under it with that one.
     */
    public boolean holdsAnotherOrder(String payer, String orderId, String downstreamKey) {
        return ownTransaction.execute(status -> jdbc.sql("""
                        SELECT EXISTS (SELECT 1 FROM charge_intents
                                       WHERE downstream_key = :downstreamKey AND payer = :payer
                                         AND order_id <> :orderId)""")
                .param("downstreamKey", downstreamKey)
                .param("payer", payer)
                .param("orderId", orderId)
                .query(Boolean.class)
                .single());
    }

    /**
     * For the stale-claim resolver: removes the intents that the gateway key {@code downstreamKey} took for orders of
     * the payer other than {@code bookedOrderId} since {@code since} (the claim was made), and says how many there
     * were. Such an intent was taken by an attempt of the claim's request (no other request runs under the key while its
     * record exists), which was therefore sent for another order than the one the gateway booked under the key; and it
     * holds nothing: the gateway knows the key by that booking, so whatever was sent under it for another order was
     * answered with that booking, and charged nothing.
     */
    public int releaseOtherOrdersTakenSince(String payer, String downstreamKey, String bookedOrderId, Instant since) {
        Integer released = ownTransaction.execute(status -> jdbc.sql("""
                        DELETE FROM charge_intents
                        WHERE downstream_key = :downstreamKey AND payer = :payer AND order_id <> :bookedOrderId
                          AND created_at >= :since""")
                .param("downstreamKey", downstreamKey)
                .param("payer", payer)
                .param("bookedOrderId", bookedOrderId)
                .param("since", OffsetDateTime.ofInstant(since, ZoneOffset.UTC))
                .update());
        return released == null ? 0 : released;
    }

    /**
     * Removes the intent {@code holder} names for the payer's order, if its attempt still holds it: for an attempt that
     * certainly charged nothing, so that the order can be paid under another key. An intent a later attempt of the
     * same request holds now stays: that attempt may have charged the order (the gateway knows the request's key). So
     * does another order the same key holds (its earlier use, see {@link #holdsAnotherOrder}).
     */
    public void release(String payer, String orderId, Holder holder) {
        ownTransaction.executeWithoutResult(status -> jdbc.sql("""
                        DELETE FROM charge_intents
                        WHERE payer = :payer AND order_id = :orderId AND downstream_key = :downstreamKey
                          AND attempt = :attempt""")
                .param("payer", payer)
                .param("orderId", orderId)
                .param("downstreamKey", holder.downstreamKey())
                .param("attempt", holder.attempt())
                .update());
    }
}
