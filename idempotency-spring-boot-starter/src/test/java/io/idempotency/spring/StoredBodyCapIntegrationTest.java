package io.idempotency.spring;

import io.idempotency.core.IdempotencyMode;
import io.idempotency.core.IdempotencyTemplate;
import io.idempotency.core.RequestFingerprint;
import io.idempotency.core.ScopedKey;
import io.idempotency.core.StaleClaimResolver;
import io.idempotency.core.StaleClaimSweeper;
import io.idempotency.core.StoredBodyTooLargeException;
import io.idempotency.core.StoredResponse;
import io.idempotency.testkit.TestPostgres;
import org.junit.jupiter.api.Test;
import org.springframework.boot.test.context.runner.ApplicationContextRunner;
import org.springframework.context.annotation.Bean;
import org.springframework.context.annotation.Configuration;
import org.springframework.jdbc.core.JdbcTemplate;

import javax.sql.DataSource;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.Arrays;
import java.util.List;
import java.util.UUID;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/**
 * {@code idempotency.max-stored-body-size} holds for every answer the library stores, not only for HTTP answers: the
 * result of {@link IdempotencyTemplate} work and the answer of a {@link StaleClaimResolver}, on the retry's path and
 * the sweeper's. A result above the cap is a clear error before anything is kept — the work's writes roll back, as an
 * HTTP answer above the cap does — and never a record that keeps more than the application said it would store.
 */
class StoredBodyCapIntegrationTest {

    private static final int CAP = 1024;
    private static final Duration LEASE = Duration.ofMinutes(5);

    @Test
    void aResultAboveTheCapIsRefusedAndNothingOfTheWorkIsKept() throws Exception {
        TestPostgres.Database database = databaseWithLedger();
        runner(database).run(context -> {
            assertThat(context).hasNotFailed();
            IdempotencyTemplate template = context.getBean(IdempotencyTemplate.class);
            JdbcTemplate jdbc = new JdbcTemplate(context.getBean(DataSource.class));
            ScopedKey key = new ScopedKey("", "ledger-listener", "msg-" + UUID.randomUUID());
            byte[] message = "booking-1".getBytes(StandardCharsets.UTF_8);

            assertThatThrownBy(() -> template.execute(key, message, () -> {
                jdbc.update("insert into ledger (message_id) values (?)", key.key());
                return bytes(CAP + 1);
            })).isInstanceOf(StoredBodyTooLargeException.class)
                    .hasMessageContaining("idempotency.max-stored-body-size")
                    .hasMessageContaining(String.valueOf(CAP + 1));

            assertThat(rows(database, key)).as("the work's writes were rolled back").isZero();
            assertThat(record(database, key)).as("no record was kept").isEqualTo("none");

            // the redelivery, whose work answers within the cap (exactly at it), runs and is stored
            IdempotencyTemplate.Result redelivered = template.execute(key, message, () -> {
                jdbc.update("insert into ledger (message_id) values (?)", key.key());
                return bytes(CAP);
            });
            assertThat(redelivered.replayed()).isFalse();
            assertThat(template.execute(key, message, () -> bytes(1)).value()).hasSize(CAP);
            assertThat(rows(database, key)).isEqualTo(1);
        });
    }

    @Test
    void anIntentFirstResultAboveTheCapLeavesTheClaimForTheResolver() throws Exception {
        TestPostgres.Database database = databaseWithLedger();
        runner(database).run(context -> {
            assertThat(context).hasNotFailed();
            IdempotencyTemplate template = context.getBean(IdempotencyTemplate.class);
            JdbcTemplate jdbc = new JdbcTemplate(context.getBean(DataSource.class));
            ScopedKey key = new ScopedKey("", "charges-listener", "msg-" + UUID.randomUUID());
            byte[] message = "charge-1".getBytes(StandardCharsets.UTF_8);

            assertThatThrownBy(() -> template.execute(key, message, IdempotencyMode.INTENT_FIRST, LEASE, () -> {
                jdbc.update("insert into ledger (message_id) values (?)", key.key());
                return bytes(CAP + 1); // after the external call: its outcome is known only to the third party
            })).isInstanceOf(StoredBodyTooLargeException.class)
                    .hasMessageContaining("idempotency.max-stored-body-size");

            assertThat(rows(database, key)).as("the local writes were rolled back").isZero();
            assertThat(record(database, key)).as("the claim stays for the resolver, nothing stored")
                    .isEqualTo("PROCESSING null");
            assertThatThrownBy(() -> template.execute(key, message, IdempotencyMode.INTENT_FIRST, LEASE,
                    () -> bytes(1))).isInstanceOf(IdempotencyTemplate.InProgressException.class);
        });
    }

