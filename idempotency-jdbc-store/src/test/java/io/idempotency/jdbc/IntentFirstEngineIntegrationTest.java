package io.idempotency.jdbc;

import com.zaxxer.hikari.HikariDataSource;
import io.idempotency.core.ClaimRequest;
import io.idempotency.core.ClaimResult;
import io.idempotency.core.DownstreamKeys;
import io.idempotency.core.IdempotencyEngine;
import io.idempotency.core.IdempotencyMode;
import io.idempotency.core.IdempotencyRecord;
import io.idempotency.core.IdempotencyTemplate;
import io.idempotency.core.RecordStatus;
import io.idempotency.core.ScopedKey;
import io.idempotency.core.StaleClaimResolver;
import io.idempotency.core.StaleClaimSweeper;
import io.idempotency.core.StaleClaimUndecidedException;
import io.idempotency.core.StoragePolicy;
import io.idempotency.core.StoredResponse;
import io.idempotency.core.Transactions;
import io.idempotency.jdbc.flyway.IdempotencySchemaMigrator;
import io.idempotency.testkit.Async;
import io.idempotency.testkit.Await;
import io.idempotency.testkit.TestPostgres;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;
import org.springframework.jdbc.core.JdbcTemplate;
import org.springframework.jdbc.datasource.DataSourceTransactionManager;
import org.springframework.transaction.support.TransactionSynchronization;
import org.springframework.transaction.support.TransactionSynchronizationManager;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.UUID;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.CyclicBarrier;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.logging.Handler;
import java.util.logging.Level;
import java.util.logging.LogRecord;
import java.util.logging.Logger;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * Claims committed before their work, on real PostgreSQL: stale claims are resolved exactly once, by a retry or by
 * one of several sweepers; lease and expiry decisions follow the database clock even when the JVM's is an hour off;
 * and the programmatic template runs work once per key. Tagged {@code engine}: the engine's behaviour over the store,
 * whose statements the store's own tests check on every PostgreSQL version the build runs; this runs on the configured
 * server only.
 */
@Tag("engine")
class IntentFirstEngineIntegrationTest {

    private static final String HASH = "9".repeat(64);
    private static final Duration DAY = Duration.ofDays(1);

    /**
     * A test that fails midway may leave its execution's transaction bound to the thread, and every later test on the
     * thread would then be refused as "a transaction is already active", hiding which one failed. So the thread is
     * left clean after each test, and the test that left something bound fails itself.
     */
    @AfterEach
    void leavesNoTransactionBoundToTheThread() {
        boolean synchronizing = TransactionSynchronizationManager.isSynchronizationActive();
        boolean active = TransactionSynchronizationManager.isActualTransactionActive();
        List<Object> resources = List.copyOf(TransactionSynchronizationManager.getResourceMap().keySet());
        if (synchronizing) {
            TransactionSynchronizationManager.clearSynchronization();
        }
        TransactionSynchronizationManager.clear();
        resources.forEach(TransactionSynchronizationManager::unbindResourceIfPossible);
        assertThat(synchronizing || active || !resources.isEmpty())
                .as("a transaction or a resource left bound to the test's thread").isFalse();
    }

    @Test
    void twoSweepersResolveAnAbandonedClaimOnceAndConsultTheResolverOnce() throws Exception {
        try (HikariDataSource dataSource = database(null)) {
            PostgresIdempotencyStore store = new PostgresIdempotencyStore(dataSource, "idempotency_keys");
            ScopedKey key = new ScopedKey("", "POST /charges", UUID.randomUUID().toString());
            leaveAStaleClaim(dataSource, store, key, Duration.ofMillis(200));

            AtomicInteger consulted = new AtomicInteger();
            StoredResponse charged = new StoredResponse(201, List.of(), "charged".getBytes(StandardCharsets.UTF_8));
            StaleClaimResolver resolver = claim -> {
                consulted.incrementAndGet();
                assertThat(claim.retryWaiting()).isFalse();
                assertThat(claim.downstreamKey()).isNotEqualTo(key.key());
                return StaleClaimResolver.Resolution.complete(charged);
            };
            ExecutorService executor = Executors.newFixedThreadPool(2);
            CyclicBarrier together = new CyclicBarrier(2);
            List<Future<StaleClaimSweeper.Sweep>> sweeps = new ArrayList<>();
            for (int instance = 0; instance < 2; instance++) {
                StaleClaimSweeper sweeper = new StaleClaimSweeper(store, resolver, new DownstreamKeys("secret"),
                        Duration.ofSeconds(30), 100);
                sweeps.add(executor.submit(() -> {
                    together.await();
                    return sweeper.sweep();
                }));
            }
            int resolved = 0;
            for (Future<StaleClaimSweeper.Sweep> sweep : sweeps) {
                resolved += sweep.get(30, TimeUnit.SECONDS).resolved();
            }
            executor.shutdownNow();

            assertThat(resolved).isEqualTo(1);
            assertThat(consulted).hasValue(1);
            assertThat(store.find(key).orElseThrow().status()).isEqualTo(RecordStatus.SUCCEEDED);
            assertThat(store.find(key).orElseThrow().response()).isEqualTo(charged);
        }
    }

    /**
     * The application stops (the sweep is interrupted) just as the resolver has its answer from the third party, while
     * every connection of the pool is in use for a moment (requests draining): the answer is recorded all the same once
     * a connection is free, not lost with the claim held by the sweeper until its lease runs out.
     */
    @Test
    void aResolversAnswerDespiteTheInterruptIsRecordedWhenThePoolIsBusyForAMoment() throws Exception {
        try (HikariDataSource dataSource = database(null)) {
            PostgresIdempotencyStore store = new PostgresIdempotencyStore(dataSource, "idempotency_keys");
            ScopedKey key = new ScopedKey("", "POST /charges", UUID.randomUUID().toString());
            leaveAStaleClaim(dataSource, store, key, Duration.ofMillis(200));
            StoredResponse charged = new StoredResponse(201, List.of(), "charged".getBytes(StandardCharsets.UTF_8));
            StaleClaimResolver answering = claim -> {
                busyForAMoment(dataSource);
                Thread.currentThread().interrupt(); // the application stops as the third party answers
                return StaleClaimResolver.Resolution.complete(charged);
            };
            StaleClaimSweeper sweeper = new StaleClaimSweeper(store, answering, new DownstreamKeys("secret"),
                    Duration.ofMinutes(1), 100);
            CompletableFuture<Object> swept = new CompletableFuture<>();
            CompletableFuture<Boolean> stillInterrupted = new CompletableFuture<>();
            Thread sweeping = new Thread(() -> {
                try {
                    swept.complete(sweeper.sweep());
                } catch (Throwable e) {
                    swept.complete(e);
                }
                stillInterrupted.complete(Thread.currentThread().isInterrupted());
            });
            sweeping.start();

            assertThat(swept.get(10, TimeUnit.SECONDS)).isInstanceOf(StaleClaimSweeper.Sweep.class)
                    .extracting(sweep -> ((StaleClaimSweeper.Sweep) sweep).completed()).isEqualTo(1);
            assertThat(stillInterrupted.get(10, TimeUnit.SECONDS)).as("the interrupt is kept").isTrue();
            assertThat(store.find(key).orElseThrow().status()).isEqualTo(RecordStatus.SUCCEEDED);
            assertThat(store.find(key).orElseThrow().response()).isEqualTo(charged);
        }
    }

    /**
     * As above, for a retry that asked the resolver about the stale claim: the answer is recorded and replayed to it,
     * not thrown away as a failure of the database, with the claim held under the retry's lease until it runs out.
     */
    @Test
    void aRetrysResolverAnswerDespiteTheInterruptIsRecordedWhenThePoolIsBusyForAMoment() throws Exception {
        try (HikariDataSource dataSource = database(null)) {
            PostgresIdempotencyStore store = new PostgresIdempotencyStore(dataSource, "idempotency_keys");
            ScopedKey key = new ScopedKey("", "POST /charges", UUID.randomUUID().toString());
            leaveAStaleClaim(dataSource, store, key, Duration.ofMillis(200));
            StoredResponse charged = new StoredResponse(201, List.of(), "charged".getBytes(StandardCharsets.UTF_8));
            IdempotencyEngine stopping = engine(dataSource, store, claim -> {
                busyForAMoment(dataSource);
                Thread.currentThread().interrupt(); // the server stops the request as the third party answers
                return StaleClaimResolver.Resolution.complete(charged);
            });
            CompletableFuture<Object> started = new CompletableFuture<>();
            Thread retry = new Thread(() -> {
                try {
                    started.complete(stopping.start(key, HASH, IdempotencyMode.INTENT_FIRST, Duration.ofMinutes(1)));
                } catch (Throwable e) {
                    started.complete(e);
                }
            });
            retry.start();

            assertThat(started.get(10, TimeUnit.SECONDS)).isEqualTo(new IdempotencyEngine.Replay(charged));
            assertThat(store.find(key).orElseThrow().status()).isEqualTo(RecordStatus.SUCCEEDED);
            stopping.shutdown();
        }
    }

    /**
     * As above, for a resolver that answers "fail": the claim is marked FAILED as it decided, and the retry runs its
     * request again, rather than being refused as if the database had failed (its FAILED mark left to the background).
     */
    @Test
    void aRetrysResolverFailDespiteTheInterruptIsRecordedWhenThePoolIsBusyForAMoment() throws Exception {
        try (HikariDataSource dataSource = database(null)) {
            PostgresIdempotencyStore store = new PostgresIdempotencyStore(dataSource, "idempotency_keys");
            ScopedKey key = new ScopedKey("", "POST /charges", UUID.randomUUID().toString());
            leaveAStaleClaim(dataSource, store, key, Duration.ofMillis(200));
            String staleToken = store.find(key).orElseThrow().fencingToken();
            IdempotencyEngine stopping = engine(dataSource, store, claim -> {
                busyForAMoment(dataSource);
                Thread.currentThread().interrupt(); // the server stops the request as the third party answers
                return StaleClaimResolver.Resolution.fail();
            });
            CompletableFuture<Object> started = new CompletableFuture<>();
            Thread retry = new Thread(() -> {
                try {
                    Object start = stopping.start(key, HASH, IdempotencyMode.INTENT_FIRST, Duration.ofMinutes(1));
                    Thread.interrupted(); // what the retry does with the interrupt is not this test's business
                    if (start instanceof IdempotencyEngine.Proceed proceed) {
                        proceed.execution().abandonUnrun();
                    }
                    started.complete(start);
                } catch (Throwable e) {
                    started.complete(e);
                }
            });
            retry.start();

            assertThat(started.get(10, TimeUnit.SECONDS)).as("the retry runs its request again")
                    .isInstanceOf(IdempotencyEngine.Proceed.class);
            assertThat(store.find(key).map(IdempotencyRecord::fencingToken)).as("the stale claim is no longer held")
                    .isNotEqualTo(java.util.Optional.of(staleToken));
            stopping.shutdown();
        }
    }

