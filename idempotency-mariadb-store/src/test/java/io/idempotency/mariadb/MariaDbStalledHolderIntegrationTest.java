package io.idempotency.mariadb;

import com.zaxxer.hikari.HikariDataSource;
import io.idempotency.core.DownstreamKeys;
import io.idempotency.core.IdempotencyEngine;
import io.idempotency.core.IdempotencyTemplate;
import io.idempotency.core.ReplayCache;
import io.idempotency.core.ScopedKey;
import io.idempotency.core.StaleClaimResolver;
import io.idempotency.core.StoragePolicy;
import io.idempotency.jdbc.SpringTransactions;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.condition.EnabledIf;
import org.springframework.jdbc.core.JdbcTemplate;
import org.springframework.jdbc.datasource.DataSourceTransactionManager;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.UUID;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/**
 * A default-mode holder cut off from MariaDB inside its transaction (a cut network, a stalled process): nothing reaches
 * the server, which keeps the session, and its uncommitted claim holds the key until the session ends — after
 * {@code wait_timeout}, eight hours by default. MariaDB's {@code idle_write_transaction_timeout}, set for the
 * application's sessions, bounds it: the server ends the session, the claim and the writes roll back, and the retry
 * runs, once.
 */
@EnabledIf("io.idempotency.mariadb.TestMariaDb#available")
class MariaDbStalledHolderIntegrationTest {

    private static final byte[] INPUT = "order".getBytes(StandardCharsets.UTF_8);

    @Test
    void aStalledHoldersClaimHoldsTheKeyUntilTheServerEndsItsIdleTransaction() throws Exception {
        assertThat(retryAfterTheHolderStalled(null, Duration.ofSeconds(4)))
                .as("without a bound, the key stays held").isEqualTo(0);
        assertThat(retryAfterTheHolderStalled("SET SESSION idle_write_transaction_timeout = 2", Duration.ofSeconds(15)))
                .as("the retry ran once, and the stalled holder's order was not kept").isEqualTo(1);
    }

    /** The orders kept once the retry ran, or 0 if it was still told "in progress" after {@code atMost}. */
    private static int retryAfterTheHolderStalled(String initSql, Duration atMost) throws Exception {
        TestMariaDb.Database database = TestMariaDb.newDatabase();
        ScopedKey key = new ScopedKey("alice", "orders", UUID.randomUUID().toString());
        try (CommitProxy proxy = CommitProxy.in(database.url());
             HikariDataSource other = database.dataSource(2);
             HikariDataSource cutOff = database.dataSource(2, config -> {
                 config.setJdbcUrl(proxy.through(database.url()));
                 if (initSql != null) {
                     config.setConnectionInitSql(initSql);
                 }
             })) {
            JdbcTemplate jdbc = new JdbcTemplate(other);
            jdbc.execute(MariaDbIdempotencyStore.schema("idempotency_keys"));
            jdbc.execute("CREATE TABLE orders (id int AUTO_INCREMENT PRIMARY KEY, note varchar(20))");
            IdempotencyEngine holderEngine = engine(cutOff);
            IdempotencyEngine retryEngine = engine(other);
            CountDownLatch stalled = new CountDownLatch(1);
            JdbcTemplate holderJdbc = new JdbcTemplate(cutOff);
            CompletableFuture<?> holder = CompletableFuture.runAsync(() -> {
                try {
                    new IdempotencyTemplate(holderEngine).execute(key, INPUT, () -> {
                        holderJdbc.update("INSERT INTO orders (note) VALUES ('stalled')");
                        proxy.freeze();
                        stalled.countDown();
                        holderJdbc.update("INSERT INTO orders (note) VALUES ('stalled')");
                        return "made".getBytes(StandardCharsets.UTF_8);
                    });
                } catch (Exception e) {
                    throw new IllegalStateException(e);
                }
            });
            assertThat(stalled.await(10, TimeUnit.SECONDS)).isTrue();

            IdempotencyTemplate retry = new IdempotencyTemplate(retryEngine);
            long deadline = System.nanoTime() + atMost.toNanos();
            int orders = 0;
            while (System.nanoTime() < deadline) {
                try {
                    assertThat(retry.execute(key, INPUT, () -> {
                        jdbc.update("INSERT INTO orders (note) VALUES ('retry')");
                        return "made".getBytes(StandardCharsets.UTF_8);
                    }).replayed()).isFalse();
                    orders = jdbc.queryForObject("SELECT count(*) FROM orders", Integer.class);
                    break;
                } catch (IdempotencyTemplate.InProgressException e) {
                    Thread.sleep(200);
                }
            }
            proxy.close(); // the holder hears of it at last
            assertThatThrownBy(() -> holder.get(10, TimeUnit.SECONDS)).as("the holder's work was not kept")
                    .isInstanceOf(java.util.concurrent.ExecutionException.class);
            holderEngine.shutdown();
            retryEngine.shutdown();
            return orders;
        }
    }

    private static IdempotencyEngine engine(HikariDataSource dataSource) {
        return new IdempotencyEngine(new MariaDbIdempotencyStore(dataSource, "idempotency_keys"),
                new SpringTransactions(new DataSourceTransactionManager(dataSource)), StoragePolicy.DEFAULT,
                Duration.ofDays(1), Duration.ofMillis(500), StaleClaimResolver.RERUN, new DownstreamKeys("secret"),
                ReplayCache.NONE);
    }
}
