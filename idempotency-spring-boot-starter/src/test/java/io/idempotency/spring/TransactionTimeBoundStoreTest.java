package io.idempotency.spring;

import com.zaxxer.hikari.HikariDataSource;
import io.idempotency.core.ClaimRequest;
import io.idempotency.core.ClaimResult;
import io.idempotency.core.ScopedKey;
import io.idempotency.jdbc.PostgresIdempotencyStore;
import io.idempotency.jdbc.flyway.IdempotencySchemaMigrator;
import io.idempotency.testkit.Async;
import io.idempotency.testkit.TestPostgres;
import org.junit.jupiter.api.Test;
import org.springframework.jdbc.datasource.DataSourceTransactionManager;
import org.springframework.transaction.support.TransactionTemplate;

import java.time.Duration;
import java.util.UUID;
import java.util.concurrent.TimeUnit;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * The README's {@code idempotency.in-flight-wait}: within a transaction timeout, a duplicate waits at most half of what
 * is left of it for the request holding its key, on real PostgreSQL whose lock wait ends the claim.
 */
class TransactionTimeBoundStoreTest {

    @Test
    void withinATransactionTimeoutADuplicateWaitsHalfOfWhatIsLeftOfIt() throws Exception {
        TestPostgres.Database database = TestPostgres.newDatabase();
        try (HikariDataSource dataSource = database.dataSource(3)) {
            new IdempotencySchemaMigrator(dataSource, "idempotency_keys").migrate();
            TransactionTimeBoundStore store =
                    new TransactionTimeBoundStore(new PostgresIdempotencyStore(dataSource, "idempotency_keys"));
            DataSourceTransactionManager transactions = new DataSourceTransactionManager(dataSource);
            ScopedKey key = new ScopedKey("", "POST /orders", UUID.randomUUID().toString());
            TransactionTemplate holder = new TransactionTemplate(transactions);
            TransactionTemplate sixSeconds = new TransactionTemplate(transactions);
            sixSeconds.setTimeout(6);

            Duration[] took = new Duration[2];
            ClaimResult[] results = new ClaimResult[2];
            holder.executeWithoutResult(held -> {
                assertThat(store.claim(new ClaimRequest(key, "a".repeat(64), Duration.ofDays(1),
                        Duration.ofSeconds(1)))).isInstanceOf(ClaimResult.Claimed.class);
                try {
                    // a transaction of six seconds: half of it, not the whole in-flight wait of 20 s
                    Async.run(() -> sixSeconds.executeWithoutResult(status -> {
                        long started = System.nanoTime();
                        results[0] = store.claim(new ClaimRequest(key, "a".repeat(64), Duration.ofDays(1),
                                Duration.ofSeconds(20)));
                        took[0] = Duration.ofNanos(System.nanoTime() - started);
                    })).get(30, TimeUnit.SECONDS);
                    // an in-flight wait shorter than half the transaction's time is kept as it is
                    Async.run(() -> sixSeconds.executeWithoutResult(status -> {
                        long started = System.nanoTime();
                        results[1] = store.claim(new ClaimRequest(key, "a".repeat(64), Duration.ofDays(1),
                                Duration.ofMillis(500)));
                        took[1] = Duration.ofNanos(System.nanoTime() - started);
                    })).get(30, TimeUnit.SECONDS);
                } catch (Exception e) {
                    throw new IllegalStateException(e);
                }
            });

            assertThat(results[0]).as("in progress, answered before the transaction times out")
                    .isInstanceOf(ClaimResult.Busy.class);
            assertThat(took[0]).as("half of the six seconds left")
                    .isGreaterThan(Duration.ofMillis(2000)).isLessThan(Duration.ofMillis(5000));
            assertThat(results[1]).isInstanceOf(ClaimResult.Busy.class);
            assertThat(took[1]).as("the in-flight wait itself")
                    .isGreaterThanOrEqualTo(Duration.ofMillis(450)).isLessThan(Duration.ofMillis(2500));
        }
    }
}