    /** Takes every connection of the pool {@code dataSource}, and gives them back 300 ms later. */
    private static void busyForAMoment(HikariDataSource dataSource) {
        List<java.sql.Connection> busy = new ArrayList<>();
        try {
            for (int i = 0; i < dataSource.getMaximumPoolSize(); i++) {
                busy.add(dataSource.getConnection());
            }
        } catch (java.sql.SQLException e) {
            throw new IllegalStateException(e);
        }
        Thread freeing = new Thread(() -> {
            try {
                Thread.sleep(300);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
            for (java.sql.Connection connection : busy) {
                try {
                    connection.close();
                } catch (java.sql.SQLException e) {
                    throw new IllegalStateException(e);
                }
            }
        });
        freeing.start();
    }

    @Test
    void aSweeperHoldsTheClaimWhileItsResolverIsSlowerThanTheLease() throws Exception {
        try (HikariDataSource dataSource = database(null)) {
            PostgresIdempotencyStore store = new PostgresIdempotencyStore(dataSource, "idempotency_keys");
            ScopedKey key = new ScopedKey("", "POST /charges", UUID.randomUUID().toString());
            leaveAStaleClaim(dataSource, store, key, Duration.ofMillis(200));
            // long enough that a renewal late by a busy machine's pause still comes in time
            Duration lease = Duration.ofMillis(1500);
            AtomicInteger consulted = new AtomicInteger();
            List<StaleClaimSweeper.Sweep> meanwhile = new ArrayList<>();
            StoredResponse charged = new StoredResponse(201, List.of(), "charged".getBytes(StandardCharsets.UTF_8));
            StaleClaimSweeper[] other = new StaleClaimSweeper[1];
            StaleClaimResolver slow = claim -> {
                if (consulted.incrementAndGet() == 1) {
                    try {
                        Thread.sleep(2 * lease.toMillis()); // asks a third party for longer than the lease
                    } catch (InterruptedException e) {
                        Thread.currentThread().interrupt();
                    }
                    meanwhile.add(other[0].sweep()); // another instance sweeps meanwhile
                }
                return StaleClaimResolver.Resolution.complete(charged);
            };
            other[0] = new StaleClaimSweeper(store, slow, new DownstreamKeys("secret"), lease, 100);

            StaleClaimSweeper.Sweep sweep = new StaleClaimSweeper(store, slow, new DownstreamKeys("secret"), lease,
                    100).sweep();

            assertThat(sweep.completed()).isEqualTo(1);
            assertThat(meanwhile).singleElement().extracting(StaleClaimSweeper.Sweep::found).isEqualTo(0);
            assertThat(consulted).as("the resolver is asked once").hasValue(1);
            assertThat(store.find(key).orElseThrow().response()).isEqualTo(charged);
        }
    }

    @Test
    void aResolverFailingForOneStaleClaimKeepsNoOtherWaiting() throws Exception {
        try (HikariDataSource dataSource = database(null)) {
            PostgresIdempotencyStore store = new PostgresIdempotencyStore(dataSource, "idempotency_keys");
            ScopedKey unanswerable = new ScopedKey("", "POST /charges", "unanswerable-" + UUID.randomUUID());
            ScopedKey answerable = new ScopedKey("", "POST /charges", "answerable-" + UUID.randomUUID());
            leaveStaleClaims(dataSource, store, List.of(unanswerable, answerable), Duration.ofMillis(200));
            RuntimeException unreachable = new IllegalStateException("the third party does not answer");
            StoredResponse charged = new StoredResponse(201, List.of(), "charged".getBytes(StandardCharsets.UTF_8));
            StaleClaimResolver resolver = claim -> {
                if (claim.key().equals(unanswerable)) {
                    throw unreachable;
                }
                return StaleClaimResolver.Resolution.complete(charged);
            };

            StaleClaimSweeper.Sweep sweep = new StaleClaimSweeper(store, resolver, new DownstreamKeys("secret"),
                    Duration.ofSeconds(30), 100).sweep();

            assertThat(sweep.unresolved()).containsExactly(new StaleClaimSweeper.Unresolved(unanswerable, unreachable));
            assertThat(store.find(answerable).orElseThrow().status()).isEqualTo(RecordStatus.SUCCEEDED);
            IdempotencyRecord held = store.find(unanswerable).orElseThrow();
            assertThat(held.status()).as("left for a later sweep").isEqualTo(RecordStatus.PROCESSING);
            assertThat(held.leaseExpired()).as("held by the sweeper meanwhile").isFalse();
        }
    }

    /**
     * An error thrown by the resolver for one claim (its third-party client's class failed to initialise, an assertion)
     * is a failure of the resolver like an exception: the sweep reports it and goes on with the other claims, instead of
     * ending with it and leaving them for a later sweep.
     */
    @ParameterizedTest
    @ValueSource(strings = {"error", "checked"})
    void aResolverErrorForOneStaleClaimKeepsNoOtherWaiting(String kind) throws Exception {
        try (HikariDataSource dataSource = database(null)) {
            PostgresIdempotencyStore store = new PostgresIdempotencyStore(dataSource, "idempotency_keys");
            IdempotencyEngine engine = engine(dataSource, store, StaleClaimResolver.RERUN);
            ScopedKey broken = new ScopedKey("", "POST /charges", "broken-" + UUID.randomUUID());
            ScopedKey answerable = new ScopedKey("", "POST /charges", "answerable-" + UUID.randomUUID());
            for (ScopedKey key : List.of(broken, answerable)) {
                ((IdempotencyEngine.Proceed) engine.start(key, HASH, IdempotencyMode.INTENT_FIRST,
                        Duration.ofMillis(200))).execution().abandon(); // crashed: the claims stay PROCESSING
                Thread.sleep(20); // the broken one's lease runs out first, so the sweep comes to it first
            }
            engine.shutdown();
            Thread.sleep(300);
            // a checked exception, as a resolver in Kotlin passes one on from the client it calls
            Throwable error = kind.equals("error") ? new AssertionError("the gateway client is misconfigured")
                    : new java.io.IOException("the gateway closed the connection");
            StoredResponse charged = new StoredResponse(201, List.of(), "charged".getBytes(StandardCharsets.UTF_8));
            StaleClaimResolver resolver = claim -> {
                if (claim.key().equals(broken)) {
                    IntentFirstEngineIntegrationTest.<RuntimeException>sneakyThrow(error);
                }
                return StaleClaimResolver.Resolution.complete(charged);
            };

            StaleClaimSweeper.Sweep sweep = new StaleClaimSweeper(store, resolver, new DownstreamKeys("secret"),
                    Duration.ofSeconds(30), 100).sweep();

            assertThat(sweep.unresolved()).singleElement().satisfies(unresolved -> {
                assertThat(unresolved.key()).isEqualTo(broken);
                assertThat((Object) unresolved.error()).isSameAs(error);
            });
            assertThat(store.find(answerable).orElseThrow().status()).isEqualTo(RecordStatus.SUCCEEDED);
            IdempotencyRecord held = store.find(broken).orElseThrow();
            assertThat(held.status()).as("left for a later sweep").isEqualTo(RecordStatus.PROCESSING);
            assertThat(held.leaseExpired()).as("held by the sweeper meanwhile").isFalse();
        }
    }

    /**
     * A FAILED claim stays with its request. A definite failure may have reached the third party (a decline), and the
     * sweeper's "rerun" (the default resolver, which asks nobody) does not know whether the charge happened: either way
     * the third party may hold something under the key's downstream key, which a request with another body would send
     * again. So only the same request runs again; another body is a mismatch, as for any other record.
     */
    @Test
    void aFailedClaimRunsAgainForItsOwnRequestOnlyAfterADefiniteFailureOrTheSweepersRerun() throws Exception {
        String other = "8".repeat(64);
        try (HikariDataSource dataSource = database(null)) {
            PostgresIdempotencyStore store = new PostgresIdempotencyStore(dataSource, "idempotency_keys");
            IdempotencyEngine engine = engine(dataSource, store, StaleClaimResolver.RERUN);
            ScopedKey declined = new ScopedKey("", "POST /charges", "declined-" + UUID.randomUUID());
            ScopedKey swept = new ScopedKey("", "POST /charges", "swept-" + UUID.randomUUID());
            ((IdempotencyEngine.Proceed) engine.start(declined, HASH, IdempotencyMode.INTENT_FIRST,
                    Duration.ofMinutes(5))).execution().abandonDefinitely();
            ((IdempotencyEngine.Proceed) engine.start(swept, HASH, IdempotencyMode.INTENT_FIRST,
                    Duration.ofMillis(200))).execution().abandon(); // unknown outcome: stays PROCESSING
            Thread.sleep(300);
            StaleClaimSweeper.Sweep sweep = new StaleClaimSweeper(store, StaleClaimResolver.RERUN,
                    new DownstreamKeys("secret"), Duration.ofSeconds(30), 100).sweep();
            assertThat(sweep.resolved()).isEqualTo(1);

            for (ScopedKey key : List.of(declined, swept)) {
                assertThat(store.find(key).orElseThrow().status()).isEqualTo(RecordStatus.FAILED);
                assertThat(engine.start(key, other, IdempotencyMode.INTENT_FIRST, Duration.ofMinutes(5)))
                        .as("another body under the key of " + key.key()).isInstanceOf(IdempotencyEngine.Mismatch.class);
                assertThat(store.find(key).orElseThrow().requestHash()).isEqualTo(HASH);

                IdempotencyEngine.Start again = engine.start(key, HASH, IdempotencyMode.INTENT_FIRST,
                        Duration.ofMinutes(5));
                assertThat(again).as("the same request again").isInstanceOf(IdempotencyEngine.Proceed.class);
                ((IdempotencyEngine.Proceed) again).execution().finish(new StoredResponse(201, List.of(), null));
                assertThat(store.find(key).orElseThrow().status()).isEqualTo(RecordStatus.SUCCEEDED);
            }
            engine.shutdown();
        }
    }

    /**
     * A resolver that answers null has not decided anything (a look-up written as {@code .orElse(null)}, say). Taking
     * that for "rerun" would run the work again without anyone having asked the third party, and the sweeper would
     * free the key for any request: it is a resolver failure, and the claim stays PROCESSING for a later resolution.
     */
    @Test
    void aResolverAnsweringNullDecidesNothingAndTheClaimStaysForALaterResolution() throws Exception {
        assertDecidesNothing(claim -> null, "null", "the retry is not run on a decision nobody made");
    }

    /**
     * A resolver that passes on what the third party answered may say "complete" with a 5xx (the gateway's own
     * "try again later"). Such an answer says nothing of what became of the work, and a handler's 5xx is never stored:
     * stored as SUCCEEDED, it would be replayed for as long as the record is kept. It is refused like a resolver
     * failure — by a retry and by the sweeper alike — and the claim stays PROCESSING for a later resolution.
     */
    @Test
    void aResolversCompleteAnswerWithAStatusThatIsNotStoredDecidesNothing() throws Exception {
        assertDecidesNothing(claim -> StaleClaimResolver.Resolution.complete(new StoredResponse(503, List.of(),
                "{\"error\":\"gateway unavailable\"}".getBytes(StandardCharsets.UTF_8))), "503",
                "a 503 is not replayed as the request's answer");
    }

    /**
     * Two stale claims under {@code resolver}, one met by a retry and one by the sweeper: the retry fails with a
     * {@code StaleClaimUndecidedException} naming {@code named}, the sweep reports its claim unresolved with the same,
     * and both claims stay PROCESSING (not freed for any request) for a later resolution.
     */
    private void assertDecidesNothing(StaleClaimResolver resolver, String named, String why) throws Exception {
        try (HikariDataSource dataSource = database(null)) {
            PostgresIdempotencyStore store = new PostgresIdempotencyStore(dataSource, "idempotency_keys");
            IdempotencyEngine engine = engine(dataSource, store, resolver);
            ScopedKey retried = new ScopedKey("", "POST /charges", "retried-" + UUID.randomUUID());
            ScopedKey swept = new ScopedKey("", "POST /charges", "swept-" + UUID.randomUUID());
            Duration lease = Duration.ofMillis(200);
            for (ScopedKey key : List.of(retried, swept)) {
                ((IdempotencyEngine.Proceed) engine.start(key, HASH, IdempotencyMode.INTENT_FIRST, lease))
                        .execution().abandon(); // unknown outcome: the claims stay PROCESSING
            }
            Thread.sleep(300);

            Object retry;
            try {
                // the retry takes the claim over for 5 minutes, which keeps it out of the sweep below however long
                // that takes to come
                retry = engine.start(retried, HASH, IdempotencyMode.INTENT_FIRST, Duration.ofMinutes(5));
            } catch (RuntimeException e) {
                retry = e;
            }
            if (retry instanceof IdempotencyEngine.Proceed proceed) {
                proceed.execution().abandon();
            }
            assertThat(retry).as(why).isInstanceOf(StaleClaimUndecidedException.class);
            assertThat(((Exception) retry).getMessage()).contains(named);
            assertThat(store.find(retried).orElseThrow().status()).isEqualTo(RecordStatus.PROCESSING);

            StaleClaimSweeper.Sweep sweep = new StaleClaimSweeper(store, resolver, new DownstreamKeys("secret"),
                    Duration.ofSeconds(30), 100).sweep();
            assertThat(sweep.resolved()).isZero();
            assertThat(sweep.unresolved()).extracting(StaleClaimSweeper.Unresolved::key).containsExactly(swept);
            assertThat(sweep.unresolved().get(0).error()).isInstanceOf(StaleClaimUndecidedException.class)
                    .hasMessageContaining(named);
            assertThat(store.find(swept).orElseThrow().status()).as("not freed for any request")
                    .isEqualTo(RecordStatus.PROCESSING);
            engine.shutdown();
        }
    }

    /**
     * A resolver that asks a third party can take longer than the in-flight wait. When it decides "fail", the retry
     * that asked still claims the key it has just freed and runs, as documented, rather than answering "in progress"
     * for a key nobody holds.
     */
    @Test
    void aRetryWhoseSlowResolverSaysFailStillRuns() throws Exception {
        try (HikariDataSource dataSource = database(null)) {
            PostgresIdempotencyStore store = new PostgresIdempotencyStore(dataSource, "idempotency_keys");
            StaleClaimResolver slowFail = claim -> {
                try {
                    Thread.sleep(600); // longer than the engine's in-flight wait (300 ms)
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                }
                return StaleClaimResolver.Resolution.fail();
            };
            IdempotencyEngine engine = engine(dataSource, store, slowFail);
            ScopedKey key = new ScopedKey("", "POST /charges", UUID.randomUUID().toString());
            Duration lease = Duration.ofMillis(200);
            ((IdempotencyEngine.Proceed) engine.start(key, HASH, IdempotencyMode.INTENT_FIRST, lease))
                    .execution().abandon(); // unknown outcome
            Thread.sleep(300);

            assertTheRetryRuns(engine, store, key, lease);
        }
    }

    /**
     * A retry that resolves a stale claim says which claim and how, as the sweeper does: a claim marked FAILED or
     * taken over to run again is overwritten by that run, so the log is what a reconciliation with the third party has.
     */
    @Test
    void aRetryThatResolvesAStaleClaimLogsWhichClaimAndHow() throws Exception {
        try (EngineLog log = new EngineLog(); HikariDataSource dataSource = database(null)) {
            List<LogRecord> logged = log.records;
            PostgresIdempotencyStore store = new PostgresIdempotencyStore(dataSource, "idempotency_keys");
            String prefix = UUID.randomUUID() + "-";
            IdempotencyEngine engine = engine(dataSource, store, claim -> switch (claim.key().key()
                    .substring(prefix.length())) {
                case "charged" -> StaleClaimResolver.Resolution.complete(new StoredResponse(201, List.of(),
                        "{\"charged\":true}".getBytes(StandardCharsets.UTF_8)));
                case "declined" -> StaleClaimResolver.Resolution.fail();
                default -> StaleClaimResolver.Resolution.rerun();
            });
            Duration lease = Duration.ofMillis(200);
            for (String name : List.of("charged", "declined", "unknown")) {
                ScopedKey key = new ScopedKey("alice", "POST /charges", prefix + name);
                leaveAStaleClaim(dataSource, store, key, lease);
                IdempotencyEngine.Start retry = engine.start(key, HASH, IdempotencyMode.INTENT_FIRST, lease);
                if (retry instanceof IdempotencyEngine.Proceed proceed) {
                    proceed.execution().finish(new StoredResponse(201, List.of(), null));
                }
            }
            engine.shutdown();

            for (String[] expected : new String[][]{{"charged", "completed with the resolver's answer"},
                    {"declined", "marked FAILED"}, {"unknown", "taken over to run its request again"}}) {
                assertThat(logged).as(expected[0]).filteredOn(record -> record.getMessage()
                        .contains("with key '" + prefix + expected[0] + "'")).singleElement().satisfies(record -> {
                            assertThat(record.getLevel()).isEqualTo(Level.INFO);
                            assertThat(record.getMessage()).contains("caller 'alice' on 'POST /charges'",
                                    "by a retry", expected[1]).doesNotContain("charged\":true");
                        });
            }
        }
    }

    /**
     * A retry's lease on the stale claim it took over runs out while its resolver asks the third party, and another
     * retry takes the claim over: the fencing token keeps the first decision out of the record, and the log says so,
     * since what the third party told that retry is then not what was recorded.
     */
    @ParameterizedTest
    @ValueSource(strings = {"complete", "mark FAILED", "rerun"})
    void aResolutionKeptOutOfTheRecordByANewHolderIsLogged(String decision) throws Exception {
        try (EngineLog log = new EngineLog(); HikariDataSource dataSource = database(null)) {
            List<LogRecord> logged = log.records;
            PostgresIdempotencyStore store = new PostgresIdempotencyStore(dataSource, "idempotency_keys");
            ScopedKey key = new ScopedKey("alice", "POST /charges", UUID.randomUUID().toString());
            JdbcTemplate jdbc = new JdbcTemplate(dataSource);
            AtomicInteger asked = new AtomicInteger();
            IdempotencyEngine engine = engine(dataSource, store, claim -> {
                if (asked.incrementAndGet() == 1) { // meanwhile, another retry has taken the claim over
                    jdbc.update("update idempotency_keys set fencing_token = gen_random_uuid() where"
                            + " idempotency_key = ?", claim.key().key());
                }
                return switch (decision) {
                    case "complete" -> StaleClaimResolver.Resolution.complete(new StoredResponse(201, List.of(), null));
                    case "rerun" -> StaleClaimResolver.Resolution.rerun();
                    default -> StaleClaimResolver.Resolution.fail();
                };
            });
            Duration lease = Duration.ofMillis(200);
            leaveAStaleClaim(dataSource, store, key, lease);
            // then the new holder's claim is in progress, or runs out and is resolved again: what the retry is told
            // is not this test's concern
            if (engine.start(key, HASH, IdempotencyMode.INTENT_FIRST, lease) instanceof IdempotencyEngine.Proceed run) {
                run.execution().abandon();
            }
            engine.shutdown();

            assertThat(logged).filteredOn(record -> record.getMessage().contains("not recorded")).singleElement()
                    .satisfies(record -> {
                        assertThat(record.getLevel()).isEqualTo(Level.WARNING);
                        assertThat(record.getMessage()).contains("decided to " + decision,
                                "caller 'alice' on 'POST /charges' with key '" + key.key() + "'", "taken over");
                    });
        }
    }

    /**
     * A retry's lease on the stale claim it took over runs out while its resolver asks the third party (its process
     * stalled, renewals and all), and another instance's retry takes the claim over, is told "rerun" and runs the
     * work. The first retry's "rerun" comes after that: it is kept out as a "complete" or a FAILED mark is, rather
     * than running the work a second time beside the new holder's run, with the third party asked twice at once
     * under the same downstream key; the log says that it was not acted on.
     */
    @Test
    void aRetrysRerunDecidedAfterAnotherInstanceTookTheClaimOverDoesNotRunBesideTheNewHolder() throws Exception {
        try (EngineLog log = new EngineLog(); HikariDataSource dataSource = database(null)) {
            PostgresIdempotencyStore store = new PostgresIdempotencyStore(dataSource, "idempotency_keys");
            JdbcTemplate jdbc = new JdbcTemplate(dataSource);
            ScopedKey key = new ScopedKey("alice", "POST /charges", UUID.randomUUID().toString());
            leaveAStaleClaim(dataSource, store, key, Duration.ofMillis(200));
            Duration lease = Duration.ofMinutes(5); // the stalled retry's renewals do not come round in this test
            CountDownLatch asked = new CountDownLatch(1);
            CountDownLatch decide = new CountDownLatch(1);
            IdempotencyEngine stalled = engine(dataSource, store, claim -> {
                asked.countDown();
                try {
                    assertThat(decide.await(10, TimeUnit.SECONDS)).isTrue();
                } catch (InterruptedException e) {
                    throw new IllegalStateException(e);
                }
                return StaleClaimResolver.Resolution.rerun();
            });
            IdempotencyEngine other = engine(dataSource, store, StaleClaimResolver.RERUN); // another instance
            AtomicInteger runs = new AtomicInteger();
            CompletableFuture<IdempotencyEngine.Start> late = Async.supply(() -> {
                IdempotencyEngine.Start start = stalled.start(key, HASH, IdempotencyMode.INTENT_FIRST, lease);
                if (start instanceof IdempotencyEngine.Proceed proceed) {
                    runs.incrementAndGet(); // the work would call the third party now
                    proceed.execution().abandon();
                }
                return start;
            });
            IdempotencyEngine.Start running = null;
            try {
                assertThat(asked.await(10, TimeUnit.SECONDS)).isTrue();
                // the stalled retry's lease runs out, and the other instance's retry takes the claim over and runs
                jdbc.update("update idempotency_keys set locked_until = now() - interval '1 second'"
                        + " where idempotency_key = ?", key.key());
                running = other.start(key, HASH, IdempotencyMode.INTENT_FIRST, lease);
                assertThat(running).isInstanceOf(IdempotencyEngine.Proceed.class);
                runs.incrementAndGet();
                String newHolder = store.find(key).orElseThrow().fencingToken();
                decide.countDown(); // the stalled retry's resolver answers "rerun" only now

                IdempotencyEngine.Start lateStart = late.get(10, TimeUnit.SECONDS);
                assertThat(lateStart).as("the late retry waits for the new holder's run, as any duplicate does")
                        .isInstanceOf(IdempotencyEngine.InProgress.class);
                assertThat(runs).as("the work runs once, under the new holder's claim").hasValue(1);
                assertThat(store.find(key).orElseThrow().fencingToken()).isEqualTo(newHolder);
                assertThat(((IdempotencyEngine.Proceed) running).execution().finish(new StoredResponse(201, List.of(),
                        "charged".getBytes(StandardCharsets.UTF_8)))).isEqualTo(IdempotencyEngine.Outcome.STORED);
            } finally {
                decide.countDown();
                if (running instanceof IdempotencyEngine.Proceed proceed) {
                    proceed.execution().abandon(); // nothing if it has finished
                }
                stalled.shutdown();
                other.shutdown();
            }
            assertThat(log.records).filteredOn(record -> record.getMessage().contains("not recorded")).singleElement()
                    .satisfies(record -> {
                        assertThat(record.getLevel()).isEqualTo(Level.WARNING);
                        assertThat(record.getMessage()).contains("decided to rerun",
                                "caller 'alice' on 'POST /charges' with key '" + key.key() + "'");
                    });
            assertThat(log.records).as("the new holder's run only")
                    .filteredOn(record -> record.getMessage().contains("to run its request again")).hasSize(1);
        }
    }

    /**
     * The application stops while a retry's resolver asks a third party about a stale claim: the server interrupts the
     * request it did not wait for, and the resolver fails. The claim is handed back with its lease ended, so that the
     * next retry (on another instance) resolves it at once instead of after the interrupted request's lease.
     */
    @ParameterizedTest
    // checked: a resolver in Kotlin passes on its client's undeclared; propagated: it lets the InterruptedException
    // itself through, which has cleared the thread's interrupt
    @ValueSource(strings = {"unchecked", "checked", "propagated"})
    void aStaleClaimWhoseResolverAnInterruptStoppedIsHandedBackAtOnce(String kind) throws Exception {
        try (HikariDataSource dataSource = database(null)) {
            PostgresIdempotencyStore store = new PostgresIdempotencyStore(dataSource, "idempotency_keys");
            ScopedKey key = new ScopedKey("", "POST /charges", UUID.randomUUID().toString());
            leaveAStaleClaim(dataSource, store, key, Duration.ofMillis(200));
            CountDownLatch asking = new CountDownLatch(1);
            StaleClaimResolver interruptible = claim -> {
                asking.countDown();
                try {
                    Thread.sleep(60_000); // a third party that has not answered yet
                } catch (InterruptedException e) {
                    if (kind.equals("propagated")) {
                        IntentFirstEngineIntegrationTest.<RuntimeException>sneakyThrow(e);
                    }
                    Thread.currentThread().interrupt();
                    if (kind.equals("checked")) {
                        IntentFirstEngineIntegrationTest.<RuntimeException>sneakyThrow(
                                new java.io.InterruptedIOException("the call to the gateway was interrupted"));
                    }
                    throw new IllegalStateException("the call to the gateway was interrupted", e);
                }
                return StaleClaimResolver.Resolution.fail();
            };
            IdempotencyEngine stopping = engine(dataSource, store, interruptible);
            Duration lease = Duration.ofMinutes(1);
            CompletableFuture<Throwable> failure = new CompletableFuture<>();
            Thread retry = startRetry(stopping, key, lease, failure);
            assertThat(asking.await(10, TimeUnit.SECONDS)).as("the resolver is asked").isTrue();
            retry.interrupt();

            assertThat(failure.get(10, TimeUnit.SECONDS)).hasMessageContaining("interrupted");
            stopping.shutdown();
            assertTheRetryRuns(engine(dataSource, store, StaleClaimResolver.RERUN), store, key, lease);
        }
    }

    /**
     * As above, with a renewal of the retry's lease under way when the resolver fails (waiting for a pool connection,
     * say): the hand-back must come after it. Run beside it, on the engine's other renewal thread, it would end the
     * lease only for that renewal to extend it again, and the claim would wait a whole lease for the next retry.
     */
    @Test
    void aStaleClaimIsHandedBackAfterTheRenewalUnderWayNotBeforeIt() throws Exception {
        try (HikariDataSource dataSource = database(null)) {
            Duration lease = Duration.ofMillis(1500);
            CountDownLatch renewing = new CountDownLatch(1);
            CountDownLatch handedBack = new CountDownLatch(1);
            CountDownLatch renewed = new CountDownLatch(1);
            PostgresIdempotencyStore store = new PostgresIdempotencyStore(dataSource, "idempotency_keys") {
                @Override
                public boolean renew(ScopedKey key, String fencingToken, Duration renewedBy) {
                    if (renewedBy.equals(IdempotencyEngine.MIN_LEASE)) {
                        boolean ended = super.renew(key, fencingToken, renewedBy);
                        handedBack.countDown();
                        return ended;
                    }
                    if (!renewedBy.equals(lease) || renewing.getCount() == 0) {
                        return super.renew(key, fencingToken, renewedBy);
                    }
                    renewing.countDown();
                    try {
                        // slow, as a renewal waiting for a connection is; no longer than that once it is waited for
                        handedBack.await(2, TimeUnit.SECONDS);
                    } catch (InterruptedException e) {
                        Thread.currentThread().interrupt();
                    }
                    try {
                        return super.renew(key, fencingToken, renewedBy);
                    } finally {
                        renewed.countDown();
                    }
                }
            };
            ScopedKey key = new ScopedKey("", "POST /charges", UUID.randomUUID().toString());
            leaveAStaleClaim(dataSource, store, key, Duration.ofMillis(200));
            StaleClaimResolver interrupted = claim -> {
                try {
                    renewing.await(); // a third party that has not answered yet, while the lease is renewed
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                }
                Thread.currentThread().interrupt(); // the server stops the request it did not wait for
                throw new IllegalStateException("the call to the gateway was interrupted");
            };
            IdempotencyEngine stopping = engine(dataSource, store, interrupted);
            CompletableFuture<Throwable> failure = new CompletableFuture<>();
            Thread retry = startRetry(stopping, key, lease, failure);

            assertThat(failure.get(10, TimeUnit.SECONDS)).hasMessageContaining("interrupted");
            assertThat(renewed.await(10, TimeUnit.SECONDS)).as("the renewal under way has ended").isTrue();
            stopping.shutdown();
            // handed back, its lease ends a millisecond after the hand-back (which a read right after it may still
            // see live); extended again by the renewal, it would have most of the 1.5 s lease left
            Long left = new JdbcTemplate(dataSource).queryForObject("select (extract(epoch from locked_until - now())"
                    + " * 1000)::bigint from idempotency_keys where idempotency_key = ?", Long.class, key.key());
            assertThat(left).as("milliseconds left of the lease: the claim is handed back").isLessThan(500);
        }
    }

    /**
     * The database's clock is moved an hour away from the JVM's (functions {@code now()}, {@code statement_timestamp()}
     * and {@code clock_timestamp()} that shadow PostgreSQL's in the connection's search path). Were any lease or
     * expiry decided on the JVM clock, a fresh claim would look expired an hour early, or an expired one live for an
     * hour.
     */
    @ParameterizedTest(name = "database clock {0} relative to the JVM")
    @ValueSource(strings = {"+ interval '1 hour'", "- interval '1 hour'"})
    void leaseAndExpiryFollowTheDatabaseClockWhenTheJvmClockIsAnHourOff(String skew) throws Exception {
        try (HikariDataSource dataSource = database(skew)) {
            JdbcTemplate jdbc = new JdbcTemplate(dataSource);
            double skewSeconds = jdbc.queryForObject(
                    "select extract(epoch from now() - pg_catalog.now())", Double.class);
            assertThat(Math.abs(skewSeconds)).as("the session's now() is skewed").isEqualTo(3600.0);
            PostgresIdempotencyStore store = new PostgresIdempotencyStore(dataSource, "idempotency_keys");
            IdempotencyEngine first = engine(dataSource, store, StaleClaimResolver.RERUN);
            IdempotencyEngine second = engine(dataSource, store, StaleClaimResolver.RERUN); // another instance
            ScopedKey key = new ScopedKey("", "POST /charges", UUID.randomUUID().toString());
            Duration lease = Duration.ofSeconds(3); // live through a duplicate's wait on a loaded machine

            IdempotencyEngine.Start holder = first.start(key, HASH, IdempotencyMode.INTENT_FIRST, lease);
            assertThat(holder).isInstanceOf(IdempotencyEngine.Proceed.class);
            ((IdempotencyEngine.Proceed) holder).execution().abandon(); // crashed: no renewal from now on

            assertThat(store.find(key).orElseThrow().leaseExpired()).as("a fresh lease is live").isFalse();
            assertThat(second.start(key, HASH, IdempotencyMode.INTENT_FIRST, lease))
                    .as("a duplicate during the lease").isInstanceOf(IdempotencyEngine.InProgress.class);
            Await.until("the lease runs out", lease.plusSeconds(10),
                    () -> store.find(key).orElseThrow().leaseExpired());
            IdempotencyEngine.Start retry = second.start(key, HASH, IdempotencyMode.INTENT_FIRST, lease);
            assertThat(retry).as("after the lease, the retry takes over").isInstanceOf(IdempotencyEngine.Proceed.class);
            ((IdempotencyEngine.Proceed) retry).execution().finish(new StoredResponse(201, List.of(), null));

            // expiry: kept within the retention, removable after it, by the database clock (an hour off, the JVM's
            // would have it expired at once, or kept for an hour)
            ScopedKey shortLived = new ScopedKey("", "POST /x", UUID.randomUUID().toString());
            IdempotencyEngine brief = new IdempotencyEngine(store, transactions(dataSource), StoragePolicy.DEFAULT,
                    Duration.ofSeconds(3), Duration.ofMillis(300));
            ((IdempotencyEngine.Proceed) brief.start(shortLived, HASH)).execution()
                    .finish(new StoredResponse(200, List.of(), null));
            assertThat(store.deleteExpired(100)).as("nothing has expired yet").isZero();
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
            int deleted;
            while ((deleted = store.deleteExpired(100)) == 0) {
                assertThat(System.nanoTime()).as("the record expires after its retention").isLessThan(deadline);
                Thread.sleep(50);
            }
            assertThat(deleted).isEqualTo(1);
            assertThat(store.find(shortLived)).isEmpty();
            assertThat(store.find(key)).as("the 1-day record stays").isPresent();
            first.shutdown();
            second.shutdown();
            brief.shutdown();
        }
    }

    /**
     * A resolver asks a third party, which may take longer than the lease. The retry that took the stale claim over
     * holds it while it asks: another instance's retry meanwhile finds the claim in progress, instead of taking it over
     * too, consulting the resolver a second time and running the handler beside the first.
     */
    @Test
    void aClaimTakenOverIsHeldWhileTheResolverIsSlowerThanTheLease() throws Exception {
        try (HikariDataSource dataSource = database(null)) {
            PostgresIdempotencyStore store = new PostgresIdempotencyStore(dataSource, "idempotency_keys");
            ScopedKey key = new ScopedKey("", "POST /charges", UUID.randomUUID().toString());
            // long enough that a renewal late by a busy machine's pause still comes in time
            Duration lease = Duration.ofMillis(1500);
            leaveAStaleClaim(dataSource, store, key, Duration.ofMillis(300));

            AtomicInteger consulted = new AtomicInteger();
            CountDownLatch consulting = new CountDownLatch(1);
            CountDownLatch secondAnswered = new CountDownLatch(1);
            StaleClaimResolver slowGateway = claim -> {
                if (consulted.incrementAndGet() == 1) {
                    consulting.countDown();
                    try {
                        // the third party answers slowly: after the other instance's retry, however late that comes
                        secondAnswered.await(30, TimeUnit.SECONDS);
                    } catch (InterruptedException e) {
                        Thread.currentThread().interrupt();
                    }
                }
                return StaleClaimResolver.Resolution.rerun();
            };
            IdempotencyEngine first = engine(dataSource, store, slowGateway);
            IdempotencyEngine second = engine(dataSource, store, slowGateway); // another instance
            ExecutorService executor = Executors.newSingleThreadExecutor();
            Future<IdempotencyEngine.Outcome> firstRetry = executor.submit(() -> {
                IdempotencyEngine.Start start = first.start(key, HASH, IdempotencyMode.INTENT_FIRST, lease);
                return ((IdempotencyEngine.Proceed) start).execution()
                        .finish(new StoredResponse(201, List.of(), "charged".getBytes(StandardCharsets.UTF_8)));
            });
            assertThat(consulting.await(10, TimeUnit.SECONDS)).isTrue();
            Thread.sleep(2 * lease.toMillis()); // the takeover's lease would have run out by now

            IdempotencyEngine.Start secondRetry;
            try {
                secondRetry = second.start(key, HASH, IdempotencyMode.INTENT_FIRST, lease);
            } finally {
                secondAnswered.countDown();
            }
            if (secondRetry instanceof IdempotencyEngine.Proceed proceed) {
                proceed.execution().abandon();
            }
            IdempotencyEngine.Outcome firstOutcome;
            try {
                firstOutcome = firstRetry.get(30, TimeUnit.SECONDS);
            } catch (java.util.concurrent.ExecutionException e) {
                firstOutcome = null;
            }
            executor.shutdownNow();
            first.shutdown();
            second.shutdown();

            assertThat(secondRetry).isInstanceOf(IdempotencyEngine.InProgress.class);
            assertThat(consulted).hasValue(1);
            assertThat(firstOutcome).isEqualTo(IdempotencyEngine.Outcome.STORED);
            assertThat(store.find(key).orElseThrow().status()).isEqualTo(RecordStatus.SUCCEEDED);
        }
    }

    /**
     * A retry has taken a stale claim over and its resolver asks a slow third party. Another body under the key, sent
     * to the same instance meanwhile, is a mismatch: the claim's fingerprint is committed for everyone to see, and the
     * key stays with its request whatever the resolver decides. "In progress" would have the client wait for an answer
     * it can never get.
     */
    @Test
    void anotherBodyWhileTheRetryResolvesTheStaleClaimIsAMismatch() throws Exception {
        try (HikariDataSource dataSource = database(null)) {
            PostgresIdempotencyStore store = new PostgresIdempotencyStore(dataSource, "idempotency_keys");
            ScopedKey key = new ScopedKey("", "POST /charges", UUID.randomUUID().toString());
            Duration lease = Duration.ofMillis(300);
            leaveAStaleClaim(dataSource, store, key, lease);

            CountDownLatch consulting = new CountDownLatch(1);
            StaleClaimResolver slowGateway = claim -> {
                consulting.countDown();
                try {
                    Thread.sleep(1_500); // longer than the in-flight wait (300 ms)
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                }
                return StaleClaimResolver.Resolution.rerun();
            };
            IdempotencyEngine engine = engine(dataSource, store, slowGateway);
            ExecutorService executor = Executors.newSingleThreadExecutor();
            try {
                Future<IdempotencyEngine.Outcome> retry = executor.submit(() -> ((IdempotencyEngine.Proceed) engine
                        .start(key, HASH, IdempotencyMode.INTENT_FIRST, lease)).execution()
                        .finish(new StoredResponse(201, List.of(), null)));
                assertThat(consulting.await(10, TimeUnit.SECONDS)).isTrue();

                IdempotencyEngine.Start other = engine.start(key, "8".repeat(64), IdempotencyMode.INTENT_FIRST,
                        lease);

                assertThat(other).isInstanceOf(IdempotencyEngine.Mismatch.class);
                assertThat(retry.get(30, TimeUnit.SECONDS)).isEqualTo(IdempotencyEngine.Outcome.STORED);
            } finally {
                executor.shutdownNow();
                engine.shutdown();
            }
        }
    }

    /**
     * The intent is committed, then the handler's transaction cannot be opened: the pool has no connection to give
     * within its timeout. The handler never ran, so nothing can have happened: the next request runs at once, instead
     * of being answered "in progress" until the lease has run out.
     */
    @Test
    void aClaimWhoseHandlerCouldNotStartIsFreeForTheNextRequestAtOnce() throws Exception {
        try (HikariDataSource dataSource = oneConnectionPool()) {
            PostgresIdempotencyStore store = new PostgresIdempotencyStore(dataSource, "idempotency_keys");
            // the handler's transaction
            Transactions exhaustedOnce = exhaustedAtThe(2, dataSource);
            IdempotencyEngine engine = engine(store, exhaustedOnce, Duration.ofMillis(300), StaleClaimResolver.RERUN);
            ScopedKey key = new ScopedKey("", "POST /charges", UUID.randomUUID().toString());
            Duration lease = Duration.ofMinutes(5);

            assertTheWorkCannotStart(engine, key, lease);

            assertTheRetryRuns(engine, store, key, lease);
        }
    }

    /**
     * The intent is committed, then the handler's transaction waits for a pooled connection (a busy pool, within its
     * timeout) for most of the lease. The lease is renewed while it waits, not only a third of the lease after the
     * handler's transaction began: otherwise it runs out before the first renewal, and another instance's retry takes
     * the claim over and runs the handler beside this one, both calling the third party.
     */
    @Test
    void theLeaseIsRenewedWhileTheHandlersTransactionWaitsForAConnection() throws Exception {
        try (HikariDataSource dataSource = database(null)) {
            PostgresIdempotencyStore store = new PostgresIdempotencyStore(dataSource, "idempotency_keys");
            JdbcTemplate jdbc = new JdbcTemplate(dataSource);
            ScopedKey key = new ScopedKey("", "POST /charges", UUID.randomUUID().toString());
            Duration lease = Duration.ofSeconds(3);
            Transactions pool = transactions(dataSource);
            AtomicInteger begun = new AtomicInteger();
            Transactions busyPool = () -> {
                if (begun.incrementAndGet() == 2) {
                    // the handler's transaction: the pool gives a connection once less than a fifth of the claim's
                    // lease is left, on the database's clock, or once the lease has been renewed meanwhile
                    Long claimedUntil = jdbc.queryForObject("select (extract(epoch from locked_until) * 1000000)"
                            + "::bigint from idempotency_keys where idempotency_key = ?", Long.class, key.key());
                    long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
                    while (System.nanoTime() - deadline < 0 && jdbc.queryForObject("select locked_until - now()"
                            + " > ?::bigint * interval '1 millisecond' and (extract(epoch from locked_until) * 1000000)"
                            + "::bigint <= ? from idempotency_keys where idempotency_key = ?",
                            Boolean.class, lease.toMillis() / 5, claimedUntil, key.key())) {
                        try {
                            Thread.sleep(10);
                        } catch (InterruptedException e) {
                            throw new IllegalStateException(e);
                        }
                    }
                }
                return pool.begin();
            };
            IdempotencyEngine holder = engine(store, busyPool, Duration.ofMillis(300), StaleClaimResolver.RERUN);
            // another instance, whose retry waits in flight for at most half the lease
            IdempotencyEngine other = engine(store, transactions(dataSource), lease.dividedBy(2),
                    StaleClaimResolver.RERUN);
            IdempotencyEngine.Execution execution = ((IdempotencyEngine.Proceed) holder.start(key, HASH,
                    IdempotencyMode.INTENT_FIRST, lease)).execution();
            try {
                CompletableFuture<IdempotencyEngine.Start> retried = Async.supply(() -> {
                    IdempotencyEngine.Start start = other.start(key, HASH, IdempotencyMode.INTENT_FIRST, lease);
                    if (start instanceof IdempotencyEngine.Proceed proceed) {
                        proceed.execution().abandon();
                    }
                    return start;
                });
                IdempotencyEngine.Start retry = retried.get(30, TimeUnit.SECONDS);

                assertThat(retry).as("a retry while the holder works").isInstanceOf(IdempotencyEngine.InProgress.class);
                assertThat(execution.finish(new StoredResponse(201, List.of(), null)))
                        .isEqualTo(IdempotencyEngine.Outcome.STORED);
            } finally {
                execution.abandon(); // after a failed assertion: nothing stays bound to the thread
                holder.shutdown();
                other.shutdown();
            }
        }
    }

    /**
     * Another instance holds an intent-first claim, committed and visible; a retry of its request on this instance
     * polls it. A request with another body under the key, sent to this instance meanwhile, waits in memory behind
     * that retry — and the fingerprint holding the key is already known: it is a mismatch at once, as it would be
     * had it asked the database itself, not "in progress" once its wait has run out.
     */
    @Test
    void anotherBodyBehindARetryPollingACommittedClaimIsAMismatchAtOnce() throws Exception {
        try (HikariDataSource dataSource = database(null)) {
            CountDownLatch polling = new CountDownLatch(1);
            PostgresIdempotencyStore store = new PostgresIdempotencyStore(dataSource, "idempotency_keys") {
                @Override
                public ClaimResult claim(ClaimRequest request) {
                    try {
                        return super.claim(request);
                    } finally {
                        polling.countDown();
                    }
                }
            };
            Duration maxWait = Duration.ofSeconds(3);
            IdempotencyEngine holding = engine(dataSource, store, StaleClaimResolver.RERUN); // the other instance
            IdempotencyEngine engine = engine(store, transactions(dataSource), maxWait, StaleClaimResolver.RERUN);
            ScopedKey key = new ScopedKey("", "POST /charges", UUID.randomUUID().toString());
            Duration lease = Duration.ofMinutes(5);
            ExecutorService holder = Executors.newSingleThreadExecutor(); // its work runs in its thread's transaction
            IdempotencyEngine.Proceed held = holder.submit(() -> (IdempotencyEngine.Proceed) holding.start(key, HASH,
                    IdempotencyMode.INTENT_FIRST, lease)).get(10, TimeUnit.SECONDS);
            try {
                CompletableFuture<IdempotencyEngine.Start> retry = Async.supply(
                        () -> engine.start(key, HASH, IdempotencyMode.INTENT_FIRST, lease));
                assertThat(polling.await(10, TimeUnit.SECONDS)).isTrue();

                long started = System.nanoTime();
                IdempotencyEngine.Start other = engine.start(key, "8".repeat(64), IdempotencyMode.INTENT_FIRST,
                        lease);

                assertThat(other).isEqualTo(new IdempotencyEngine.Mismatch());
                assertThat(Duration.ofNanos(System.nanoTime() - started)).isLessThan(maxWait.dividedBy(2));
                assertThat(retry.get(10, TimeUnit.SECONDS)).isEqualTo(new IdempotencyEngine.InProgress());
            } finally {
                holder.submit(() -> held.execution().finish(new StoredResponse(201, List.of(), null)))
                        .get(10, TimeUnit.SECONDS);
                holder.shutdown();
                holding.shutdown();
                engine.shutdown();
            }
        }
    }

    /**
     * A retry takes a stale claim over and its resolver says "rerun", but the work cannot start: the pool gives no
     * connection for its transaction in time. The earlier attempt under the claim may have reached the third party, so
     * the key is not freed for any request, as for a fresh claim whose work never started: it is marked FAILED, as the
     * sweeper's "rerun" does. The same request runs again at once; another body under the key is a mismatch.
     */
    @Test
    void aStaleClaimWhoseRerunCouldNotStartStaysWithItsRequest() throws Exception {
        String other = "8".repeat(64);
        try (HikariDataSource dataSource = oneConnectionPool()) {
            PostgresIdempotencyStore store = new PostgresIdempotencyStore(dataSource, "idempotency_keys");
            java.util.concurrent.atomic.AtomicBoolean exhausted = new java.util.concurrent.atomic.AtomicBoolean();
            // the rerun's transaction
            Transactions exhaustedAfterTheResolver = exhaustedWhen(dataSource, () -> exhausted.getAndSet(false));
            StaleClaimResolver rerun = claim -> {
                exhausted.set(true);
                return StaleClaimResolver.Resolution.rerun();
            };
            IdempotencyEngine engine = engine(store, exhaustedAfterTheResolver, Duration.ofMillis(300), rerun);
            ScopedKey key = new ScopedKey("", "POST /charges", UUID.randomUUID().toString());
            Duration lease = Duration.ofMinutes(5);
            ((IdempotencyEngine.Proceed) engine.start(key, HASH, IdempotencyMode.INTENT_FIRST, lease)).execution()
                    .abandon(); // unknown outcome: the claim stays PROCESSING
            new JdbcTemplate(dataSource).update("update idempotency_keys set locked_until = now() - interval '1 minute'"
                    + " where idempotency_key = ?", key.key()); // its lease has run out

            assertTheWorkCannotStart(engine, key, lease);

            assertTheKeyStaysWithItsRequest(engine, store, key, other, lease);
        }
    }

    /**
     * A request runs again under its FAILED claim (its earlier attempt failed definitely, maybe after telling the third
     * party about the key), but its work cannot start: the pool gives no connection for its transaction in time. The
     * claim goes back to FAILED rather than being released as if never made: another body under the key is still a
     * mismatch, and the same request still runs at once.
     */
    @Test
    void aFailedClaimWhoseNewAttemptCouldNotStartStaysWithItsRequest() throws Exception {
        String other = "8".repeat(64);
        try (HikariDataSource dataSource = oneConnectionPool()) {
            PostgresIdempotencyStore store = new PostgresIdempotencyStore(dataSource, "idempotency_keys");
            // the first attempt's two, the second's claim, then its work
            Transactions exhaustedOnce = exhaustedAtThe(4, dataSource);
            IdempotencyEngine engine = engine(store, exhaustedOnce, Duration.ofMillis(300), StaleClaimResolver.RERUN);
            ScopedKey key = new ScopedKey("", "POST /charges", UUID.randomUUID().toString());
            Duration lease = Duration.ofMinutes(5);
            ((IdempotencyEngine.Proceed) engine.start(key, HASH, IdempotencyMode.INTENT_FIRST, lease)).execution()
                    .abandonDefinitely(); // declined: FAILED

            assertTheWorkCannotStart(engine, key, lease);

            assertTheKeyStaysWithItsRequest(engine, store, key, other, lease);
        }
    }

    /**
     * A request runs again under its FAILED claim, and its arguments are refused before its body runs. Nothing ran this
     * time, but the earlier attempt may have told the third party about the key: the claim goes back to FAILED, for
     * that request only, rather than being released for any request.
     */
    @Test
    void aFailedClaimWhoseNewAttemptWasRefusedBeforeItRanStaysWithItsRequest() throws Exception {
        String other = "8".repeat(64);
        try (HikariDataSource dataSource = database(null)) {
            PostgresIdempotencyStore store = new PostgresIdempotencyStore(dataSource, "idempotency_keys");
            IdempotencyEngine engine = engine(dataSource, store, StaleClaimResolver.RERUN);
            ScopedKey key = new ScopedKey("", "POST /charges", UUID.randomUUID().toString());
            Duration lease = Duration.ofMinutes(5);
            ((IdempotencyEngine.Proceed) engine.start(key, HASH, IdempotencyMode.INTENT_FIRST, lease)).execution()
                    .abandonDefinitely(); // declined: FAILED

            ((IdempotencyEngine.Proceed) engine.start(key, HASH, IdempotencyMode.INTENT_FIRST, lease)).execution()
                    .abandonUnrun(); // its arguments refused this time

            assertTheKeyStaysWithItsRequest(engine, store, key, other, lease);
        }
    }

    /**
     * The intent is committed, then the pool gives no connection for the handler's transaction, nor for the release
     * that follows: the database is briefly out of reach. The handler never ran, so the release is tried again once
     * the database answers: a retry within its in-flight wait runs, instead of being answered "in progress" until the
     * lease has run out.
     */
    @Test
    void aClaimWhoseHandlerCouldNotStartIsReleasedOnceThePoolHasAConnectionAgain() throws Exception {
        try (HikariDataSource dataSource = oneConnectionPool()) {
            AtomicInteger releases = new AtomicInteger();
            PostgresIdempotencyStore store = refusingThe(1, true, dataSource, releases);
            // the handler's transaction
            Transactions exhaustedOnce = exhaustedAtThe(2, dataSource);
            IdempotencyEngine engine = engine(store, exhaustedOnce, Duration.ofSeconds(10), StaleClaimResolver.RERUN);
            ScopedKey key = new ScopedKey("", "POST /charges", UUID.randomUUID().toString());
            Duration lease = Duration.ofMinutes(5);

            assertTheWorkCannotStart(engine, key, lease)
                    .satisfies(thrown -> assertThat(thrown.getSuppressed()).as("the release the pool refused")
                            .hasSize(1));

            assertTheRetryRuns(engine, store, key, lease);
        }
    }

    /**
     * A retry's resolver decides "fail" for a stale claim, and the mark finds no connection: the retry fails, and the
     * mark is tried again once the database answers. The next retry runs at once, instead of being answered "in
     * progress" until the first retry's lease has run out and asking the resolver again.
     */
    @Test
    void aResolversFailThatFoundNoConnectionIsMarkedOnceThePoolHasOneAgain() throws Exception {
        try (HikariDataSource dataSource = oneConnectionPool()) {
            AtomicInteger fails = new AtomicInteger();
            PostgresIdempotencyStore store = refusingThe(1, false, dataSource, fails);
            ScopedKey key = new ScopedKey("", "POST /charges", UUID.randomUUID().toString());
            leaveAStaleClaim(dataSource, store, key, Duration.ofMillis(200));
            AtomicInteger asked = new AtomicInteger();
            IdempotencyEngine engine = engine(store, transactions(dataSource), Duration.ofSeconds(10), claim -> {
                asked.incrementAndGet();
                return StaleClaimResolver.Resolution.fail(); // the gateway has no charge under the key
            });
            Duration lease = Duration.ofMinutes(5);

            org.assertj.core.api.Assertions.assertThatThrownBy(
                    () -> engine.start(key, HASH, IdempotencyMode.INTENT_FIRST, lease))
                    .as("the mark the pool refused").hasRootCauseInstanceOf(java.sql.SQLException.class);

            assertTheRetryRuns(engine, store, key, lease);
            assertThat(asked).as("the resolver is not asked again").hasValue(1);
        }
    }

    /**
     * A request runs again under its FAILED claim, its work cannot start, and marking the claim FAILED again finds no
     * connection either. It is marked once the database answers: the same request, sent again within its in-flight
     * wait, runs, and another body under the key is still a mismatch.
     */
    @Test
    void aFailedClaimWhoseNewAttemptCouldNotStartIsMarkedFailedOnceThePoolHasAConnectionAgain() throws Exception {
        String other = "8".repeat(64);
        try (HikariDataSource dataSource = oneConnectionPool()) {
            AtomicInteger fails = new AtomicInteger();
            PostgresIdempotencyStore store = refusingThe(2, false, dataSource, fails);
            // the first attempt's two, the second's claim, then its work
            Transactions exhaustedOnce = exhaustedAtThe(4, dataSource);
            IdempotencyEngine engine = engine(store, exhaustedOnce, Duration.ofSeconds(10), StaleClaimResolver.RERUN);
            ScopedKey key = new ScopedKey("", "POST /charges", UUID.randomUUID().toString());
            Duration lease = Duration.ofMinutes(5);
            ((IdempotencyEngine.Proceed) engine.start(key, HASH, IdempotencyMode.INTENT_FIRST, lease)).execution()
                    .abandonDefinitely(); // declined: FAILED

            assertTheWorkCannotStart(engine, key, lease);

            assertThat(engine.start(key, other, IdempotencyMode.INTENT_FIRST, lease))
                    .as("another body under the key").isInstanceOf(IdempotencyEngine.Mismatch.class);
            assertTheRetryRuns(engine, store, key, lease);
            assertThat(fails).as("marked FAILED again once the pool had a connection").hasValueGreaterThan(2);
        }
    }

    /**
     * A handler's arguments are refused before its body runs, and the release of its claim finds no connection (the
     * one the handler's transaction gave back is taken meanwhile). The release is tried again once the pool has a
     * connection: the corrected request then runs, where it would be answered "key reused" until the lease had run out.
     */
    @Test
    void aClaimWhoseHandlerWasRefusedBeforeItRanIsReleasedOnceThePoolHasAConnectionAgain() throws Exception {
        try (HikariDataSource dataSource = oneConnectionPool()) {
            AtomicInteger releases = new AtomicInteger();
            PostgresIdempotencyStore store = refusingThe(1, true, dataSource, releases);
            IdempotencyEngine engine = engine(store, transactions(dataSource), Duration.ofSeconds(10),
                    StaleClaimResolver.RERUN);
            ScopedKey key = new ScopedKey("", "POST /charges", UUID.randomUUID().toString());
            Duration lease = Duration.ofMinutes(5);
            IdempotencyEngine.Execution refused = ((IdempotencyEngine.Proceed) engine.start(key, "8".repeat(64),
                    IdempotencyMode.INTENT_FIRST, lease)).execution();

            org.assertj.core.api.Assertions.assertThatThrownBy(refused::abandonUnrun)
                    .isInstanceOf(org.springframework.transaction.CannotCreateTransactionException.class);
            long waited = System.nanoTime();
            while (store.find(key).isPresent() && System.nanoTime() - waited < TimeUnit.SECONDS.toNanos(10)) {
                Thread.sleep(10); // until the release is tried again
            }

            assertTheRetryRuns(engine, store, key, lease);
        }
    }

    /**
     * Work declares a definite failure (the gateway declined), and marking its claim FAILED finds no connection: the one
     * its transaction gave back is taken meanwhile. The mark is tried again once the pool has a connection: the
     * redelivered message, within its in-flight wait, runs, instead of being told "in progress" until the lease has
     * run out.
     */
    @Test
    void aDefiniteFailureIsRecordedOnceThePoolHasAConnectionAgain() throws Exception {
        try (HikariDataSource dataSource = oneConnectionPool()) {
            AtomicInteger fails = new AtomicInteger();
            PostgresIdempotencyStore store = refusingThe(1, false, dataSource, fails);
            definiteFailureThenItsRedelivery(store, dataSource, suppressed -> assertThat(suppressed)
                    .as("the mark the pool refused").hasSize(1));
        }
    }

    /**
     * As above, with a store written in a language without checked exceptions (Kotlin), which passes its driver's
     * {@code SQLException} on as it is, undeclared: the listener still gets the work's own exception, with the failed
     * mark attached, and the mark is still tried again, so that the redelivery runs.
     */
    @Test
    void aDefiniteFailureIsRecordedAlsoWhenTheStoreFailedTheMarkWithAnUndeclaredCheckedException() throws Exception {
        try (HikariDataSource dataSource = database(null)) {
            AtomicInteger fails = new AtomicInteger();
            PostgresIdempotencyStore store = new PostgresIdempotencyStore(dataSource, "idempotency_keys") {
                @Override
                public boolean fail(ScopedKey key, String fencingToken) {
                    if (fails.incrementAndGet() == 1) {
                        IntentFirstEngineIntegrationTest.<RuntimeException>sneakyThrow(
                                new java.sql.SQLException("connection reset", "08006"));
                    }
                    return super.fail(key, fencingToken);
                }
            };
            definiteFailureThenItsRedelivery(store, dataSource, suppressed -> assertThat(suppressed)
                    .as("the mark the store failed").singleElement().isInstanceOf(java.sql.SQLException.class));
        }
    }

    /**
     * Work under a new key declares a definite failure, which the listener gets with what {@code failedMark} checks
     * attached; then the message, redelivered, runs (its claim was marked FAILED after all), rather than being told
     * "in progress" until the lease has run out.
     */
    private void definiteFailureThenItsRedelivery(PostgresIdempotencyStore store, HikariDataSource dataSource,
                                                  java.util.function.Consumer<Throwable[]> failedMark)
            throws Exception {
        IdempotencyEngine engine = engine(store, transactions(dataSource), Duration.ofSeconds(10),
                StaleClaimResolver.RERUN);
        IdempotencyTemplate template = new IdempotencyTemplate(engine);
        ScopedKey key = new ScopedKey("", "charges-listener", UUID.randomUUID().toString());
        byte[] message = "charge-1".getBytes(StandardCharsets.UTF_8);
        Duration lease = Duration.ofMinutes(5);

        org.assertj.core.api.Assertions.assertThatThrownBy(() -> template.execute(key, message,
                        IdempotencyMode.INTENT_FIRST, lease, () -> {
                            throw new io.idempotency.core.DefiniteFailureException("the gateway declined");
                        })).isInstanceOf(io.idempotency.core.DefiniteFailureException.class)
                .satisfies(thrown -> failedMark.accept(thrown.getSuppressed()));

        IdempotencyTemplate.Result redelivered = template.execute(key, message, IdempotencyMode.INTENT_FIRST,
                lease, () -> "charged".getBytes(StandardCharsets.UTF_8));
        assertThat(redelivered.replayed()).isFalse();
        engine.shutdown();
    }

    /**
     * The release of a claim whose handler could not start is still being tried again when the engine shuts down (the
     * application stops): it is tried once more then, and the key is free for the retry another instance gets.
     */
    @Test
    void aReleaseStillBeingTriedAgainIsTriedOnceMoreWhenTheEngineShutsDown() throws Exception {
        try (HikariDataSource dataSource = oneConnectionPool()) {
            Thread stopping = Thread.currentThread();
            java.util.concurrent.atomic.AtomicBoolean reachable = new java.util.concurrent.atomic.AtomicBoolean();
            AtomicInteger releases = new AtomicInteger();
            PostgresIdempotencyStore store = new PostgresIdempotencyStore(dataSource, "idempotency_keys") {
                @Override
                public boolean release(ScopedKey key, String fencingToken) {
                    releases.incrementAndGet();
                    // out of reach until the engine shuts down, and for its background attempts throughout
                    return withoutAConnectionWhen(dataSource,
                            !reachable.get() || Thread.currentThread() != stopping,
                            () -> super.release(key, fencingToken));
                }
            };
            // the handler's transaction
            Transactions exhaustedOnce = exhaustedAtThe(2, dataSource);
            IdempotencyEngine engine = engine(store, exhaustedOnce, Duration.ofMillis(300), StaleClaimResolver.RERUN);
            ScopedKey key = new ScopedKey("", "POST /charges", UUID.randomUUID().toString());
            Duration lease = Duration.ofMinutes(5);
            assertTheWorkCannotStart(engine, key, lease);
            long waited = System.nanoTime();
            while (releases.get() < 2 && System.nanoTime() - waited < TimeUnit.SECONDS.toNanos(10)) {
                Thread.sleep(10); // until it has been tried again in the background, in vain
            }
            reachable.set(true);

            engine.shutdown();

            assertThat(store.find(key)).as("the claim released as the engine shut down").isEmpty();
            IdempotencyEngine other = engine(dataSource, store, StaleClaimResolver.RERUN);
            assertTheRetryRuns(other, store, key, lease);
        }
    }

    /**
     * Work that declares a definite failure after its connection was lost (the server ended the session while the
     * work waited for a third party, say): rolling back its transaction fails, but the work definitely did not happen,
     * so the claim is still marked FAILED and the redelivered message runs at once.
     */
    @Test
    void aDefiniteFailureIsRecordedAlsoWhenTheWorksConnectionWasLost() throws Exception {
        try (HikariDataSource dataSource = database(null)) {
            JdbcTemplate jdbc = new JdbcTemplate(dataSource);
            jdbc.execute("create table attempts (id bigserial primary key)");
            PostgresIdempotencyStore store = new PostgresIdempotencyStore(dataSource, "idempotency_keys");
            IdempotencyEngine engine = engine(dataSource, store, StaleClaimResolver.RERUN);
            IdempotencyTemplate template = new IdempotencyTemplate(engine);
            ScopedKey key = new ScopedKey("", "charges-listener", UUID.randomUUID().toString());
            byte[] message = "charge-1".getBytes(StandardCharsets.UTF_8);
            Duration lease = Duration.ofMinutes(5);

            org.assertj.core.api.Assertions.assertThatThrownBy(() -> template.execute(key, message,
                    IdempotencyMode.INTENT_FIRST, lease, () -> {
                        jdbc.update("insert into attempts default values");
                        loseTheWorksConnection(dataSource, jdbc);
                        throw new io.idempotency.core.DefiniteFailureException("the gateway declined the charge");
                    })).as("the work's own failure, not the rollback's")
                    .isInstanceOf(io.idempotency.core.DefiniteFailureException.class)
                    .hasMessage("the gateway declined the charge");

            assertThat(store.find(key).orElseThrow().status()).isEqualTo(RecordStatus.FAILED);
            IdempotencyTemplate.Result redelivered = template.execute(key, message, IdempotencyMode.INTENT_FIRST,
                    lease, () -> "charged".getBytes(StandardCharsets.UTF_8));
            assertThat(redelivered.replayed()).isFalse();
            assertThat(jdbc.queryForObject("select count(*) from attempts", Integer.class)).isZero();
            engine.shutdown();
        }
    }

    /**
     * Work whose connection was lost before it failed on its own account (a listener that classifies failures to
     * dead-letter a message, say): its transaction cannot be rolled back on that connection, but the caller still gets
     * the work's own exception — with the failed rollback attached — and the key stays free for the redelivery.
     */
    @Test
    void theWorksOwnFailureIsThrownAlsoWhenRollingBackItsLostConnectionFails() throws Exception {
        try (HikariDataSource dataSource = database(null)) {
            JdbcTemplate jdbc = new JdbcTemplate(dataSource);
            jdbc.execute("create table effects (id bigserial primary key)");
            PostgresIdempotencyStore store = new PostgresIdempotencyStore(dataSource, "idempotency_keys");
            IdempotencyTemplate template = new IdempotencyTemplate(engine(dataSource, store, StaleClaimResolver.RERUN));
            ScopedKey key = new ScopedKey("", "events", UUID.randomUUID().toString());
            byte[] message = "event-1".getBytes(StandardCharsets.UTF_8);

            org.assertj.core.api.Assertions.assertThatThrownBy(() -> template.execute(key, message, () -> {
                        jdbc.update("insert into effects default values");
                        loseTheWorksConnection(dataSource, jdbc);
                        throw new IllegalArgumentException("the event cannot be parsed");
                    })).as("the work's own failure, not the rollback's")
                    .isInstanceOf(IllegalArgumentException.class)
                    .hasMessage("the event cannot be parsed")
                    .satisfies(thrown -> assertThat(thrown.getSuppressed()).isNotEmpty());

            assertThat(store.find(key)).isEmpty();
            IdempotencyTemplate.Result redelivered = template.execute(key, message,
                    () -> "applied".getBytes(StandardCharsets.UTF_8));
            assertThat(redelivered.replayed()).isFalse();
            assertThat(jdbc.queryForObject("select count(*) from effects", Integer.class)).isZero();
        }
    }

    @Test
    void theTemplateRunsWorkOncePerKeyAndReplaysItsResult() throws Exception {
        try (HikariDataSource dataSource = database(null)) {
            JdbcTemplate jdbc = new JdbcTemplate(dataSource);
            jdbc.execute("create table effects (id bigserial primary key, message text)");
            PostgresIdempotencyStore store = new PostgresIdempotencyStore(dataSource, "idempotency_keys");
            IdempotencyTemplate template = new IdempotencyTemplate(engine(dataSource, store, StaleClaimResolver.RERUN));
            ScopedKey key = new ScopedKey("", "events", "message-1");
            byte[] body = "{\"amount\":\"12.50\"}".getBytes(StandardCharsets.UTF_8);

            List<IdempotencyTemplate.Result> results = new ArrayList<>();
            for (int delivery = 0; delivery < 3; delivery++) {
                results.add(template.execute(key, body, () -> {
                    jdbc.update("insert into effects (message) values ('message-1')");
                    return "applied".getBytes(StandardCharsets.UTF_8);
                }));
            }

            assertThat(results).extracting(IdempotencyTemplate.Result::replayed).containsExactly(false, true, true);
            assertThat(results).allSatisfy(result -> assertThat(new String(result.value(), StandardCharsets.UTF_8))
                    .isEqualTo("applied"));
            assertThat(jdbc.queryForObject("select count(*) from effects", Integer.class)).isEqualTo(1);
            org.assertj.core.api.Assertions.assertThatThrownBy(() -> template.execute(key, "other".getBytes(), () -> null))
                    .isInstanceOfSatisfying(IdempotencyTemplate.KeyReusedException.class,
                            reused -> assertThat(reused.key()).isEqualTo(key));
        }
    }

    /**
     * The outbox the documentation describes: a row written by a callback before the commit of the work's transaction
     * (a {@code @TransactionalEventListener(phase = BEFORE_COMMIT)} of the work's event) joins that transaction, and
     * keeps the downstream key, which the callback reads from the work's context. It is the work's transaction, so
     * its context: without it, every execution fails at the commit and keeps nothing.
     */
    @ParameterizedTest
    @ValueSource(strings = {"ONE_TRANSACTION", "INTENT_FIRST"})
    void aCallbackBeforeTheCommitSeesTheWorksContext(IdempotencyMode mode) throws Exception {
        try (HikariDataSource dataSource = database(null)) {
            JdbcTemplate jdbc = new JdbcTemplate(dataSource);
            jdbc.execute("create table outbox (id bigserial primary key, downstream_key text not null)");
            PostgresIdempotencyStore store = new PostgresIdempotencyStore(dataSource, "idempotency_keys");
            IdempotencyEngine engine = engine(dataSource, store, StaleClaimResolver.RERUN);
            IdempotencyTemplate template = new IdempotencyTemplate(engine);
            ScopedKey key = new ScopedKey("", "events", UUID.randomUUID().toString());

            IdempotencyTemplate.Result result = template.execute(key, "m-1".getBytes(StandardCharsets.UTF_8), mode,
                    Duration.ofMinutes(1), () -> {
                        TransactionSynchronizationManager.registerSynchronization(new TransactionSynchronization() {
                            @Override
                            public void beforeCommit(boolean readOnly) {
                                jdbc.update("insert into outbox (downstream_key) values (?)",
                                        io.idempotency.core.IdempotencyContext.require().downstreamKey());
                            }
                        });
                        return "applied".getBytes(StandardCharsets.UTF_8);
                    });

            assertThat(result.replayed()).isFalse();
            assertThat(jdbc.queryForList("select downstream_key from outbox", String.class))
                    .containsExactly(engine.downstreamKey(key));
            assertThat(store.find(key).orElseThrow().status()).isEqualTo(RecordStatus.SUCCEEDED);
            engine.shutdown();
        }
    }

    /**
     * A message without a body (a Kafka tombstone, an AMQP message with only headers) is executed with a null input:
     * it is the empty input, so its redelivery is a replay, not a failure before the work could even be claimed.
     */
    @Test
    void aMessageWithoutABodyRunsOnceAndItsRedeliveryIsAReplay() throws Exception {
        try (HikariDataSource dataSource = database(null)) {
            JdbcTemplate jdbc = new JdbcTemplate(dataSource);
            jdbc.execute("create table effects (id bigserial primary key)");
            PostgresIdempotencyStore store = new PostgresIdempotencyStore(dataSource, "idempotency_keys");
            IdempotencyTemplate template = new IdempotencyTemplate(engine(dataSource, store, StaleClaimResolver.RERUN));
            ScopedKey key = new ScopedKey("", "tombstones", UUID.randomUUID().toString());

            List<IdempotencyTemplate.Result> results = new ArrayList<>();
            for (byte[] input : new byte[][] {null, null, new byte[0]}) {
                results.add(template.execute(key, input, () -> {
                    jdbc.update("insert into effects default values");
                    return "deleted".getBytes(StandardCharsets.UTF_8);
                }));
            }

            assertThat(results).extracting(IdempotencyTemplate.Result::replayed).containsExactly(false, true, true);
            assertThat(jdbc.queryForObject("select count(*) from effects", Integer.class)).isEqualTo(1);
        }
    }

    /**
     * Work with nothing to say returns null: that is a result like any other, stored as an empty one, so its
     * redelivery is a replay of an empty array — not a null a listener would have to tell from "not run".
     */
    @ParameterizedTest
    @ValueSource(strings = {"ONE_TRANSACTION", "INTENT_FIRST"})
    void aNullResultIsStoredAndReplayedAsAnEmptyOne(IdempotencyMode mode) throws Exception {
        try (HikariDataSource dataSource = database(null)) {
            JdbcTemplate jdbc = new JdbcTemplate(dataSource);
            jdbc.execute("create table effects (id bigserial primary key)");
            PostgresIdempotencyStore store = new PostgresIdempotencyStore(dataSource, "idempotency_keys");
            IdempotencyEngine engine = engine(dataSource, store, StaleClaimResolver.RERUN);
            IdempotencyTemplate template = new IdempotencyTemplate(engine);
            ScopedKey key = new ScopedKey("", "events", UUID.randomUUID().toString());
            byte[] message = "event-1".getBytes(StandardCharsets.UTF_8);

            List<IdempotencyTemplate.Result> results = new ArrayList<>();
            for (int delivery = 0; delivery < 2; delivery++) {
                results.add(template.execute(key, message, mode, Duration.ofMinutes(5), () -> {
                    jdbc.update("insert into effects default values");
                    return null;
                }));
            }

            assertThat(results).extracting(IdempotencyTemplate.Result::replayed).containsExactly(false, true);
            assertThat(results).allSatisfy(result -> assertThat(result.value()).isNotNull().isEmpty());
            assertThat(store.find(key).orElseThrow().status()).isEqualTo(RecordStatus.SUCCEEDED);
            assertThat(jdbc.queryForObject("select count(*) from effects", Integer.class)).isEqualTo(1);
            engine.shutdown();
        }
    }

    @ParameterizedTest
    @ValueSource(strings = {"ONE_TRANSACTION", "INTENT_FIRST"})
    void workInsideATransactionAlreadyOpenIsRefusedBeforeAnythingIsClaimed(IdempotencyMode mode) throws Exception {
        try (HikariDataSource dataSource = database(null)) {
            PostgresIdempotencyStore store = new PostgresIdempotencyStore(dataSource, "idempotency_keys");
            IdempotencyTemplate template = new IdempotencyTemplate(engine(dataSource, store, StaleClaimResolver.RERUN));
            ScopedKey key = new ScopedKey("", "orders-listener", UUID.randomUUID().toString());
            org.springframework.transaction.support.TransactionTemplate outer =
                    new org.springframework.transaction.support.TransactionTemplate(
                            new DataSourceTransactionManager(dataSource));

            // a listener whose own transaction would commit the claim and the work on its own schedule
            org.assertj.core.api.Assertions.assertThatThrownBy(() -> outer.executeWithoutResult(status -> {
                try {
                    template.execute(key, "m-1".getBytes(StandardCharsets.UTF_8), mode, Duration.ofMinutes(5),
                            () -> null);
                } catch (Exception e) {
                    throw new IllegalStateException(e);
                }
            })).hasRootCauseMessage("an idempotent execution must own its transaction, but one is already active on"
                    + " this thread: call IdempotencyTemplate.execute outside any transaction (not from a"
                    + " @Transactional method), and order @Idempotent outside @Transactional");
            assertThat(new JdbcTemplate(dataSource).queryForObject("select count(*) from idempotency_keys",
                    Integer.class)).isZero();
        }
    }

    /**
     * One message delivered to eight consumers at once, four on each of two instances (a redelivery racing the first
     * delivery, a broker that delivers to two queues): the work runs once, and every other delivery either gets its
     * result — never another message's — or is told to come back later, never a second run.
     */
    @ParameterizedTest
    @ValueSource(strings = {"ONE_TRANSACTION", "INTENT_FIRST"})
    void oneMessageOnEightConsumersOfTwoInstancesRunsOnce(IdempotencyMode mode) throws Exception {
        try (HikariDataSource dataSource = database(null)) {
            JdbcTemplate jdbc = new JdbcTemplate(dataSource);
            jdbc.execute("create table effects (id bigserial primary key, message text)");
            PostgresIdempotencyStore store = new PostgresIdempotencyStore(dataSource, "idempotency_keys");
            List<IdempotencyEngine> engines = List.of(engine(dataSource, store, StaleClaimResolver.RERUN),
                    engine(dataSource, store, StaleClaimResolver.RERUN)); // two instances
            ScopedKey key = new ScopedKey("", "payments-listener", UUID.randomUUID().toString());
            byte[] message = "{\"payment\":\"p-1\"}".getBytes(StandardCharsets.UTF_8);
            AtomicInteger runs = new AtomicInteger();
            ExecutorService consumers = Executors.newFixedThreadPool(8);
            CyclicBarrier together = new CyclicBarrier(8);
            List<Future<IdempotencyTemplate.Result>> deliveries = new ArrayList<>();
            for (int consumer = 0; consumer < 8; consumer++) {
                IdempotencyTemplate template = new IdempotencyTemplate(engines.get(consumer % 2));
                deliveries.add(consumers.submit(() -> {
                    together.await();
                    return template.execute(key, message, mode, Duration.ofMinutes(5), () -> {
                        int run = runs.incrementAndGet();
                        jdbc.update("insert into effects (message) values (?)", key.key());
                        Thread.sleep(100); // long enough for the others to meet the claim
                        return ("applied by run " + run).getBytes(StandardCharsets.UTF_8);
                    });
                }));
            }
            List<IdempotencyTemplate.Result> results = new ArrayList<>();
            int inProgress = 0;
            for (Future<IdempotencyTemplate.Result> delivery : deliveries) {
                try {
                    results.add(delivery.get(30, TimeUnit.SECONDS));
                } catch (java.util.concurrent.ExecutionException e) {
                    assertThat(e.getCause()).isInstanceOf(IdempotencyTemplate.InProgressException.class);
                    inProgress++;
                }
            }
            consumers.shutdownNow();

            assertThat(runs).as("the work ran once").hasValue(1);
            assertThat(jdbc.queryForObject("select count(*) from effects", Integer.class)).isEqualTo(1);
            assertThat(results).filteredOn(result -> !result.replayed()).hasSize(1);
            assertThat(results.size() + inProgress).isEqualTo(8);
            assertThat(results).allSatisfy(result -> assertThat(result.value()).asString(StandardCharsets.UTF_8)
                    .isEqualTo("applied by run 1"));
            IdempotencyTemplate.Result redelivered = new IdempotencyTemplate(engines.get(1)).execute(key, message,
                    mode, Duration.ofMinutes(5), () -> "ran again".getBytes(StandardCharsets.UTF_8));
            assertThat(redelivered.replayed()).isTrue();
            assertThat(redelivered.value()).asString(StandardCharsets.UTF_8).isEqualTo("applied by run 1");
            engines.forEach(IdempotencyEngine::shutdown);
        }
    }

    /**
     * What the work throws reaches the listener as the work threw it — a checked exception too, and a definite failure
     * in the default mode — so that its container tells a retryable failure from a fatal one as it would without the
     * template; its writes are rolled back with the claim, and the redelivery runs.
     */
    @Test
    void theWorksExceptionsReachTheListenerUnwrappedAndTheRedeliveryRuns() throws Exception {
        try (HikariDataSource dataSource = database(null)) {
            JdbcTemplate jdbc = new JdbcTemplate(dataSource);
            jdbc.execute("create table effects (id bigserial primary key)");
            PostgresIdempotencyStore store = new PostgresIdempotencyStore(dataSource, "idempotency_keys");
            IdempotencyTemplate template = new IdempotencyTemplate(engine(dataSource, store, StaleClaimResolver.RERUN));
            ScopedKey key = new ScopedKey("", "events", UUID.randomUUID().toString());
            byte[] message = "event-1".getBytes(StandardCharsets.UTF_8);

            for (Exception thrown : List.of(new java.io.IOException("the archive is unreachable"),
                    new io.idempotency.core.DefiniteFailureException("the event was refused"))) {
                org.assertj.core.api.Assertions.assertThatThrownBy(() -> template.execute(key, message, () -> {
                    jdbc.update("insert into effects default values");
                    throw thrown;
                })).isSameAs(thrown);
                assertThat(store.find(key)).isEmpty();
            }

            IdempotencyTemplate.Result redelivered = template.execute(key, message, () -> {
                jdbc.update("insert into effects default values");
                return "applied".getBytes(StandardCharsets.UTF_8);
            });
            assertThat(redelivered.replayed()).isFalse();
            assertThat(jdbc.queryForObject("select count(*) from effects", Integer.class)).isEqualTo(1);
        }
    }

    /**
     * Work written in a language without checked exceptions (Kotlin) may throw a {@code Throwable} that is neither an
     * {@code Exception} nor an {@code Error}. It is a failure of the work like any other: it reaches the listener as
     * thrown, the execution ends — no transaction stays bound to the consumer's thread, which would refuse every later
     * message on it, no uncommitted claim holds the key, no renewal keeps an intent-first claim alive for ever — and
     * the redelivery runs (in intent-first mode once the lease has run out and the resolver said "rerun").
     */
    @ParameterizedTest
    @ValueSource(strings = {"ONE_TRANSACTION", "INTENT_FIRST"})
    void workThatThrowsAThrowableOfNeitherKindEndsItsExecutionAndTheRedeliveryRuns(IdempotencyMode mode)
            throws Exception {
        try (HikariDataSource dataSource = database(null)) {
            JdbcTemplate jdbc = new JdbcTemplate(dataSource);
            jdbc.execute("create table effects (id bigserial primary key)");
            PostgresIdempotencyStore store = new PostgresIdempotencyStore(dataSource, "idempotency_keys");
            IdempotencyEngine engine = engine(dataSource, store, StaleClaimResolver.RERUN);
            IdempotencyEngine otherInstance = engine(dataSource, store, StaleClaimResolver.RERUN);
            IdempotencyTemplate template = new IdempotencyTemplate(engine);
            ScopedKey key = new ScopedKey("", "events", UUID.randomUUID().toString());
            byte[] message = "event-1".getBytes(StandardCharsets.UTF_8);
            Duration lease = Duration.ofMillis(200);
            Throwable thrown = new Throwable("thrown by a Kotlin listener");

            // on a consumer thread of its own: a transaction left bound to it must not spill into the other tests
            CompletableFuture<Throwable> failure = new CompletableFuture<>();
            CompletableFuture<IdempotencyTemplate.Result> nextMessage = new CompletableFuture<>();
            Thread consumer = new Thread(() -> {
                try {
                    template.execute(key, message, mode, lease, () -> {
                        jdbc.update("insert into effects default values");
                        return IntentFirstEngineIntegrationTest.<RuntimeException>sneakyThrow(thrown);
                    });
                    failure.complete(null);
                } catch (Throwable e) {
                    failure.complete(e);
                }
                try { // the next message this consumer handles
                    nextMessage.complete(template.execute(new ScopedKey("", "events", UUID.randomUUID().toString()),
                            message, mode, lease, () -> "applied".getBytes(StandardCharsets.UTF_8)));
                } catch (Throwable e) {
                    nextMessage.completeExceptionally(e);
                }
            });
            consumer.start();

            assertThat(failure.get(10, TimeUnit.SECONDS)).as("what the work threw").isSameAs(thrown);
            assertThat(nextMessage.get(10, TimeUnit.SECONDS).replayed()).as("the consumer's next message runs")
                    .isFalse();
            consumer.join(10_000);
            if (mode == IdempotencyMode.INTENT_FIRST) {
                Thread.sleep(lease.toMillis() * 3); // an unknown outcome: the claim waits for its lease to run out
            }
            IdempotencyTemplate.Result redelivered = new IdempotencyTemplate(otherInstance).execute(key, message, mode,
                    lease, () -> {
                        jdbc.update("insert into effects default values");
                        return "applied".getBytes(StandardCharsets.UTF_8);
                    });
            assertThat(redelivered.replayed()).isFalse();
            assertThat(jdbc.queryForObject("select count(*) from effects", Integer.class)).isEqualTo(1);
            engine.shutdown();
            otherInstance.shutdown();
        }
    }

    @SuppressWarnings("unchecked")
    private static <E extends Throwable> byte[] sneakyThrow(Throwable thrown) throws E {
        throw (E) thrown;
    }

    /**
     * Work that catches the failure of one of its statements and returns all the same (a duplicate it means to
     * tolerate): PostgreSQL has aborted the transaction, so the result cannot be stored with it. The template says so
     * with {@code CommitFailedException}, keeps nothing — neither the work's other writes nor, in the default mode, the
     * claim — and the redelivery runs the work again, which fails the same way while the work swallows the failure.
     */
    @Test
    void workThatSwallowsAFailedStatementKeepsNothingAndFailsAsACommitFailure() throws Exception {
        try (HikariDataSource dataSource = database(null)) {
            JdbcTemplate jdbc = new JdbcTemplate(dataSource);
            jdbc.execute("create table payments (reference text primary key)");
            jdbc.execute("create table effects (id bigserial primary key)");
            jdbc.update("insert into payments values ('p-1')");
            PostgresIdempotencyStore store = new PostgresIdempotencyStore(dataSource, "idempotency_keys");
            IdempotencyTemplate template = new IdempotencyTemplate(engine(dataSource, store, StaleClaimResolver.RERUN));
            ScopedKey key = new ScopedKey("", "payments-listener", UUID.randomUUID().toString());
            byte[] message = "p-1".getBytes(StandardCharsets.UTF_8);

            for (int delivery = 0; delivery < 2; delivery++) {
                org.assertj.core.api.Assertions.assertThatThrownBy(() -> template.execute(key, message, () -> {
                    jdbc.update("insert into effects default values");
                    try {
                        jdbc.update("insert into payments values ('p-1')");
                    } catch (org.springframework.dao.DuplicateKeyException alreadyBooked) {
                        return "already booked".getBytes(StandardCharsets.UTF_8);
                    }
                    return "booked".getBytes(StandardCharsets.UTF_8);
                })).isInstanceOf(io.idempotency.core.CommitFailedException.class)
                        .satisfies(failed -> assertThat(((io.idempotency.core.CommitFailedException) failed)
                                .outcomeUnknown()).isFalse());
                assertThat(store.find(key)).isEmpty();
            }
            assertThat(jdbc.queryForObject("select count(*) from effects", Integer.class)).isZero();
        }
    }

    /**
     * Work that calls code joining its transaction (a {@code @Transactional} service, a {@code TransactionTemplate})
     * which fails, catches that failure and returns: Spring has marked the transaction rollback-only, so the result
     * cannot be stored with it. {@code CommitFailedException} says so — with a known outcome: nothing was committed —
     * and nothing of the run is kept; in intent-first mode the claim stays PROCESSING, as after a failure of the work.
     */
    @ParameterizedTest
    @ValueSource(strings = {"ONE_TRANSACTION", "INTENT_FIRST"})
    void workThatSwallowsTheFailureOfCodeJoiningItsTransactionKeepsNothing(IdempotencyMode mode) throws Exception {
        try (HikariDataSource dataSource = database(null)) {
            JdbcTemplate jdbc = new JdbcTemplate(dataSource);
            jdbc.execute("create table effects (id bigserial primary key)");
            PostgresIdempotencyStore store = new PostgresIdempotencyStore(dataSource, "idempotency_keys");
            IdempotencyEngine engine = engine(dataSource, store, StaleClaimResolver.RERUN);
            IdempotencyTemplate template = new IdempotencyTemplate(engine);
            org.springframework.transaction.support.TransactionTemplate service =
                    new org.springframework.transaction.support.TransactionTemplate(
                            new DataSourceTransactionManager(dataSource));
            ScopedKey key = new ScopedKey("", "payments-listener", UUID.randomUUID().toString());

            org.assertj.core.api.Assertions.assertThatThrownBy(() -> template.execute(key,
                            "p-1".getBytes(StandardCharsets.UTF_8), mode, Duration.ofMinutes(5), () -> {
                                jdbc.update("insert into effects default values");
                                try {
                                    service.executeWithoutResult(status -> {
                                        throw new IllegalStateException("the account is frozen");
                                    });
                                } catch (IllegalStateException tolerated) {
                                    return "skipped".getBytes(StandardCharsets.UTF_8);
                                }
                                return "booked".getBytes(StandardCharsets.UTF_8);
                            }))
                    .isInstanceOfSatisfying(io.idempotency.core.CommitFailedException.class,
                            failed -> assertThat(failed.outcomeUnknown()).isFalse())
                    .hasRootCauseInstanceOf(org.springframework.transaction.UnexpectedRollbackException.class);

            assertThat(jdbc.queryForObject("select count(*) from effects", Integer.class)).isZero();
            if (mode == IdempotencyMode.INTENT_FIRST) {
                assertThat(store.find(key).orElseThrow().status()).isEqualTo(RecordStatus.PROCESSING);
            } else {
                assertThat(store.find(key)).isEmpty();
            }
            engine.shutdown();
        }
    }

    /**
     * The resolver is asked about the template's stale claims as about an endpoint's: a redelivery that meets the
     * claim of a delivery whose outcome was unknown, once its lease has run out, gets the body of the resolver's
     * {@code complete} answer as the replayed result (its status is not used), and the work does not run again.
     */
    @Test
    void aStaleClaimOfTheTemplateResolvedAsCompleteIsReplayedToTheRedelivery() throws Exception {
        try (HikariDataSource dataSource = database(null)) {
            PostgresIdempotencyStore store = new PostgresIdempotencyStore(dataSource, "idempotency_keys");
            List<StaleClaimResolver.StaleClaim> asked = new java.util.concurrent.CopyOnWriteArrayList<>();
            IdempotencyEngine engine = engine(dataSource, store, claim -> {
                asked.add(claim);
                return StaleClaimResolver.Resolution.complete(new StoredResponse(201, List.of(),
                        "charged before".getBytes(StandardCharsets.UTF_8)));
            });
            IdempotencyTemplate template = new IdempotencyTemplate(engine);
            ScopedKey key = new ScopedKey("", "charges-listener", UUID.randomUUID().toString());
            byte[] message = "charge-1".getBytes(StandardCharsets.UTF_8);
            Duration lease = Duration.ofMillis(100);
            AtomicInteger runs = new AtomicInteger();

            java.net.SocketTimeoutException timeout = new java.net.SocketTimeoutException("the gateway did not answer");
            org.assertj.core.api.Assertions.assertThatThrownBy(() -> template.execute(key, message,
                    IdempotencyMode.INTENT_FIRST, lease, () -> {
                        runs.incrementAndGet();
                        throw timeout;
                    })).isSameAs(timeout);
            Thread.sleep(lease.toMillis() * 3);

            IdempotencyTemplate.Result redelivered = template.execute(key, message, IdempotencyMode.INTENT_FIRST,
                    lease, () -> {
                        runs.incrementAndGet();
                        return "charged again".getBytes(StandardCharsets.UTF_8);
                    });
            assertThat(redelivered.replayed()).isTrue();
            assertThat(redelivered.value()).asString(StandardCharsets.UTF_8).isEqualTo("charged before");
            assertThat(runs).hasValue(1);
            assertThat(asked).singleElement().satisfies(claim -> {
                assertThat(claim.key()).isEqualTo(key);
                assertThat(claim.downstreamKey()).isEqualTo(engine.downstreamKey(key));
            });
            engine.shutdown();
        }
    }

    /**
     * A consumer that waits for another instance's intent-first run of its message is interrupted (its listener
     * container is stopping): it is told at once to come back later, as a consumer waiting behind a run of its own
     * instance is, with the interrupt kept — not failed as if the listener were wrong, which a container that
     * dead-letters such failures would do to a message nothing is wrong with.
     */
    @Test
    void aConsumerInterruptedWhileAnotherInstanceRunsItsMessageIsToldToComeBackLater() throws Exception {
        try (HikariDataSource dataSource = database(null)) {
            PostgresIdempotencyStore store = new PostgresIdempotencyStore(dataSource, "idempotency_keys");
            IdempotencyEngine running = engine(dataSource, store, StaleClaimResolver.RERUN);
            IdempotencyEngine waiting = engine(store, transactions(dataSource), Duration.ofSeconds(20),
                    StaleClaimResolver.RERUN);
            ScopedKey key = new ScopedKey("", "charges-listener", UUID.randomUUID().toString());
            byte[] message = "charge-1".getBytes(StandardCharsets.UTF_8);
            String fingerprint = io.idempotency.core.RequestFingerprint.of("EXECUTE", key.scope(), null, message);
            IdempotencyEngine.Proceed first = (IdempotencyEngine.Proceed) running.start(key, fingerprint,
                    IdempotencyMode.INTENT_FIRST, Duration.ofMinutes(5));

            CompletableFuture<Throwable> failure = new CompletableFuture<>();
            CompletableFuture<Boolean> stillInterrupted = new CompletableFuture<>();
            AtomicInteger runs = new AtomicInteger();
            Thread consumer = new Thread(() -> {
                try {
                    new IdempotencyTemplate(waiting).execute(key, message, IdempotencyMode.INTENT_FIRST,
                            Duration.ofMinutes(5), () -> new byte[runs.incrementAndGet()]);
                    failure.complete(null);
                } catch (Throwable e) {
                    failure.complete(e);
                }
                stillInterrupted.complete(Thread.currentThread().isInterrupted());
            });
            consumer.start();
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
            while (consumer.getState() != Thread.State.TIMED_WAITING) { // polling the other instance's claim
                assertThat(System.nanoTime()).isLessThan(deadline);
                Thread.sleep(5);
            }

            consumer.interrupt();
            assertThat(failure.get(5, TimeUnit.SECONDS)).isInstanceOfSatisfying(
                    IdempotencyTemplate.InProgressException.class, busy -> assertThat(busy.key()).isEqualTo(key));
            assertThat(stillInterrupted.get(5, TimeUnit.SECONDS)).as("the interrupt is kept for the container")
                    .isTrue();
            assertThat(runs).hasValue(0);
            first.execution().finish(new StoredResponse(200, List.of(), null));
            running.shutdown();
            waiting.shutdown();
        }
    }

    /**
     * Work that calls the template again with its own key (a listener re-dispatching the message it is handling) runs
     * inside the transaction of the first call, like any nested use: it is refused at once, and not told "in progress"
     * by waiting for itself — a redelivery signal that would only make the broker hand the message back again, and
     * again — nor "key reused" for input of its own.
     */
    @ParameterizedTest
    @ValueSource(strings = {"ONE_TRANSACTION", "INTENT_FIRST"})
    void workThatExecutesItsOwnKeyAgainIsRefusedAsNestedUse(IdempotencyMode mode) throws Exception {
        try (HikariDataSource dataSource = database(null)) {
            JdbcTemplate jdbc = new JdbcTemplate(dataSource);
            jdbc.execute("create table effects (id bigserial primary key)");
            PostgresIdempotencyStore store = new PostgresIdempotencyStore(dataSource, "idempotency_keys");
            IdempotencyEngine engine = engine(dataSource, store, StaleClaimResolver.RERUN);
            IdempotencyTemplate template = new IdempotencyTemplate(engine);
            ScopedKey key = new ScopedKey("", "orders-listener", UUID.randomUUID().toString());
            byte[] message = "m-1".getBytes(StandardCharsets.UTF_8);
            Duration lease = Duration.ofMinutes(5);

            for (byte[] nestedInput : new byte[][] {message, "m-2".getBytes(StandardCharsets.UTF_8)}) {
                org.assertj.core.api.Assertions.assertThatThrownBy(() -> template.execute(key, message, mode, lease,
                        () -> {
                            jdbc.update("insert into effects default values");
                            return template.execute(key, nestedInput, mode, lease, () -> null).value();
                        }))
                        .isInstanceOf(IllegalStateException.class)
                        .hasMessageContaining("already running on this thread");
                if (mode == IdempotencyMode.INTENT_FIRST) {
                    // as after any other failure of the work: an unknown outcome, for the resolver; start afresh
                    jdbc.update("delete from idempotency_keys");
                }
            }

            assertThat(jdbc.queryForObject("select count(*) from effects", Integer.class)).isZero();
            assertThat(store.find(key)).isEmpty();
            IdempotencyTemplate.Result redelivered = template.execute(key, message, mode, lease,
                    () -> "applied".getBytes(StandardCharsets.UTF_8));
            assertThat(redelivered.replayed()).isFalse();
            engine.shutdown();
        }
    }

    /**
     * The mode is no part of a claim's record, and only an intent-first retry takes a stale claim over. A consumer
     * redeployed from intent-first to the default mode, whose message's intent-first claim went stale before the
     * switch (its work failed, an unknown outcome), is told "in progress" on every redelivery, also once the lease has
     * run out — the work never runs beside a claim nobody resolved — until a sweeper resolves the claim, as the docs
     * say; after the sweeper's {@code rerun} (FAILED) the redelivery runs in the default mode.
     */
    @Test
    void aStaleIntentFirstClaimWaitsForTheSweeperWhenItsConsumerNowRunsInTheDefaultMode() throws Exception {
        try (HikariDataSource dataSource = database(null)) {
            JdbcTemplate jdbc = new JdbcTemplate(dataSource);
            jdbc.execute("create table effects (id bigserial primary key)");
            PostgresIdempotencyStore store = new PostgresIdempotencyStore(dataSource, "idempotency_keys");
            IdempotencyEngine engine = engine(dataSource, store, StaleClaimResolver.RERUN);
            IdempotencyTemplate template = new IdempotencyTemplate(engine);
            ScopedKey key = new ScopedKey("", "payments-listener", UUID.randomUUID().toString());
            byte[] message = "m-1".getBytes(StandardCharsets.UTF_8);
            java.util.concurrent.Callable<byte[]> work = () -> {
                jdbc.update("insert into effects default values");
                return "applied".getBytes(StandardCharsets.UTF_8);
            };
            org.assertj.core.api.Assertions.assertThatThrownBy(() -> template.execute(key, message,
                    IdempotencyMode.INTENT_FIRST, Duration.ofMillis(200), () -> {
                        throw new java.io.IOException("the gateway did not answer");
                    })).isInstanceOf(java.io.IOException.class);
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
            while (!store.find(key).orElseThrow().leaseExpired() && System.nanoTime() - deadline < 0) {
                Thread.sleep(20);
            }
            assertThat(store.find(key).orElseThrow().leaseExpired()).as("the claim's lease has run out").isTrue();

            for (int redelivery = 0; redelivery < 2; redelivery++) {
                org.assertj.core.api.Assertions.assertThatThrownBy(() -> template.execute(key, message, work))
                        .isInstanceOf(IdempotencyTemplate.InProgressException.class);
            }
            assertThat(store.find(key).orElseThrow().status()).isEqualTo(RecordStatus.PROCESSING);
            assertThat(jdbc.queryForObject("select count(*) from effects", Integer.class)).isZero();

            StaleClaimSweeper.Sweep sweep = new StaleClaimSweeper(store, StaleClaimResolver.RERUN,
                    new DownstreamKeys("secret"), Duration.ofSeconds(30), 100).sweep();
            assertThat(sweep.resolved()).isEqualTo(1);
            IdempotencyTemplate.Result redelivered = template.execute(key, message, work);
            assertThat(redelivered.replayed()).isFalse();
            assertThat(store.find(key).orElseThrow().status()).isEqualTo(RecordStatus.SUCCEEDED);
            assertThat(jdbc.queryForObject("select count(*) from effects", Integer.class)).isEqualTo(1);
            engine.shutdown();
        }
    }

    /**
     * Work that calls the template with a key of another message (a listener handing on to the next step) runs inside
     * the transaction of its own execution, so the inner call is refused as any call with a transaction open — also
     * when the other key's result is kept in memory, which would otherwise replay it to work whose writes may still
     * roll back. Nothing of the inner call is claimed; the outer work's writes roll back, as after any failure of the
     * work (in intent-first mode its claim stays for the resolver).
     */
    @ParameterizedTest
    @ValueSource(strings = {"ONE_TRANSACTION", "INTENT_FIRST"})
    void workThatExecutesAnotherKeyIsRefusedAlsoWhenThatKeysResultIsKeptInMemory(IdempotencyMode mode)
            throws Exception {
        try (HikariDataSource dataSource = database(null)) {
            JdbcTemplate jdbc = new JdbcTemplate(dataSource);
            jdbc.execute("create table effects (id bigserial primary key)");
            PostgresIdempotencyStore store = new PostgresIdempotencyStore(dataSource, "idempotency_keys");
            IdempotencyEngine engine = engine(dataSource, store, StaleClaimResolver.RERUN);
            IdempotencyTemplate template = new IdempotencyTemplate(engine);
            ScopedKey outer = new ScopedKey("", "orders-listener", UUID.randomUUID().toString());
            ScopedKey done = new ScopedKey("", "shipping-listener", UUID.randomUUID().toString());
            ScopedKey fresh = new ScopedKey("", "shipping-listener", UUID.randomUUID().toString());
            byte[] message = "m-1".getBytes(StandardCharsets.UTF_8);
            Duration lease = Duration.ofMinutes(5);
            template.execute(done, message, () -> "shipped".getBytes(StandardCharsets.UTF_8));

            for (ScopedKey inner : List.of(done, fresh)) {
                org.assertj.core.api.Assertions.assertThatThrownBy(() -> template.execute(outer, message, mode, lease,
                                () -> {
                                    jdbc.update("insert into effects default values");
                                    return template.execute(inner, message, () -> null).value();
                                }))
                        .isInstanceOf(IllegalStateException.class)
                        .hasMessageContaining("already active on this thread");
                if (mode == IdempotencyMode.INTENT_FIRST) {
                    assertThat(store.find(outer).orElseThrow().status()).isEqualTo(RecordStatus.PROCESSING);
                    jdbc.update("delete from idempotency_keys where idempotency_key = ?", outer.key());
                }
            }

            assertThat(jdbc.queryForObject("select count(*) from effects", Integer.class)).isZero();
            assertThat(store.find(outer)).isEmpty();
            assertThat(store.find(fresh)).isEmpty();
            assertThat(store.find(done).orElseThrow().status()).isEqualTo(RecordStatus.SUCCEEDED);
            engine.shutdown();
        }
    }

    /**
     * After its commit a transaction still shows as active to the callbacks Spring runs then (a
     * {@code @TransactionalEventListener} of phase {@code AFTER_COMMIT}, an {@code afterCommit}), and their data access
     * would join it: the template is refused there too, before anything is claimed, as the docs say.
     */
    @Test
    void workInACallbackAfterTheCommitOfAnotherTransactionIsRefused() throws Exception {
        try (HikariDataSource dataSource = database(null)) {
            PostgresIdempotencyStore store = new PostgresIdempotencyStore(dataSource, "idempotency_keys");
            IdempotencyTemplate template = new IdempotencyTemplate(engine(dataSource, store, StaleClaimResolver.RERUN));
            ScopedKey key = new ScopedKey("", "orders-listener", UUID.randomUUID().toString());
            CompletableFuture<Throwable> refusal = new CompletableFuture<>();
            org.springframework.transaction.support.TransactionTemplate outer =
                    new org.springframework.transaction.support.TransactionTemplate(
                            new DataSourceTransactionManager(dataSource));
            org.springframework.transaction.support.TransactionSynchronization afterCommit =
                    new org.springframework.transaction.support.TransactionSynchronization() {
                        @Override
                        public void afterCommit() {
                            try {
                                template.execute(key, new byte[0], () -> null);
                                refusal.complete(null);
                            } catch (Throwable e) {
                                refusal.complete(e);
                            }
                        }
                    };
            outer.executeWithoutResult(status -> org.springframework.transaction.support
                    .TransactionSynchronizationManager.registerSynchronization(afterCommit));

            assertThat(refusal.get(5, TimeUnit.SECONDS)).isInstanceOf(IllegalStateException.class)
                    .hasMessageContaining("already active on this thread");
            assertThat(store.find(key)).isEmpty();
        }
    }

    /**
     * Intent-first work whose claim was taken over while it ran (its lease ran out, say, during a long pause, and a
     * retry or a sweeper took the claim) is refused with {@code LeaseLostException}, as the template's javadoc says:
     * its local writes are rolled back, and the new holder's claim is left as it is.
     */
    @Test
    void intentFirstWorkWhoseClaimWasTakenOverMeanwhileIsRefusedAndItsWritesRolledBack() throws Exception {
        try (HikariDataSource dataSource = database(null)) {
            JdbcTemplate jdbc = new JdbcTemplate(dataSource);
            jdbc.execute("create table effects (id bigserial primary key)");
            PostgresIdempotencyStore store = new PostgresIdempotencyStore(dataSource, "idempotency_keys");
            IdempotencyEngine engine = engine(dataSource, store, StaleClaimResolver.RERUN);
            IdempotencyTemplate template = new IdempotencyTemplate(engine);
            ScopedKey key = new ScopedKey("", "charges-listener", UUID.randomUUID().toString());
            List<String> newHolder = new ArrayList<>();

            org.assertj.core.api.Assertions.assertThatThrownBy(() -> template.execute(key,
                    "m-1".getBytes(StandardCharsets.UTF_8), IdempotencyMode.INTENT_FIRST, Duration.ofMinutes(5), () -> {
                        jdbc.update("insert into effects default values");
                        // another instance, on connections of its own: the lease has run out, and it takes over
                        Async.run(() -> {
                            new JdbcTemplate(dataSource).update("update idempotency_keys"
                                    + " set locked_until = now() - interval '1 second' where idempotency_key = ?",
                                    key.key());
                            String expired = store.find(key).orElseThrow().fencingToken();
                            newHolder.add(store.takeOver(key, expired, DAY).orElseThrow());
                        }).get(10, TimeUnit.SECONDS);
                        return "charged".getBytes(StandardCharsets.UTF_8);
                    }))
                    .isInstanceOfSatisfying(io.idempotency.core.LeaseLostException.class,
                            lost -> assertThat(lost.getMessage()).contains(key.key()));

            assertThat(jdbc.queryForObject("select count(*) from effects", Integer.class))
                    .as("the work's writes were rolled back").isZero();
            IdempotencyRecord record = store.find(key).orElseThrow();
            assertThat(record.status()).as("the new holder's claim, not the old holder's answer")
                    .isEqualTo(RecordStatus.PROCESSING);
            assertThat(record.fencingToken()).isEqualTo(newHolder.get(0));
            engine.shutdown();
        }
    }

    /**
     * A holder that has recorded its result but stalls before its commit ends (a long pause, a partition; here in the
     * callbacks that run after those before the commit, once the answer is written) until its lease has run out still
     * holds the record's row. A redelivery meanwhile is told "in progress" within its wait instead of waiting for that
     * row, a sweep passes the claim by instead of stopping at it, and nobody asks the resolver: once the holder
     * commits, the redelivery gets its result.
     */
    @Test
    void aHolderStalledInItsCommitPastItsLeaseKeepsNoRedeliveryNorSweepWaiting() throws Exception {
        try (HikariDataSource dataSource = database(null)) {
            PostgresIdempotencyStore store = new PostgresIdempotencyStore(dataSource, "idempotency_keys");
            AtomicInteger consulted = new AtomicInteger();
            StaleClaimResolver resolver = countingReruns(consulted);
            IdempotencyEngine holding = engine(dataSource, store, resolver);
            IdempotencyEngine other = engine(dataSource, store, resolver); // another instance
            ScopedKey key = new ScopedKey("", "charges-listener", UUID.randomUUID().toString());
            byte[] message = "m-1".getBytes(StandardCharsets.UTF_8);
            Duration lease = Duration.ofMillis(300);
            CountDownLatch committing = new CountDownLatch(1);
            CountDownLatch resume = new CountDownLatch(1);
            CompletableFuture<IdempotencyTemplate.Result> holder = Async.supply(() -> execute(holding, key, message,
                    lease, stallingAtTheCommit(true, committing, resume)));
            try {
                assertThat(committing.await(10, TimeUnit.SECONDS)).isTrue();
                Thread.sleep(lease.toMillis() + 200); // the lease runs out while the holder commits
                assertThat(store.findExpiredLeases(100)).extracting(IdempotencyRecord::key).contains(key);

                CompletableFuture<IdempotencyTemplate.Result> redelivery = Async.supply(() -> execute(other, key,
                        message, lease, () -> "ran again".getBytes(StandardCharsets.UTF_8)));
                org.assertj.core.api.Assertions.assertThatThrownBy(() -> redelivery.get(5, TimeUnit.SECONDS))
                        .as("the redelivery is told to come back later")
                        .hasCauseInstanceOf(IdempotencyTemplate.InProgressException.class);
                StaleClaimSweeper.Sweep sweep = CompletableFuture.supplyAsync(() -> new StaleClaimSweeper(store,
                                resolver, new DownstreamKeys("secret"), Duration.ofSeconds(30), 100).sweep(),
                        Async.THREAD_PER_TASK).get(5, TimeUnit.SECONDS);
                assertThat(sweep.resolved()).as("the claim is being finished: not the sweeper's").isZero();
            } finally {
                resume.countDown();
            }

            IdempotencyTemplate.Result recorded = holder.get(10, TimeUnit.SECONDS);
            assertThat(recorded.replayed()).isFalse();
            IdempotencyTemplate.Result redelivered = execute(other, key, message, lease,
                    () -> "ran again".getBytes(StandardCharsets.UTF_8));
            assertThat(redelivered.replayed()).isTrue();
            assertThat(redelivered.value()).asString(StandardCharsets.UTF_8).isEqualTo("charged");
            assertThat(consulted).as("the resolver is not asked about a claim being finished").hasValue(0);
            holding.shutdown();
            other.shutdown();
        }
    }

    /**
     * Callbacks that run before the commit (a {@code BEFORE_COMMIT} listener publishing to a slow broker) run before
     * the answer is written, and may outlast the lease: the holder keeps renewing it until the answer is written, so a
     * redelivery meanwhile is told "in progress", nobody asks the resolver, and the holder's result stands.
     */
    @Test
    void aSlowCallbackBeforeTheCommitKeepsTheLeaseRenewed() throws Exception {
        try (HikariDataSource dataSource = database(null)) {
            PostgresIdempotencyStore store = new PostgresIdempotencyStore(dataSource, "idempotency_keys");
            AtomicInteger consulted = new AtomicInteger();
            StaleClaimResolver resolver = countingReruns(consulted);
            IdempotencyEngine holding = engine(dataSource, store, resolver);
            IdempotencyEngine other = engine(dataSource, store, resolver); // another instance
            ScopedKey key = new ScopedKey("", "charges-listener", UUID.randomUUID().toString());
            byte[] message = "m-1".getBytes(StandardCharsets.UTF_8);
            // long enough that a renewal late by a busy machine's pause still comes in time
            Duration lease = Duration.ofMillis(1500);
            CountDownLatch committing = new CountDownLatch(1);
            CountDownLatch resume = new CountDownLatch(1);
            CompletableFuture<IdempotencyTemplate.Result> holder = Async.supply(() -> execute(holding, key, message,
                    lease, stallingAtTheCommit(false, committing, resume)));
            try {
                assertThat(committing.await(10, TimeUnit.SECONDS)).isTrue();
                Thread.sleep(2 * lease.toMillis()); // longer than the lease
                assertThat(store.findExpiredLeases(100)).extracting(IdempotencyRecord::key).doesNotContain(key);
                org.assertj.core.api.Assertions.assertThatThrownBy(() -> execute(other, key, message, lease,
                                () -> "ran again".getBytes(StandardCharsets.UTF_8)))
                        .as("the redelivery is told to come back later")
                        .isInstanceOf(IdempotencyTemplate.InProgressException.class);
            } finally {
                resume.countDown();
            }

            assertThat(holder.get(10, TimeUnit.SECONDS).replayed()).isFalse();
            IdempotencyTemplate.Result redelivered = execute(other, key, message, lease,
                    () -> "ran again".getBytes(StandardCharsets.UTF_8));
            assertThat(redelivered.replayed()).isTrue();
            assertThat(redelivered.value()).asString(StandardCharsets.UTF_8).isEqualTo("charged");
            assertThat(consulted).as("the claim was never stale").hasValue(0);
            holding.shutdown();
            other.shutdown();
        }
    }

    /** A resolver that answers "rerun" and counts how often it was asked. */
    private static StaleClaimResolver countingReruns(AtomicInteger consulted) {
        return claim -> {
            consulted.incrementAndGet();
            return StaleClaimResolver.Resolution.rerun();
        };
    }

    /**
     * Work whose commit stalls, once {@code committing} is counted down, until {@code resume} is: after its answer is
     * written ({@code afterTheAnswer}: in the callbacks that run after those before the commit), or before it (in a
     * callback that runs before the commit, as a {@code BEFORE_COMMIT} listener does).
     */
    private static java.util.concurrent.Callable<byte[]> stallingAtTheCommit(boolean afterTheAnswer,
                                                                           CountDownLatch committing,
                                                                           CountDownLatch resume) {
        return () -> {
            TransactionSynchronizationManager.registerSynchronization(new TransactionSynchronization() {
                @Override
                public void beforeCommit(boolean readOnly) {
                    if (!afterTheAnswer) {
                        stall();
                    }
                }

                @Override
                public void beforeCompletion() {
                    if (afterTheAnswer) {
                        stall();
                    }
                }

                private void stall() {
                    committing.countDown();
                    try {
                        resume.await(30, TimeUnit.SECONDS);
                    } catch (InterruptedException e) {
                        Thread.currentThread().interrupt();
                    }
                }
            });
            return "charged".getBytes(StandardCharsets.UTF_8);
        };
    }

    /** {@code work} run intent-first under {@code key} through a template on {@code engine}; its failure unchecked. */
    static IdempotencyTemplate.Result execute(IdempotencyEngine engine, ScopedKey key, byte[] message,
                                              Duration lease, java.util.concurrent.Callable<byte[]> work) {
        try {
            return new IdempotencyTemplate(engine).execute(key, message, IdempotencyMode.INTENT_FIRST, lease, work);
        } catch (RuntimeException e) {
            throw e;
        } catch (Exception e) {
            throw new java.util.concurrent.CompletionException(e);
        }
    }

    /**
     * Once the engine has been shut down (the application context closes), intent-first work is refused with
     * {@code EngineShutDownException} (an {@code IllegalStateException} a listener can tell from its own mistakes, to
     * give the message back), as the template's javadoc says: the work does not run, and the claim it took is
     * not kept from anyone — a redelivery to another instance runs at once.
     */
    @Test
    void intentFirstWorkAfterTheEngineWasShutDownIsRefusedAndKeepsTheKeyFromNoOne() throws Exception {
        try (HikariDataSource dataSource = database(null)) {
            PostgresIdempotencyStore store = new PostgresIdempotencyStore(dataSource, "idempotency_keys");
            IdempotencyEngine engine = engine(dataSource, store, StaleClaimResolver.RERUN);
            IdempotencyTemplate template = new IdempotencyTemplate(engine);
            ScopedKey key = new ScopedKey("", "charges-listener", UUID.randomUUID().toString());
            byte[] message = "m-1".getBytes(StandardCharsets.UTF_8);
            AtomicInteger runs = new AtomicInteger();
            engine.shutdown();

            org.assertj.core.api.Assertions.assertThatThrownBy(() -> template.execute(key, message,
                    IdempotencyMode.INTENT_FIRST, Duration.ofMinutes(5), () -> {
                        runs.incrementAndGet();
                        return null;
                    })).isInstanceOf(io.idempotency.core.EngineShutDownException.class)
                    .hasMessageContaining("shut down");

            assertThat(runs).as("the work did not run").hasValue(0);
            assertThat(store.find(key)).as("no claim kept").isEmpty();
            IdempotencyEngine other = engine(dataSource, store, StaleClaimResolver.RERUN);
            IdempotencyTemplate.Result redelivered = new IdempotencyTemplate(other).execute(key, message,
                    IdempotencyMode.INTENT_FIRST, Duration.ofMinutes(5), () -> {
                        runs.incrementAndGet();
                        return "charged".getBytes(StandardCharsets.UTF_8);
                    });
            assertThat(redelivered.replayed()).isFalse();
            assertThat(runs).hasValue(1);
            other.shutdown();
        }
    }

    /** The retry of {@code key}'s request runs (it is not told "in progress"), and its answer is stored. */
    private static void assertTheRetryRuns(IdempotencyEngine engine, PostgresIdempotencyStore store, ScopedKey key,
                                           Duration lease) {
        IdempotencyEngine.Start retry = engine.start(key, HASH, IdempotencyMode.INTENT_FIRST, lease);
        if (retry instanceof IdempotencyEngine.Proceed proceed) {
            proceed.execution().finish(new StoredResponse(201, List.of(), null));
        }
        engine.shutdown();
        assertThat(retry).isInstanceOf(IdempotencyEngine.Proceed.class);
        assertThat(store.find(key).orElseThrow().status()).isEqualTo(RecordStatus.SUCCEEDED);
    }

    /** Starting {@code key}'s request fails, as the pool has no connection for its work's transaction. */
    private static org.assertj.core.api.AbstractThrowableAssert<?, ? extends Throwable> assertTheWorkCannotStart(
            IdempotencyEngine engine, ScopedKey key, Duration lease) {
        return org.assertj.core.api.Assertions.assertThatThrownBy(
                        () -> engine.start(key, HASH, IdempotencyMode.INTENT_FIRST, lease))
                .isInstanceOf(org.springframework.transaction.CannotCreateTransactionException.class);
    }

    /** An engine on {@code dataSource}'s transactions, which waits 300 ms for a claim in flight. */
    static IdempotencyEngine engine(HikariDataSource dataSource, PostgresIdempotencyStore store,
                                    StaleClaimResolver resolver) {
        return engine(store, transactions(dataSource), Duration.ofMillis(300), resolver);
    }

    /** An engine whose transactions are {@code transactions}, and which waits {@code maxWait} for a claim in flight. */
    private static IdempotencyEngine engine(PostgresIdempotencyStore store, Transactions transactions,
                                            Duration maxWait, StaleClaimResolver resolver) {
        return new IdempotencyEngine(store, transactions, StoragePolicy.DEFAULT, DAY, maxWait, resolver,
                new DownstreamKeys("secret"));
    }

    private static Transactions transactions(HikariDataSource dataSource) {
        return new SpringTransactions(new DataSourceTransactionManager(dataSource));
    }

    /** A fresh database; with {@code skew}, clock functions that shadow PostgreSQL's, moved by that interval. */
    private static HikariDataSource database(String skew) {
        TestPostgres.Database database = TestPostgres.newDatabase();
        if (skew == null) {
            HikariDataSource dataSource = database.dataSource(6);
            new IdempotencySchemaMigrator(dataSource, "idempotency_keys").migrate();
            return dataSource;
        }
        // in the test's own schema (dropped with it), named before pg_catalog, so the shadowing functions are found
        // first: now(), and the statement's and the current time the store writes and compares records with
        for (String clock : List.of("now() returns timestamptz language sql stable",
                "statement_timestamp() returns timestamptz language sql stable",
                "clock_timestamp() returns timestamptz language sql volatile")) {
            database.queryString("create function " + database.schema() + "." + clock + " as $$ select pg_catalog."
                    + clock.substring(0, clock.indexOf(')') + 1) + " " + skew + " $$");
        }
        TestPostgres.Database skewed = new TestPostgres.Database(
                database.url() + ",pg_catalog", database.user(), database.password(), database.schema());
        HikariDataSource dataSource = skewed.dataSource(6);
        new IdempotencySchemaMigrator(dataSource, "idempotency_keys").migrate();
        return dataSource;
    }

    /**
     * The claim of {@code key} is FAILED, not released: another body under the key is a mismatch, and the same request
     * runs again at once.
     */
    private static void assertTheKeyStaysWithItsRequest(IdempotencyEngine engine, PostgresIdempotencyStore store,
                                                        ScopedKey key, String other, Duration lease) {
        assertThat(store.find(key)).as("the key stays with its request").isPresent()
                .get().extracting(IdempotencyRecord::status).isEqualTo(RecordStatus.FAILED);
        assertThat(engine.start(key, other, IdempotencyMode.INTENT_FIRST, lease))
                .as("another body under the key").isInstanceOf(IdempotencyEngine.Mismatch.class);
        assertTheRetryRuns(engine, store, key, lease);
    }

    /**
     * A pool of one connection that gives up after a second (set before the pool starts: a running pool keeps the
     * timeout it started with), on a new database with the library's table. Long enough that the engine's own
     * background work, holding the connection briefly on a loaded machine, does not starve the test's next request;
     * each exhaustion a test makes on purpose waits it out.
     */
    private static HikariDataSource oneConnectionPool() {
        TestPostgres.Database database = TestPostgres.newDatabase();
        try (HikariDataSource migration = database.dataSource(2)) {
            new IdempotencySchemaMigrator(migration, "idempotency_keys").migrate();
        }
        com.zaxxer.hikari.HikariConfig config = new com.zaxxer.hikari.HikariConfig();
        config.setJdbcUrl(database.url());
        config.setUsername(database.user());
        config.setPassword(database.password());
        config.setMaximumPoolSize(1);
        config.setConnectionTimeout(1000);
        return new HikariDataSource(config);
    }

    /**
     * Transactions on the pool {@code dataSource} whose beginning, when {@code exhausted} says so, finds no connection:
     * the only one is held elsewhere while the transaction asks for one.
     */
    private static Transactions exhaustedWhen(HikariDataSource dataSource, java.util.function.BooleanSupplier exhausted) {
        Transactions pool = transactions(dataSource);
        return () -> {
            if (!exhausted.getAsBoolean()) {
                return pool.begin();
            }
            try (java.sql.Connection elsewhere = dataSource.getConnection()) {
                return pool.begin();
            } catch (java.sql.SQLException e) {
                throw new IllegalStateException(e);
            }
        };
    }

    /** Transactions on the pool {@code dataSource} whose {@code nth} beginning finds no connection. */
    private static Transactions exhaustedAtThe(int nth, HikariDataSource dataSource) {
        AtomicInteger begun = new AtomicInteger();
        return exhaustedWhen(dataSource, () -> begun.incrementAndGet() == nth);
    }

    /**
     * {@code call}, on the pool {@code dataSource} of one connection, which has none to give it when {@code refused}
     * says so: the only one is held elsewhere meanwhile.
     */
    private static <T> T withoutAConnectionWhen(HikariDataSource dataSource, boolean refused,
                                                java.util.function.Supplier<T> call) {
        if (!refused) {
            return call.get();
        }
        try (java.sql.Connection elsewhere = dataSource.getConnection()) {
            return call.get();
        } catch (java.sql.SQLException e) {
            throw new IllegalStateException(e);
        }
    }

    /**
     * The store on the one-connection pool {@code dataSource} whose {@code nth} release (or, not {@code releases}, whose
     * {@code nth} FAILED mark) finds no connection, the pool's only one held elsewhere meanwhile; {@code calls} counts
     * those calls.
     */
    private static PostgresIdempotencyStore refusingThe(int nth, boolean releases, HikariDataSource dataSource,
                                                        AtomicInteger calls) {
        return new PostgresIdempotencyStore(dataSource, "idempotency_keys") {
            @Override
            public boolean release(ScopedKey key, String fencingToken) {
                return !releases ? super.release(key, fencingToken) : withoutAConnectionWhen(dataSource,
                        calls.incrementAndGet() == nth, () -> super.release(key, fencingToken));
            }

            @Override
            public boolean fail(ScopedKey key, String fencingToken) {
                return releases ? super.fail(key, fencingToken) : withoutAConnectionWhen(dataSource,
                        calls.incrementAndGet() == nth, () -> super.fail(key, fencingToken));
            }
        };
    }

    /** What the engine logs (through the JDK's logging, where its System.Logger writes) until closed. */
    private static final class EngineLog implements AutoCloseable {
        final List<LogRecord> records = new java.util.concurrent.CopyOnWriteArrayList<>();
        private final Logger logger = Logger.getLogger(IdempotencyEngine.class.getName());
        private final Handler handler = new Handler() {
            @Override
            public void publish(LogRecord record) {
                records.add(record);
            }

            @Override
            public void flush() {
            }

            @Override
            public void close() {
            }
        };

        EngineLog() {
            logger.addHandler(handler);
        }

        @Override
        public void close() {
            logger.removeHandler(handler);
        }
    }

    /** Leaves a stale claim of {@code key}: an attempt that crashed after its claim was committed, lease run out. */
    private static void leaveAStaleClaim(HikariDataSource dataSource, PostgresIdempotencyStore store, ScopedKey key,
                                         Duration lease) throws InterruptedException {
        leaveStaleClaims(dataSource, store, List.of(key), lease);
    }

    /** Leaves stale claims of {@code keys}, made one after the other by one instance that then crashed. */
    private static void leaveStaleClaims(HikariDataSource dataSource, PostgresIdempotencyStore store,
                                         List<ScopedKey> keys, Duration lease) throws InterruptedException {
        IdempotencyEngine crashed = engine(dataSource, store, StaleClaimResolver.RERUN);
        for (ScopedKey key : keys) {
            ((IdempotencyEngine.Proceed) crashed.start(key, HASH, IdempotencyMode.INTENT_FIRST, lease))
                    .execution().abandon();
        }
        crashed.shutdown();
        Thread.sleep(lease.toMillis() + 100);
    }

    /**
     * Loses the connection {@code jdbc} works on in the transaction under way: its backend is terminated from a
     * connection of its own, as when the server ends it.
     */
    private static void loseTheWorksConnection(HikariDataSource dataSource, JdbcTemplate jdbc)
            throws java.sql.SQLException {
        int session = jdbc.queryForObject("select pg_backend_pid()", Integer.class);
        try (java.sql.Connection other = java.sql.DriverManager.getConnection(
                dataSource.getJdbcUrl(), dataSource.getUsername(), dataSource.getPassword())) {
            other.createStatement().execute("select pg_terminate_backend(" + session + ")");
        }
    }

    /** Starts an intent-first retry of {@code key} on a thread of its own, which completes {@code failure}. */
    private static Thread startRetry(IdempotencyEngine engine, ScopedKey key, Duration lease,
                                     CompletableFuture<Throwable> failure) {
        Thread retry = new Thread(() -> {
            try {
                engine.start(key, HASH, IdempotencyMode.INTENT_FIRST, lease);
                failure.complete(null);
            } catch (Throwable e) {
                failure.complete(e);
            }
        });
        retry.start();
        return retry;
    }
}
