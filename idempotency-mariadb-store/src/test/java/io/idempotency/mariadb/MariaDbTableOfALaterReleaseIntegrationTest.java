package io.idempotency.mariadb;

import com.zaxxer.hikari.HikariDataSource;
import io.idempotency.core.ClaimRequest;
import io.idempotency.core.ClaimResult;
import io.idempotency.core.IdempotencyRecord;
import io.idempotency.core.IdempotencyStore;
import io.idempotency.core.RecordStatus;
import io.idempotency.core.ScopedKey;
import io.idempotency.core.StoredResponse;
import io.idempotency.spring.IdempotencyAutoConfiguration;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.condition.EnabledIf;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;
import org.springframework.boot.autoconfigure.AutoConfigurations;
import org.springframework.boot.test.context.runner.ApplicationContextRunner;
import org.springframework.jdbc.core.JdbcTemplate;
import org.springframework.jdbc.datasource.DataSourceTransactionManager;
import org.springframework.transaction.PlatformTransactionManager;
import org.springframework.transaction.support.TransactionTemplate;

import javax.sql.DataSource;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.List;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/**
 * The MariaDB store's table comes from the application's migrations, and a later release of the library may change it
 * (its script, applied by those migrations as an {@code ALTER TABLE}) while instances of this release still run on it,
 * or restart on it after a rollback. A change the release before can live with — a column added with a default or left
 * nullable, a column widened, an index added — lets an instance of this release start (the startup check accepts the
 * table), replay the records made before the change, finish a claim made before it, and claim and complete new keys.
 * A column added {@code NOT NULL} without a default, which this release's claim leaves out, stops the start, naming it;
 * an instance already running fails every claim of a new key on it (strict SQL mode, MariaDB's default), while the
 * records already there are still replayed.
 */
@EnabledIf("io.idempotency.mariadb.TestMariaDb#available")
class MariaDbTableOfALaterReleaseIntegrationTest {

    private static final String TABLE = "idempotency_keys";
    private static final String HASH = "b".repeat(64);
    private static final StoredResponse ANSWER = new StoredResponse(201,
            List.of(new StoredResponse.Header("Location", "/orders/1")), "{\"id\":1}".getBytes(StandardCharsets.UTF_8));

    @ParameterizedTest(name = "{0}")
    @ValueSource(strings = {
            // a column added with a default
            "ADD COLUMN attempts int NOT NULL DEFAULT 0",
            // a column added without one, nullable
            "ADD COLUMN trace_id varchar(64) CHARACTER SET ascii",
            // columns widened
            "MODIFY status varchar(32) CHARACTER SET ascii NOT NULL,"
                    + " MODIFY request_hash varchar(128) CHARACTER SET ascii NOT NULL,"
                    + " MODIFY fencing_token varchar(64) CHARACTER SET ascii NOT NULL,"
                    + " MODIFY response_status bigint, MODIFY response_headers longtext CHARACTER SET utf8mb4",
            // an index added
            "ADD INDEX status_created_idx (status, created_at)"})
    void aTableALaterReleaseChangedSoThatThisOneCanFillItServesThisOne(String change) {
        TestMariaDb.Database database = TestMariaDb.newDatabase();
        try (HikariDataSource dataSource = database.dataSource(4)) {
            JdbcTemplate jdbc = new JdbcTemplate(dataSource);
            jdbc.execute(MariaDbIdempotencyStore.schema(TABLE));
            MariaDbIdempotencyStore store = new MariaDbIdempotencyStore(dataSource, TABLE);
            ScopedKey done = key("done");
            ScopedKey open = key("open");
            complete(store, dataSource, done, claim(store, dataSource, done, null));
            String openToken = claim(store, dataSource, open, Duration.ofMinutes(5)); // committed before its work

            jdbc.execute("ALTER TABLE " + TABLE + " " + change);

            application(database).run(context -> assertThat(context).as("starts on the changed table")
                    .hasNotFailed());

            ClaimResult retry = readCommitted(dataSource).execute(status -> store.claim(request(done, null)));
            assertThat(retry).as("a retry of a request completed before the change")
                    .isInstanceOf(ClaimResult.Existing.class);
            assertAnswered(((ClaimResult.Existing) retry).record());
            assertThat(store.complete(open, openToken, ANSWER)).as("a claim made before the change is finished")
                    .isTrue();
            assertAnswered(store.find(open).orElseThrow());

            ScopedKey fresh = key("new");
            complete(store, dataSource, fresh, claim(store, dataSource, fresh, null));
            assertAnswered(store.find(fresh).orElseThrow());
        }
    }

