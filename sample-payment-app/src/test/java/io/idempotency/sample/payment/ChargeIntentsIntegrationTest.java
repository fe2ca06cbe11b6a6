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
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * {@link ChargeIntents} on PostgreSQL, at the moments between its statements.
 */
class ChargeIntentsIntegrationTest {

    private static final String MIGRATION = "db/migration/V5__Charge_intents_one_charge_per_payer_and_order.sql";
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
            JdbcTemplate jdbc = new JdbcTemplate(dataSource);
            jdbc.execute(new ClassPathResource(MIGRATION).getContentAsString(StandardCharsets.UTF_8));
            // after every insert statement, inserted or not, wait while the test holds the pause lock
            jdbc.execute("create function pause_after_insert() returns trigger language plpgsql as"
                    + " $$ begin perform pg_advisory_xact_lock_shared(" + PAUSE_LOCK + "); return null; end $$");
            jdbc.execute("create trigger pause_after_insert after insert on charge_intents"
                    + " for each statement execute function pause_after_insert()");
            ChargeIntents intents = new ChargeIntents(JdbcClient.create(dataSource),
                    new DataSourceTransactionManager(dataSource));

            assertThat(intents.hold("payer", "order-1", "key-a"))
                    .isEqualTo(new ChargeIntents.Holder("key-a", true));
            try (Connection pause = dataSource.getConnection()) {
                pause.setAutoCommit(false);
                pause.createStatement().execute("select pg_advisory_xact_lock(" + PAUSE_LOCK + ")");
                CompletableFuture<ChargeIntents.Holder> second =
                        Async.supply(() -> intents.hold("payer", "order-1", "key-b"));
                // the second request's insert found key-a's intent, and waits before its read
                database.awaitLockWaiter(Duration.ofSeconds(10));
                intents.release("payer", "order-1", "key-a");
                pause.commit();

                assertThat(second.get(10, TimeUnit.SECONDS)).as("the order, free again, taken by the second request")
                        .isEqualTo(new ChargeIntents.Holder("key-b", true));
            }
            assertThat(jdbc.queryForList("select downstream_key from charge_intents where order_id = 'order-1'",
                    String.class)).containsExactly("key-b");
        }
    }
}
