package io.idempotency.spring;

import com.zaxxer.hikari.HikariDataSource;
import io.idempotency.core.DownstreamKeys;
import io.idempotency.core.StaleClaimResolver;
import io.idempotency.core.StaleClaimSweeper;
import io.idempotency.jdbc.PostgresIdempotencyStore;
import io.idempotency.jdbc.flyway.IdempotencySchemaMigrator;
import io.idempotency.testkit.TestPostgres;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.ExtendWith;
import org.springframework.boot.test.system.CapturedOutput;
import org.springframework.boot.test.system.OutputCaptureExtension;

import java.time.Duration;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;

import static org.assertj.core.api.Assertions.assertThat;

/** The sweeper's schedule: what it logs, and what it does when the application stops. */
@ExtendWith(OutputCaptureExtension.class)
class StaleClaimSweepSchedulerTest {

    @Test
    void aResolverFailureIsLoggedWithTheClaimItWasAbout(CapturedOutput output) {
        TestPostgres.Database database = TestPostgres.newDatabase();
        try (HikariDataSource dataSource = database.dataSource(2)) {
            new IdempotencySchemaMigrator(dataSource, "idempotency_keys").migrate();
            database.queryString("insert into idempotency_keys (caller, scope, idempotency_key, status, request_hash,"
                    + " fencing_token, expires_at, locked_until) values ('alice', 'POST /charges', 'k-unreachable',"
                    + " 'PROCESSING', repeat('a', 64), gen_random_uuid(), now() + interval '1 day',"
                    + " now() - interval '1 second')");
            StaleClaimSweepScheduler scheduler = new StaleClaimSweepScheduler(new StaleClaimSweeper(
                    new PostgresIdempotencyStore(dataSource, "idempotency_keys"), claim -> {
                        throw new IllegalStateException("gateway unreachable");
                    }, new DownstreamKeys("secret"), Duration.ofMinutes(5), 100), Duration.ofHours(1),
                    IdempotencyMeters.NONE);

            StaleClaimSweeper.Sweep sweep = scheduler.sweepOnce();

            assertThat(sweep.unresolved()).singleElement().extracting(unresolved -> unresolved.error().getMessage())
                    .isEqualTo("gateway unreachable");
            // the operator must be able to find the record, and ask the third party about it, from the log alone
            assertThat(output).contains("The stale claim resolver failed", "gateway unreachable", "alice",
                    "POST /charges", "k-unreachable");
        }
    }

    @Test
    void stoppingDuringASweepTakesNoFurtherClaimOverAndWaitsForTheSweepToEnd() throws Exception {
        TestPostgres.Database database = TestPostgres.newDatabase();
        try (HikariDataSource dataSource = database.dataSource(4)) {
            new IdempotencySchemaMigrator(dataSource, "idempotency_keys").migrate();
            // three intent-first claims whose holders died: their leases ran out, nobody retried
            for (String key : List.of("a", "b", "c")) {
                database.queryString("insert into idempotency_keys (caller, scope, idempotency_key, status,"
                        + " request_hash, fencing_token, expires_at, locked_until) values ('', 'POST /charges', '"
                        + key + "', 'PROCESSING', repeat('a', 64), gen_random_uuid(), now() + interval '1 day',"
                        + " now() - interval '1 second')");
            }
            String tokensBefore = tokens(database);
            CompletableFuture<Thread> asking = new CompletableFuture<>();
            AtomicBoolean swept = new AtomicBoolean();
            CompletableFuture<String> askedAbout = new CompletableFuture<>();
            StaleClaimResolver slowGateway = claim -> {
                if (askedAbout.complete(claim.key().key())) {
                    asking.complete(Thread.currentThread());
                    try {
                        Thread.sleep(30_000); // asks a third party, slowly
                    } catch (InterruptedException e) {
                        Thread.currentThread().interrupt();
                        throw new IllegalStateException("interrupted while asking the gateway", e);
                    }
                }
                return StaleClaimResolver.Resolution.fail();
            };
            StaleClaimSweepScheduler scheduler = new StaleClaimSweepScheduler(new StaleClaimSweeper(
                    new PostgresIdempotencyStore(dataSource, "idempotency_keys"), slowGateway,
                    new DownstreamKeys("secret"), Duration.ofMinutes(5), 100), Duration.ofMillis(50),
                    new IdempotencyMeters() {
                        @Override
                        public void staleClaimsResolved(int completed, int failed) {
                            swept.set(true); // the last thing a sweep does
                        }
                    });
            scheduler.start();
            asking.get(10, TimeUnit.SECONDS);

            scheduler.stop(); // the application shuts down

            assertThat(swept).as("the sweep has ended when stop returns, before the pool closes").isTrue();
            String asked = askedAbout.get();
            assertThat(tokens(database).replaceAll(asked + "=[^;]*;", ""))
                    .as("the claims not yet looked at are left as they were, for the next sweep of any instance")
                    .isEqualTo(tokensBefore.replaceAll(asked + "=[^;]*;", ""));
            assertThat(database.queryLong("select count(*) from idempotency_keys where status = 'PROCESSING'"
                    + " and locked_until < now()")).isEqualTo(2);
        }
    }

    /** Each claim's key and fencing token, in key order. */
    private static String tokens(TestPostgres.Database database) {
        return database.queryString("select string_agg(idempotency_key || '=' || fencing_token || ';', ''"
                + " order by idempotency_key) from idempotency_keys");
    }
}