    @Test
    void aColumnALaterReleaseAddedThatThisOnesClaimCannotFillStopsItsStart() {
        TestMariaDb.Database database = TestMariaDb.newDatabase();
        try (HikariDataSource dataSource = database.dataSource(4)) {
            JdbcTemplate jdbc = new JdbcTemplate(dataSource);
            jdbc.execute(MariaDbIdempotencyStore.schema(TABLE));
            MariaDbIdempotencyStore store = new MariaDbIdempotencyStore(dataSource, TABLE);
            ScopedKey done = key("done");
            complete(store, dataSource, done, claim(store, dataSource, done, null));

            // MariaDB fills the rows there with the type's implicit value, and leaves the column without a default
            jdbc.execute("ALTER TABLE " + TABLE + " ADD COLUMN region varchar(16) CHARACTER SET ascii NOT NULL");

            application(database).run(context -> {
                assertThat(context).as("does not start").hasFailed();
                assertThat(context).getFailure().hasStackTraceContaining("region").hasStackTraceContaining("NOT NULL");
            });

            // an instance that started before the change: what the check keeps a starting one from
            assertThatThrownBy(() -> claim(store, dataSource, key("new"), null)).as("a claim of a new key")
                    .hasStackTraceContaining("region");
            ClaimResult retry = readCommitted(dataSource).execute(status -> store.claim(request(done, null)));
            assertThat(retry).as("a retry of a request completed before the change")
                    .isInstanceOf(ClaimResult.Existing.class);
            assertAnswered(((ClaimResult.Existing) retry).record());
        }
    }

    /**
     * An instance of this release starting on the table, on a pool of its own (the application closes it when it
     * stops).
     */
    private static ApplicationContextRunner application(TestMariaDb.Database database) {
        HikariDataSource pool = database.dataSource(2);
        return new ApplicationContextRunner()
                .withConfiguration(AutoConfigurations.of(IdempotencyAutoConfiguration.class))
                .withBean(DataSource.class, () -> pool)
                .withBean(PlatformTransactionManager.class, () -> new DataSourceTransactionManager(pool))
                .withBean(IdempotencyStore.class, () -> new MariaDbIdempotencyStore(pool, TABLE));
    }

    private static void assertAnswered(IdempotencyRecord record) {
        assertThat(record.status()).isEqualTo(RecordStatus.SUCCEEDED);
        assertThat(record.response().status()).isEqualTo(201);
        assertThat(record.response().body()).isEqualTo(ANSWER.body());
        assertThat(record.response().headers()).isEqualTo(ANSWER.headers());
    }

    private static ScopedKey key(String key) {
        return new ScopedKey("alice", "POST /orders", key);
    }

    private static ClaimRequest request(ScopedKey key, Duration lease) {
        return new ClaimRequest(key, HASH, Duration.ofDays(1), Duration.ofSeconds(1), lease);
    }

    /** A claim of a new key, committed, as the engine makes it (at READ COMMITTED); its fencing token. */
    private static String claim(MariaDbIdempotencyStore store, DataSource dataSource, ScopedKey key, Duration lease) {
        ClaimResult claimed = readCommitted(dataSource).execute(status -> store.claim(request(key, lease)));
        assertThat(claimed).isInstanceOf(ClaimResult.Claimed.class);
        return ((ClaimResult.Claimed) claimed).fencingToken();
    }

    private static void complete(MariaDbIdempotencyStore store, DataSource dataSource, ScopedKey key, String token) {
        Boolean completed = readCommitted(dataSource).execute(status -> store.complete(key, token, ANSWER));
        assertThat(completed).isTrue();
    }

    private static TransactionTemplate readCommitted(DataSource dataSource) {
        TransactionTemplate transaction = new TransactionTemplate(new DataSourceTransactionManager(dataSource));
        transaction.setIsolationLevel(TransactionTemplate.ISOLATION_READ_COMMITTED);
        return transaction;
    }
}
