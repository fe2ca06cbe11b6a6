package io.idempotency.spring;

import com.zaxxer.hikari.HikariDataSource;
import io.idempotency.core.DownstreamKeys;
import io.idempotency.core.IdempotencyStore;
import io.idempotency.core.ScopedKey;
import io.idempotency.core.StaleClaimResolver;
import io.idempotency.core.StaleClaimSweeper;
import io.idempotency.core.StoredResponse;
import io.idempotency.jdbc.PostgresIdempotencyStore;
import io.idempotency.jdbc.flyway.IdempotencySchemaMigrator;
import io.idempotency.testkit.TestPostgres;
import io.micrometer.core.instrument.simple.SimpleMeterRegistry;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.ExtendWith;
import org.springframework.boot.test.system.CapturedOutput;
import org.springframework.boot.test.system.OutputCaptureExtension;
import org.springframework.dao.DataAccessResourceFailureException;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.List;
import java.util.UUID;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatExceptionOfType;

/** The sweeper's schedule: what it logs, and what it does when the application stops. */
@ExtendWith(OutputCaptureExtension.class)
class StaleClaimSweepSchedulerTest {

    /** A resolver that cannot reach the gateway it asks. */
    private static final StaleClaimResolver UNREACHABLE_GATEWAY = claim -> {
        throw new IllegalStateException("gateway unreachable");
    };

    @Test
    void aResolverFailureIsLoggedWithTheClaimItWasAbout(CapturedOutput output) {
        TestPostgres.Database database = TestPostgres.newDatabase();
        try (HikariDataSource dataSource = database.dataSource(2)) {
            new IdempotencySchemaMigrator(dataSource, "idempotency_keys").migrate();
            insertStaleClaims(database, staleClaim("'alice'", "'POST /charges'", "'k-unreachable'"));
            StaleClaimSweepScheduler scheduler = scheduler(dataSource, UNREACHABLE_GATEWAY);

            StaleClaimSweeper.Sweep sweep = scheduler.sweepOnce();

            assertThat(sweep.unresolved()).singleElement().extracting(unresolved -> unresolved.error().getMessage())
                    .isEqualTo("gateway unreachable");
            // the operator must be able to find the record, and ask the third party about it, from the log alone
            assertThat(output).contains("The stale claim resolver failed", "gateway unreachable", "alice",
                    "POST /charges", "k-unreachable");
        }
    }

    @Test
    void aClaimWhoseKeyHoldsALineBreakIsLoggedOnOneLine(CapturedOutput output) {
        // a key given by an expression over the body, and a caller named by a token's claim, may hold any character:
        // logged as they are, a line break would start a line that looks like the application's own
        TestPostgres.Database database = TestPostgres.newDatabase();
        try (HikariDataSource dataSource = database.dataSource(2)) {
            new IdempotencySchemaMigrator(dataSource, "idempotency_keys").migrate();
            insertStaleClaims(database, staleClaim("E'mallory\\r\\nFORGED caller'", "'POST /callbacks'",
                    "E'evt-1\\nFORGED key \\u001b[31m'"));
            StaleClaimSweepScheduler scheduler = scheduler(dataSource, UNREACHABLE_GATEWAY);

            scheduler.sweepOnce();

            assertThat(output).contains("The stale claim resolver failed", "mallory\\r\\nFORGED caller",
                    "evt-1\\nFORGED key \\u001b[31m");
            assertThat(output.toString()).doesNotContain("\nFORGED", "\u001b");
        }
    }

    @Test
    void eachResolvedClaimIsLoggedWithItsIdentityAndWhatWasRecorded(CapturedOutput output) {
        TestPostgres.Database database = TestPostgres.newDatabase();
        try (HikariDataSource dataSource = database.dataSource(2)) {
            new IdempotencySchemaMigrator(dataSource, "idempotency_keys").migrate();
            // two intent-first claims whose holders died: the gateway knows the outcome of one, not of the other
            insertStaleClaims(database, staleClaim("'alice'", "'POST /charges'", "'k-charged'"),
                    staleClaim("'bob'", "'POST /refunds'", "'k-unknown'"));
            StaleClaimResolver gateway = claim -> claim.key().key().equals("k-charged")
                    ? StaleClaimResolver.Resolution.complete(new StoredResponse(201, List.of(),
                            "{\"charged\":true}".getBytes(StandardCharsets.UTF_8)))
                    : StaleClaimResolver.Resolution.fail();
            StaleClaimSweepScheduler scheduler = scheduler(dataSource, gateway);

            assertThat(scheduler.sweepOnce().resolved()).isEqualTo(2);

            // a payment team reconciles from the log which claims were completed and which were marked FAILED (a
            // retry then runs the request again, and the FAILED row is overwritten): the count alone does not say
            assertThat(output.getOut().lines().filter(line -> line.contains("k-charged")))
                    .singleElement().asString()
                    .contains("caller 'alice' on 'POST /charges' with key 'k-charged'", "completed")
                    .doesNotContain("charged\":true");
            assertThat(output.getOut().lines().filter(line -> line.contains("k-unknown")))
                    .singleElement().asString()
                    .contains("caller 'bob' on 'POST /refunds' with key 'k-unknown'", "marked FAILED");
            assertThat(output).contains("Resolved 2 stale idempotency claims: 1 completed, 1 marked failed");
            // the key sent downstream is derived with the application's secret: the log does not give it away
            assertThat(output).doesNotContain(new DownstreamKeys("secret").derive(new ScopedKey("alice",
                    "POST /charges", "k-charged")));
        }
    }

