package io.idempotency.mariadb;

import com.zaxxer.hikari.HikariDataSource;
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
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.condition.EnabledIf;
import org.springframework.dao.DataAccessException;
import org.springframework.jdbc.core.JdbcTemplate;
import org.springframework.jdbc.datasource.DataSourceTransactionManager;

import java.nio.charset.StandardCharsets;
import java.sql.Connection;
import java.sql.Statement;
import java.time.Duration;
import java.util.UUID;
import java.util.concurrent.CyclicBarrier;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * In intent-first mode the claim was committed before the work's transaction, so nothing shows the library that
 * InnoDB rolled that transaction back as a deadlock's victim: work that carries on after the deadlock loses the writes
 * made before it, and those made after it commit with the answer, which is replayed — as docs/mariadb.md says.
 */
@EnabledIf("io.idempotency.mariadb.TestMariaDb#available")
class MariaDbIntentFirstDeadlockIntegrationTest {

    @Test
    void workCarryingOnAfterADeadlockKeepsOnlyTheWritesAfterItWithItsAnswer() throws Exception {
        TestMariaDb.Database database = TestMariaDb.newDatabase();
        try (HikariDataSource dataSource = database.dataSource(4)) {
            JdbcTemplate jdbc = new JdbcTemplate(dataSource);
            jdbc.execute(MariaDbIdempotencyStore.schema("idempotency_keys"));
            jdbc.execute("CREATE TABLE accounts (id int PRIMARY KEY, balance int NOT NULL)");
            jdbc.execute("CREATE TABLE audit (id int AUTO_INCREMENT PRIMARY KEY, note varchar(20))");
            jdbc.update("INSERT INTO accounts VALUES (1, 0), (2, 0)");
            IdempotencyEngine engine = new IdempotencyEngine(new MariaDbIdempotencyStore(dataSource,
                    "idempotency_keys"), new SpringTransactions(new DataSourceTransactionManager(dataSource)),
                    StoragePolicy.DEFAULT, Duration.ofDays(1), Duration.ofSeconds(1), StaleClaimResolver.RERUN,
                    new DownstreamKeys("secret"), ReplayCache.NONE);
            IdempotencyTemplate template = new IdempotencyTemplate(engine);
            ScopedKey key = new ScopedKey("alice", "transfers", UUID.randomUUID().toString());
            byte[] input = "transfer".getBytes(StandardCharsets.UTF_8);
            CyclicBarrier bothHoldTheirRow = new CyclicBarrier(2);
            AtomicBoolean deadlocked = new AtomicBoolean();
            ExecutorService other = Executors.newSingleThreadExecutor();
            IdempotencyTemplate.Result result;
            try {
                Future<?> heavier = other.submit(() -> {
                    try (Connection connection = dataSource.getConnection()) {
                        connection.setAutoCommit(false);
                        try (Statement statement = connection.createStatement()) {
                            for (int i = 0; i < 20; i++) {
                                statement.executeUpdate("INSERT INTO audit (note) VALUES ('other')");
                            }
                            statement.executeUpdate("UPDATE accounts SET balance = balance + 100 WHERE id = 2");
                            bothHoldTheirRow.await(10, TimeUnit.SECONDS);
                            statement.executeUpdate("UPDATE accounts SET balance = balance + 100 WHERE id = 1");
                        }
                        connection.commit();
                    }
                    return null;
                });
                result = template.execute(key, input, IdempotencyMode.INTENT_FIRST, Duration.ofSeconds(30), () -> {
                    jdbc.update("UPDATE accounts SET balance = balance + 1 WHERE id = 1");
                    bothHoldTheirRow.await(10, TimeUnit.SECONDS);
                    Thread.sleep(300);
                    try {
                        jdbc.update("UPDATE accounts SET balance = balance + 1 WHERE id = 2");
                    } catch (DataAccessException e) {
                        deadlocked.set(true);
                        jdbc.update("UPDATE accounts SET balance = balance + 1 WHERE id = 2");
                    }
                    return "done".getBytes(StandardCharsets.UTF_8);
                });
                heavier.get(10, TimeUnit.SECONDS);
            } finally {
                other.shutdownNow();
            }
            assertThat(deadlocked).isTrue();
            assertThat(result.replayed()).isFalse();
            assertThat(jdbc.queryForList("SELECT balance FROM accounts ORDER BY id", Integer.class))
                    .as("the write before the deadlock lost, the one after it kept").containsExactly(100, 101);
            assertThat(jdbc.queryForObject("SELECT status FROM idempotency_keys WHERE idempotency_key = ?",
                    String.class, key.key())).isEqualTo(RecordStatus.SUCCEEDED.name());
            assertThat(template.execute(key, input, IdempotencyMode.INTENT_FIRST, Duration.ofSeconds(30),
                    () -> "again".getBytes(StandardCharsets.UTF_8)).replayed()).isTrue();
            engine.shutdown();
        }
    }
}
