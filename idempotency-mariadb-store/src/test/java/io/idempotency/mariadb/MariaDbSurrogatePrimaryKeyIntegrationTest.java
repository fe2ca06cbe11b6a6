package io.idempotency.mariadb;

import com.zaxxer.hikari.HikariDataSource;
import io.idempotency.core.ClaimRequest;
import io.idempotency.core.ClaimResult;
import io.idempotency.core.ScopedKey;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.condition.EnabledIf;
import org.springframework.jdbc.core.JdbcTemplate;
import org.springframework.jdbc.datasource.DataSourceTransactionManager;
import org.springframework.transaction.TransactionDefinition;
import org.springframework.transaction.support.TransactionTemplate;

import java.sql.Connection;
import java.sql.Statement;
import java.time.Duration;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/**
 * A table keyed by a surrogate id, its records' key a secondary unique key (the shape an ORM gives a table). InnoDB
 * checks an insert against a secondary unique key with next-key locks, at READ COMMITTED too: a claim of a key whose
 * earlier record was deleted (a released intent-first claim, a record cleanup removed) and not yet purged (purge
 * waits for the oldest open read view, a report's, a backup's) locks the gap before it, and the claim of any other key
 * falling in that gap is refused (error 1205) for as long as that claim's transaction runs — taken for a claim of its
 * own key, and answered "in progress" although no one holds it.
 */
@EnabledIf("io.idempotency.mariadb.TestMariaDb#available")
class MariaDbSurrogatePrimaryKeyIntegrationTest {

    private static final String HASH = "a".repeat(64);

    @Test
    void aTableWhoseRecordsAreNotKeyedByTheirKeyIsRefusedAtStartup() throws Exception {
        TestMariaDb.Database database = TestMariaDb.newDatabase();
        try (HikariDataSource dataSource = database.dataSource(4)) {
            JdbcTemplate jdbc = new JdbcTemplate(dataSource);
            jdbc.execute(MariaDbIdempotencyStore.schema("idempotency_keys").replace(
                    "PRIMARY KEY (caller, scope, idempotency_key),", "id bigint NOT NULL AUTO_INCREMENT PRIMARY KEY,"
                            + " UNIQUE KEY record_key (caller, scope, idempotency_key),"));
            MariaDbIdempotencyStore store = new MariaDbIdempotencyStore(dataSource, "idempotency_keys");
            ScopedKey released = new ScopedKey("", "POST /orders", "m");
            ScopedKey other = new ScopedKey("", "POST /orders", "b");

            try (Connection report = dataSource.getConnection()) {
                // a read view older than the release keeps its deleted record from being purged
                report.setAutoCommit(false);
                report.setTransactionIsolation(Connection.TRANSACTION_REPEATABLE_READ);
                try (Statement statement = report.createStatement()) {
                    statement.executeQuery("SELECT count(*) FROM idempotency_keys").close();
                }
                ClaimResult first = store.claim(new ClaimRequest(released, HASH, Duration.ofDays(1),
                        Duration.ofMillis(500), Duration.ofMinutes(1)));
                assertThat(first).isInstanceOf(ClaimResult.Claimed.class);
                assertThat(store.release(released, ((ClaimResult.Claimed) first).fencingToken())).isTrue();

                // the retry of the released request runs, its claim in its transaction
                TransactionTemplate transactions = new TransactionTemplate(new DataSourceTransactionManager(dataSource));
                transactions.setIsolationLevel(TransactionDefinition.ISOLATION_READ_COMMITTED);
                CountDownLatch claimed = new CountDownLatch(1);
                CountDownLatch done = new CountDownLatch(1);
                CompletableFuture<ClaimResult> retry = CompletableFuture.supplyAsync(() -> transactions.execute(s -> {
                    ClaimResult result = store.claim(new ClaimRequest(released, HASH, Duration.ofDays(1),
                            Duration.ofMillis(500)));
                    claimed.countDown();
                    try {
                        done.await(10, TimeUnit.SECONDS);
                    } catch (InterruptedException e) {
                        Thread.currentThread().interrupt();
                    }
                    return result;
                }));
                assertThat(claimed.await(10, TimeUnit.SECONDS)).isTrue();
                ClaimResult unrelated;
                try {
                    unrelated = store.claim(new ClaimRequest(other, HASH, Duration.ofDays(1), Duration.ofMillis(500)));
                } finally {
                    done.countDown();
                }
                assertThat(retry.get(10, TimeUnit.SECONDS)).isInstanceOf(ClaimResult.Claimed.class);
                assertThat(unrelated).as("what the check prevents: a key no one holds is answered 'in progress'")
                        .isInstanceOf(ClaimResult.Busy.class);
                report.rollback();
            }

            assertThatThrownBy(store::checkTable)
                    .isInstanceOf(IllegalStateException.class)
                    .hasMessageContaining("primary key")
                    .hasMessageContaining("(id)")
                    .hasMessageContaining("(caller, scope, idempotency_key)");
        }
    }
}
