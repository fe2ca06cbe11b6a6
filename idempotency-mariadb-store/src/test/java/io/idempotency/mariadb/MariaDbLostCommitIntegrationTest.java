package io.idempotency.mariadb;

import com.zaxxer.hikari.HikariDataSource;
import io.idempotency.core.CommitFailedException;
import io.idempotency.core.DownstreamKeys;
import io.idempotency.core.IdempotencyEngine;
import io.idempotency.core.IdempotencyMode;
import io.idempotency.core.IdempotencyTemplate;
import io.idempotency.core.RecordStatus;
import io.idempotency.core.ReplayCache;
import io.idempotency.core.ScopedKey;
import io.idempotency.core.StaleClaimResolver;
import io.idempotency.core.StoragePolicy;
import io.idempotency.jdbc.SpringTransactions;
import io.idempotency.testkit.Await;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.condition.EnabledIf;
import org.springframework.jdbc.core.JdbcTemplate;
import org.springframework.jdbc.datasource.DataSourceTransactionManager;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.UUID;
import java.util.concurrent.Callable;
import java.util.concurrent.atomic.AtomicInteger;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/**
 * A connection to MariaDB lost at a COMMIT, before the server has it (it rolls the transaction back) or after it has
 * committed (the application never hears so), in both modes through {@link IdempotencyTemplate}: the work's effect
 * is kept once, nothing stays PROCESSING in the default mode, and the retry after the fault runs once or replays.
 */
@EnabledIf("io.idempotency.mariadb.TestMariaDb#available")
class MariaDbLostCommitIntegrationTest {

    private static final byte[] INPUT = "order".getBytes(StandardCharsets.UTF_8);

    @Test
    void aCommitWhoseAnswerIsLostIsReplayedToTheRetry() throws Exception {
        try (Setup setup = new Setup()) {
            setup.proxy.cutAtCommit(0, CommitProxy.Cut.AFTER_THE_SERVER_HAS_IT);
            assertThatThrownBy(() -> setup.template.execute(setup.key, INPUT, setup.work))
                    .isInstanceOfSatisfying(CommitFailedException.class,
                            failed -> assertThat(failed.outcomeUnknown()).as("the commit may have landed").isTrue());
            assertThat(setup.proxy.cuts()).isEqualTo(1);
            setup.awaitCommitted();

            IdempotencyTemplate.Result retried = setup.template.execute(setup.key, INPUT, setup.work);
            assertThat(retried.replayed()).isTrue();
            assertThat(setup.orders()).as("the order was made once").isEqualTo(1);
        }
    }

    @Test
    void aCommitThatNeverReachedTheServerLeavesNothingAndTheRetryRunsOnce() throws Exception {
        try (Setup setup = new Setup()) {
            setup.proxy.cutAtCommit(0, CommitProxy.Cut.BEFORE_THE_SERVER_HAS_IT);
            assertThatThrownBy(() -> setup.template.execute(setup.key, INPUT, setup.work))
                    .isInstanceOf(CommitFailedException.class);
            assertThat(setup.proxy.cuts()).isEqualTo(1);

            IdempotencyTemplate.Result retried = setup.template.execute(setup.key, INPUT, setup.work);
            assertThat(retried.replayed()).isFalse();
            assertThat(setup.orders()).as("the order was made once").isEqualTo(1);
            assertThat(setup.runs.get()).isEqualTo(2);
            assertThat(setup.status()).isEqualTo(RecordStatus.SUCCEEDED.name());
        }
    }

    @Test
    void anIntentFirstClaimWhoseCommitAnswerIsLostIsReleasedAndTheRetryRunsOnce() throws Exception {
        try (Setup setup = new Setup()) {
            setup.proxy.cutAtCommit(0, CommitProxy.Cut.AFTER_THE_SERVER_HAS_IT);
            assertThatThrownBy(() -> setup.intentFirst(Duration.ofSeconds(30)))
                    .isNotInstanceOf(CommitFailedException.class);
            assertThat(setup.proxy.cuts()).isEqualTo(1);
            assertThat(setup.runs.get()).as("the work did not run").isZero();

            IdempotencyTemplate.Result retried = setup.retryWhileInProgress(Duration.ofSeconds(30));
            assertThat(retried.replayed()).isFalse();
            assertThat(setup.orders()).isEqualTo(1);
            assertThat(setup.status()).isEqualTo(RecordStatus.SUCCEEDED.name());
        }
    }