    /**
     * The sweeper's lease on a claim can run out while its resolver asks the third party (its renewals failed, the
     * process stalled), and a retry or another sweeper take the claim over: the fencing token then keeps the decision
     * out of the record, rightly, but a payment team reconciling from the log must learn that what the third party
     * told this sweeper was not what was recorded.
     */
    @Test
    void aDecisionKeptOutOfTheRecordByANewHolderIsLogged(CapturedOutput output) {
        TestPostgres.Database database = TestPostgres.newDatabase();
        try (HikariDataSource dataSource = database.dataSource(2)) {
            new IdempotencySchemaMigrator(dataSource, "idempotency_keys").migrate();
            insertStaleClaims(database, staleClaim("'alice'", "'POST /charges'", "'k-charged'"),
                    staleClaim("'bob'", "'POST /refunds'", "'k-unknown'"));
            StaleClaimResolver slowGateway = claim -> {
                // meanwhile, the sweeper's lease has run out and a retry has taken the claim over
                database.queryString("update idempotency_keys set fencing_token = gen_random_uuid() where"
                        + " idempotency_key = '" + claim.key().key() + "' returning 'taken over'");
                return claim.key().key().equals("k-charged")
                        ? StaleClaimResolver.Resolution.complete(new StoredResponse(201, List.of(),
                                "{\"charged\":true}".getBytes(StandardCharsets.UTF_8)))
                        : StaleClaimResolver.Resolution.fail();
            };
            SimpleMeterRegistry registry = new SimpleMeterRegistry();
            StaleClaimSweepScheduler scheduler = scheduler(dataSource, slowGateway,
                    new MicrometerIdempotencyMeters(registry));

            assertThat(scheduler.sweepOnce().resolved()).as("the new holders' outcomes stand").isZero();
            assertThat(registry.find("idempotency.sweeper.resolved").counters()).as("nothing this sweeper recorded")
                    .hasSize(2).allSatisfy(counter -> assertThat(counter.count()).isZero());

            assertThat(database.queryLong("select count(*) from idempotency_keys where status = 'PROCESSING'"))
                    .isEqualTo(2);
            assertThat(output.getOut().lines().filter(line -> line.contains("k-charged")))
                    .singleElement().asString()
                    .contains("decided to complete the claim of caller 'alice' on 'POST /charges' with key"
                            + " 'k-charged'", "not recorded", "taken over");
            assertThat(output.getOut().lines().filter(line -> line.contains("k-unknown")))
                    .singleElement().asString()
                    .contains("decided to mark FAILED the claim of caller 'bob' on 'POST /refunds' with key"
                            + " 'k-unknown'", "not recorded");
        }
    }

