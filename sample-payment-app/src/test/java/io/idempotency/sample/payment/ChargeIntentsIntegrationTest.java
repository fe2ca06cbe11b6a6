package io.idempotency.sample.payment;

import com.zaxxer.hikari.HikariDataSource;
import io.idempotency.testkit.Async;
import io.idempotency.testkit.TestPostgres;
import org.junit.jupiter.api.Test;
import org.springframework.core.io.ClassPathResource;
import org.springframework.jdbc.core.JdbcTemplate;
import org.springframework.jdbc.core.simple.JdbcClient;
import org.springframework.jdbc.datasource.DataSourceTransactionManager;

import java.nio.charset.StandardCharsets;
import java.sql.Connection;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * {@link ChargeIntents} on PostgreSQL, at the moments between its statements.
 */
class ChargeIntentsIntegrationTest {

    private static final List<String> MIGRATIONS = List.of(
            "db/migration/V5__Charge_intents_one_charge_per_payer_and_order.sql",
            "db/migration/V7__Charge_intents_name_their_attempt.sql");
    private static final long PAUSE_LOCK = 4242;

    /**
     * A request whose intent insert finds the order held reads who holds it. The holder may release the order in
     * between (its charge was declined): the read then finds no intent, and the request was answered 500 although
     * the order was free. It now takes the order.
     */
    @Test
    void anIntentReleasedBetweenAnotherRequestsInsertAndReadLeavesTheOrderToThatRequest() throws Exception {
        TestPostgres.Database database = TestPostgres.newDatabase();
        try (HikariDataSource dataSource = database.dataSource(4)) {
            JdbcTemplate jdbc = migrated(dataSource);
            // after every insert statement, inserted or not, wait while the test holds the pause lock
            jdbc.execute("create function pause_after_insert() returns trigger language plpgsql as"
                    + " $$ begin perform pg_advisory_xact_lock_shared(" + PAUSE_LOCK + "); return null; end $$");
            jdbc.execute("create trigger pause_after_insert after insert on charge_intents"
                    + " for each statement execute function pause_after_insert()");
            ChargeIntents intents = new ChargeIntents(JdbcClient.create(dataSource),
                    new DataSourceTransactionManager(dataSource));

            ChargeIntents.Holder first = intents.hold("payer", "order-1", "key-a");
            assertThat(first.downstreamKey()).isEqualTo("key-a");
            assertThat(first.takenNow()).isTrue();
            try (Connection pause = dataSource.getConnection()) {
                pause.setAutoCommit(false);
                pause.createStatement().execute("select pg_advisory_xact_lock(" + PAUSE_LOCK + ")");
                CompletableFuture<ChargeIntents.Holder> second =
                        Async.supply(() -> intents.hold("payer", "order-1", "key-b"));
                // the second request's insert found key-a's intent, and waits before its read
                database.awaitLockWaiter(Duration.ofSeconds(10));
                intents.release("payer", "order-1", first);
                pause.commit();

                ChargeIntents.Holder taken = second.get(10, TimeUnit.SECONDS);
                assertThat(taken.downstreamKey()).as("the order, free again, taken by the second request")
                        .isEqualTo("key-b");
                assertThat(taken.takenNow()).isTrue();
            }
            assertThat(jdbc.queryForList("select downstream_key from charge_intents where order_id = 'order-1'",
                    String.class)).containsExactly("key-b");
        }
    }

    /**
     * An attempt holds the order; its claim goes stale (it stalls), and a retry of the same request takes the claim
     * over and runs it again: it finds the intent under the request's gateway key and charges the order. The first
     * attempt then resumes and cannot reach the gateway, the case where it releases the intent it took. Released by the
     * gateway key alone, the intent went, and a request under another key could charge the order a second time. The
     * late attempt releases nothing now; the retry, which holds the intent, still can.
     */
    @Test
    void anAttemptWhoseRequestRanAgainMeanwhileReleasesNothing() throws Exception {
        TestPostgres.Database database = TestPostgres.newDatabase();
        try (HikariDataSource dataSource = database.dataSource(2)) {
            JdbcTemplate jdbc = migrated(dataSource);
            ChargeIntents intents = new ChargeIntents(JdbcClient.create(dataSource),
                    new DataSourceTransactionManager(dataSource));

            ChargeIntents.Holder late = intents.hold("payer", "order-2", "key-a");
            ChargeIntents.Holder retry = intents.hold("payer", "order-2", "key-a");
            assertThat(late.takenNow()).isTrue();
            assertThat(retry.downstreamKey()).isEqualTo("key-a");
            assertThat(retry.takenNow()).as("found, as an earlier attempt's").isFalse();

            intents.release("payer", "order-2", late);

            assertThat(intents.hold("payer", "order-2", "key-b").downstreamKey())
                    .as("another key is still refused the order").isEqualTo("key-a");
            intents.release("payer", "order-2", retry);
            assertThat(jdbc.queryForObject("select count(*) from charge_intents where order_id = 'order-2'",
                    Long.class)).as("released by the attempt that holds it").isZero();
        }
    }

    private static JdbcTemplate migrated(HikariDataSource dataSource) throws java.io.IOException {
        JdbcTemplate jdbc = new JdbcTemplate(dataSource);
        for (String migration : MIGRATIONS) {
            jdbc.execute(new ClassPathResource(migration).getContentAsString(StandardCharsets.UTF_8));
        }
        return jdbc;
    }
}