    @Test
    void aResolverAnswerAboveTheCapIsNotStoredForTheRetryThatAsked() throws Exception {
        TestPostgres.Database database = databaseWithLedger();
        runner(database).run(context -> {
            assertThat(context).hasNotFailed();
            IdempotencyTemplate template = context.getBean(IdempotencyTemplate.class);
            ScopedKey key = new ScopedKey("", "charges-listener", "msg-" + UUID.randomUUID());
            byte[] message = "charge-1".getBytes(StandardCharsets.UTF_8);
            staleClaim(database, key, RequestFingerprint.of("EXECUTE", key.scope(), null, message));

            assertThatThrownBy(() -> template.execute(key, message, IdempotencyMode.INTENT_FIRST, LEASE,
                    () -> bytes(1))).isInstanceOf(StoredBodyTooLargeException.class)
                    .hasMessageContaining("idempotency.max-stored-body-size")
                    .hasMessageContaining(String.valueOf(CAP + 1));

            assertThat(record(database, key)).as("the claim stays for a later resolution, nothing stored")
                    .isEqualTo("PROCESSING null");
            assertThat(rows(database, key)).as("the work did not run").isZero();
        });
    }

    @Test
    void aResolverAnswerAboveTheCapIsNotStoredByTheSweeper() throws Exception {
        TestPostgres.Database database = databaseWithLedger();
        runner(database).run(context -> {
            assertThat(context).hasNotFailed();
            ScopedKey key = new ScopedKey("", "charges-listener", "msg-" + UUID.randomUUID());
            staleClaim(database, key, "a".repeat(64));

            StaleClaimSweeper.Sweep sweep = context.getBean(StaleClaimSweepScheduler.class).sweepOnce();

            assertThat(sweep.completed()).isZero();
            assertThat(sweep.unresolved()).singleElement()
                    .satisfies(unresolved -> assertThat(unresolved.key()).isEqualTo(key))
                    .extracting(StaleClaimSweeper.Unresolved::error)
                    .isInstanceOf(StoredBodyTooLargeException.class)
                    .extracting(Throwable::getMessage).asString()
                    .contains("idempotency.max-stored-body-size", String.valueOf(CAP + 1));
            assertThat(record(database, key)).as("the claim stays for a later resolution, nothing stored")
                    .isEqualTo("PROCESSING null");
        });
    }

    // ------------------------------------------------------------------------------------------------------------

    private static TestPostgres.Database databaseWithLedger() {
        TestPostgres.Database database = TestPostgres.newDatabase();
        database.queryString("create table ledger (id bigserial primary key, message_id text not null)");
        return database;
    }

    /** A non-web application with the starter, a cap of {@value #CAP} bytes, and a resolver that answers above it. */
    private static ApplicationContextRunner runner(TestPostgres.Database database) {
        return TestDatabases.nonWebRunner(database)
                .withUserConfiguration(ResolverConfig.class)
                .withPropertyValues("idempotency.max-stored-body-size=" + CAP + "B",
                        "idempotency.in-flight-wait=200ms", "idempotency.sweeper.interval=1h");
    }

    @Configuration(proxyBeanMethods = false)
    static class ResolverConfig {
        /** Finds the charge at the third party, whose answer is larger than the cap. */
        @Bean
        StaleClaimResolver chargeResolver() {
            return claim -> StaleClaimResolver.Resolution.complete(new StoredResponse(201, List.of(), bytes(CAP + 1)));
        }
    }

    /** A committed intent-first claim whose holder died: its lease has run out. */
    private static void staleClaim(TestPostgres.Database database, ScopedKey key, String requestHash) {
        database.queryString("insert into idempotency_keys (caller, scope, idempotency_key, status, request_hash,"
                + " fencing_token, expires_at, locked_until) values ('" + key.caller() + "', '" + key.scope() + "', '"
                + key.key() + "', 'PROCESSING', '" + requestHash + "', gen_random_uuid(), now() + interval '1 day',"
                + " now() - interval '1 second')");
    }

    /** The record's status and stored body length, or {@code none}. */
    private static String record(TestPostgres.Database database, ScopedKey key) {
        String found = database.queryString("select status || ' ' || coalesce(length(response_body)::text, 'null')"
                + " from idempotency_keys where scope = '" + key.scope() + "' and idempotency_key = '" + key.key()
                + "'");
        return found == null ? "none" : found;
    }

    private static long rows(TestPostgres.Database database, ScopedKey key) {
        return database.queryLong("select count(*) from ledger where message_id = '" + key.key() + "'");
    }

    private static byte[] bytes(int length) {
        byte[] bytes = new byte[length];
        Arrays.fill(bytes, (byte) 'x');
        return bytes;
    }
}