    @Test
    void claimsResolvedBeforeASweepFailsAreCountedAndLogged(CapturedOutput output) {
        TestPostgres.Database database = TestPostgres.newDatabase();
        try (HikariDataSource dataSource = database.dataSource(2)) {
            new IdempotencySchemaMigrator(dataSource, "idempotency_keys").migrate();
            String prefix = "k-" + UUID.randomUUID() + "-";
            // three intent-first claims whose holders died: their leases ran out, nobody retried
            database.queryString("insert into idempotency_keys (caller, scope, idempotency_key, status, request_hash,"
                    + " fencing_token, expires_at, locked_until) select 'alice', 'POST /charges', '" + prefix
                    + "' || i, 'PROCESSING', repeat('a', 64), gen_random_uuid(), now() + interval '1 day',"
                    + " now() - interval '1 second' from generate_series(1, 3) i");
            // the database goes away when the sweep takes the third claim over
            IdempotencyStore store = FailingStores.connectionRefusedAt(
                    new PostgresIdempotencyStore(dataSource, "idempotency_keys"), "takeOver", 3);
            AtomicInteger asked = new AtomicInteger();
            CompletableFuture<String> unanswered = new CompletableFuture<>();
            // the first claim is marked failed, the gateway cannot be asked about the second
            StaleClaimResolver gateway = claim -> {
                if (asked.incrementAndGet() == 1) {
                    return StaleClaimResolver.Resolution.fail();
                }
                unanswered.complete(claim.key().key());
                throw new IllegalStateException("gateway unreachable");
            };
            SimpleMeterRegistry registry = new SimpleMeterRegistry();
            StaleClaimSweepScheduler scheduler = new StaleClaimSweepScheduler(new StaleClaimSweeper(store, gateway,
                    new DownstreamKeys("secret"), Duration.ofMinutes(5), 100), Duration.ofHours(1),
                    new MicrometerIdempotencyMeters(registry));

            assertThatExceptionOfType(DataAccessResourceFailureException.class).isThrownBy(scheduler::sweepOnce);

            assertThat(database.queryLong("select count(*) from idempotency_keys where status = 'FAILED'"))
                    .isEqualTo(1);
            assertThat(registry.get("idempotency.sweeper.resolved").tag("outcome", "failed").counter().count())
                    .as("the claim marked failed is counted").isEqualTo(1.0);
            assertThat(registry.get("idempotency.sweeper.resolved").tag("outcome", "completed").counter()
                    .count()).isZero();
            assertThat(output).contains("Resolved 1 stale idempotency claims before the sweep failed");
            assertThat(output).contains("The stale claim resolver failed", "gateway unreachable",
                    unanswered.getNow("none"));
        }
    }

    @Test
    void stoppingDuringASweepTakesNoFurtherClaimOverHandsTheInterruptedOneBackAndWaitsForTheSweepToEnd(
            CapturedOutput output) throws Exception {
        TestPostgres.Database database = TestPostgres.newDatabase();
        try (HikariDataSource dataSource = database.dataSource(4)) {
            new IdempotencySchemaMigrator(dataSource, "idempotency_keys").migrate();
            // three intent-first claims whose holders died: their leases ran out, nobody retried
            for (String key : List.of("a", "b", "c")) {
                insertStaleClaims(database, staleClaim("''", "'POST /charges'", "'" + key + "'"));
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
                    + " and locked_until < now() and idempotency_key <> '" + asked + "'")).isEqualTo(2);
            // the one asked about is handed back: its lease, ended when the interrupted resolver failed, is not the
            // sweeper's five minutes
            assertThat(database.queryLong("select count(*) from idempotency_keys where idempotency_key = '" + asked
                    + "' and status = 'PROCESSING' and locked_until < now() + interval '1 second'")).isEqualTo(1);
            // and the log says so: an operator must not wait for a lease that was ended
            assertThat(output).contains("The stale claim resolver failed for the claim of caller '' on 'POST /charges'"
                    + " with key '" + asked + "'; the sweep was stopped, so the claim is handed back, for a retry or"
                    + " another sweeper to resolve at once");
            assertThat(output).doesNotContain("once the sweeper's lease on it has run out");
        }
    }

    /**
     * The schedule of a sweeper of the claims in {@code dataSource} that asks {@code resolver}; hourly, so that only
     * the test's own {@code sweepOnce()} sweeps.
     */
    private static StaleClaimSweepScheduler scheduler(HikariDataSource dataSource, StaleClaimResolver resolver) {
        return scheduler(dataSource, resolver, IdempotencyMeters.NONE);
    }

    private static StaleClaimSweepScheduler scheduler(HikariDataSource dataSource, StaleClaimResolver resolver,
                                                      IdempotencyMeters meters) {
        return new StaleClaimSweepScheduler(new StaleClaimSweeper(
                new PostgresIdempotencyStore(dataSource, "idempotency_keys"), resolver,
                new DownstreamKeys("secret"), Duration.ofMinutes(5), 100), Duration.ofHours(1), meters);
    }

    /**
     * The values of an intent-first claim of {@code caller} on {@code scope} with {@code key} (each an SQL literal)
     * whose holder died: its lease ran out, nobody retried.
     */
    private static String staleClaim(String caller, String scope, String key) {
        return "(" + caller + ", " + scope + ", " + key + ", 'PROCESSING', repeat('a', 64), gen_random_uuid(),"
                + " now() + interval '1 day', now() - interval '1 second')";
    }

    private static void insertStaleClaims(TestPostgres.Database database, String... claims) {
        database.queryString("insert into idempotency_keys (caller, scope, idempotency_key, status, request_hash,"
                + " fencing_token, expires_at, locked_until) values " + String.join(", ", claims));
    }

    /** Each claim's key and fencing token, in key order. */
    private static String tokens(TestPostgres.Database database) {
        return database.queryString("select string_agg(idempotency_key || '=' || fencing_token || ';', ''"
                + " order by idempotency_key) from idempotency_keys");
    }
}