    @Test
    void intentFirstWorkWhoseCommitAnswerIsLostIsReplayedToTheRetry() throws Exception {
        try (Setup setup = new Setup()) {
            setup.proxy.cutAtCommit(1, CommitProxy.Cut.AFTER_THE_SERVER_HAS_IT);
            assertThatThrownBy(() -> setup.intentFirst(Duration.ofSeconds(30)))
                    .isInstanceOfSatisfying(CommitFailedException.class,
                            failed -> assertThat(failed.outcomeUnknown()).isTrue());
            assertThat(setup.proxy.cuts()).isEqualTo(1);
            setup.awaitCommitted();

            IdempotencyTemplate.Result retried = setup.intentFirst(Duration.ofSeconds(30));
            assertThat(retried.replayed()).isTrue();
            assertThat(setup.orders()).isEqualTo(1);
        }
    }

    @Test
    void intentFirstWorkWhoseCommitNeverReachedTheServerRunsAgainOnceItsLeaseIsOver() throws Exception {
        try (Setup setup = new Setup()) {
            setup.proxy.cutAtCommit(1, CommitProxy.Cut.BEFORE_THE_SERVER_HAS_IT);
            assertThatThrownBy(() -> setup.intentFirst(Duration.ofSeconds(2)))
                    .isInstanceOf(CommitFailedException.class);
            assertThat(setup.proxy.cuts()).isEqualTo(1);
            assertThat(setup.status()).as("the claim stays for the resolver").isEqualTo("PROCESSING");

            IdempotencyTemplate.Result retried = setup.retryWhileInProgress(Duration.ofSeconds(30));
            assertThat(retried.replayed()).isFalse();
            assertThat(setup.orders()).isEqualTo(1);
            assertThat(setup.status()).isEqualTo(RecordStatus.SUCCEEDED.name());
        }
    }

    /** A database, a pool through the proxy, an engine and work that makes an order. */
    private static final class Setup implements AutoCloseable {

        final CommitProxy proxy;
        final HikariDataSource direct;
        final HikariDataSource proxied;
        final JdbcTemplate jdbc;
        final IdempotencyEngine engine;
        final IdempotencyTemplate template;
        final ScopedKey key = new ScopedKey("alice", "orders", UUID.randomUUID().toString());
        final AtomicInteger runs = new AtomicInteger();
        final Callable<byte[]> work;

        Setup() throws Exception {
            TestMariaDb.Database database = TestMariaDb.newDatabase();
            proxy = CommitProxy.in(database.url());
            direct = database.dataSource(2);
            jdbc = new JdbcTemplate(direct);
            jdbc.execute(MariaDbIdempotencyStore.schema("idempotency_keys"));
            jdbc.execute("CREATE TABLE orders (id int AUTO_INCREMENT PRIMARY KEY, note varchar(20))");
            proxied = database.dataSource(4, config -> {
                config.setJdbcUrl(proxy.through(database.url()));
                config.setConnectionTimeout(2000);
            });
            engine = new IdempotencyEngine(new MariaDbIdempotencyStore(proxied, "idempotency_keys"),
                    new SpringTransactions(new DataSourceTransactionManager(proxied)), StoragePolicy.DEFAULT,
                    Duration.ofDays(1), Duration.ofSeconds(1), StaleClaimResolver.RERUN, new DownstreamKeys("secret"),
                    ReplayCache.NONE);
            template = new IdempotencyTemplate(engine);
            JdbcTemplate proxiedJdbc = new JdbcTemplate(proxied);
            work = () -> {
                runs.incrementAndGet();
                proxiedJdbc.update("INSERT INTO orders (note) VALUES ('order')");
                return "made".getBytes(StandardCharsets.UTF_8);
            };
        }

        IdempotencyTemplate.Result intentFirst(Duration lease) throws Exception {
            return template.execute(key, INPUT, IdempotencyMode.INTENT_FIRST, lease, work);
        }

        /** The retry, sent again while it is told the key is in progress (a claim being released, a lease). */
        IdempotencyTemplate.Result retryWhileInProgress(Duration atMost) throws Exception {
            long deadline = System.nanoTime() + atMost.toNanos();
            while (true) {
                try {
                    return intentFirst(Duration.ofSeconds(30));
                } catch (IdempotencyTemplate.InProgressException e) {
                    if (System.nanoTime() > deadline) {
                        throw e;
                    }
                    Thread.sleep(100);
                }
            }
        }

        int orders() {
            return jdbc.queryForObject("SELECT count(*) FROM orders", Integer.class);
        }

        /**
         * Until the commit whose answer the proxy dropped is seen: the proxy passed it to the server and waited a
         * while before cutting the connection, which a loaded machine may not have used to commit.
         */
        void awaitCommitted() throws InterruptedException {
            Await.until("the server committed the record", Duration.ofSeconds(10),
                    () -> RecordStatus.SUCCEEDED.name().equals(status()));
        }

        String status() {
            return jdbc.queryForList("SELECT status FROM idempotency_keys WHERE idempotency_key = ?", String.class,
                    key.key()).stream().findFirst().orElse(null);
        }

        @Override
        public void close() throws Exception {
            engine.shutdown();
            proxied.close();
            direct.close();
            proxy.close();
        }
    }
}
