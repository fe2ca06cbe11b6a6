package io.idempotency.jdbc;

import com.zaxxer.hikari.HikariDataSource;
import io.idempotency.core.IdempotencyEngine;
import io.idempotency.core.IdempotencyRecord;
import io.idempotency.core.IdempotencyTemplate;
import io.idempotency.core.RecordStatus;
import io.idempotency.core.ScopedKey;
import io.idempotency.core.StaleClaimResolver;
import io.idempotency.core.StoredResponse;
import io.idempotency.jdbc.flyway.IdempotencySchemaMigrator;
import io.idempotency.testkit.Async;
import io.idempotency.testkit.Await;
import io.idempotency.testkit.TestPostgres;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.springframework.transaction.support.TransactionSynchronization;
import org.springframework.transaction.support.TransactionSynchronizationManager;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.UUID;
import java.util.concurrent.Callable;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.function.IntSupplier;

import static io.idempotency.jdbc.IntentFirstEngineIntegrationTest.engine;
import static io.idempotency.jdbc.IntentFirstEngineIntegrationTest.execute;
import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/**
 * The renewals of an instance's leases run on a few shared threads. A renewal of a claim that was under way when its
 * holder wrote its answer must not wait on the row that answer locked for as long as the holder's commit stalls (a
 * pause, a partition): the renewal threads would be taken up by holders that need no renewal any more, and the leases
 * of the claims still working would run out under them, letting a retry run their work a second time.
 */
@Tag("engine")
class LeaseRenewalDuringTheCommitIntegrationTest {

    @Test
    void holdersStalledInTheirCommitKeepNoOtherClaimsLeaseFromBeingRenewed() throws Exception {
        TestPostgres.Database database = TestPostgres.newDatabase();
        try (HikariDataSource dataSource = database.dataSource(10)) {
            new IdempotencySchemaMigrator(dataSource, "idempotency_keys").migrate();
            Map<ScopedKey, CountDownLatch> renewing = new ConcurrentHashMap<>();
            Map<ScopedKey, CountDownLatch> answered = new ConcurrentHashMap<>();
            // a renewal of a stalling holder's claim that started just before the holder wrote its answer
            PostgresIdempotencyStore store = new PostgresIdempotencyStore(dataSource, "idempotency_keys") {
                @Override
                public boolean renew(ScopedKey key, String fencingToken, Duration lease) {
                    CountDownLatch started = renewing.remove(key);
                    if (started != null) {
                        started.countDown();
                        await(answered.get(key), 2);
                    }
                    return super.renew(key, fencingToken, lease);
                }
            };
            IdempotencyEngine engine = engine(dataSource, store, StaleClaimResolver.RERUN);
            IdempotencyEngine other = engine(dataSource, store, StaleClaimResolver.RERUN); // another instance
            // long enough that a renewal late by a busy machine's pause still comes in time
            Duration lease = Duration.ofMillis(1500);
            CountDownLatch resume = new CountDownLatch(1);
            byte[] message = "m-1".getBytes(StandardCharsets.UTF_8);
            try {
                // as many holders stalling in their commit as the instance has renewal threads
                CompletableFuture<?>[] stalled = new CompletableFuture<?>[2];
                for (int i = 0; i < stalled.length; i++) {
                    ScopedKey key = new ScopedKey("", "charges-listener", UUID.randomUUID().toString());
                    CountDownLatch started = new CountDownLatch(1);
                    CountDownLatch written = new CountDownLatch(1);
                    renewing.put(key, started);
                    answered.put(key, written);
                    stalled[i] = Async.supply(() -> execute(engine, key, message, lease,
                            stallingAfterItsAnswer(started, written, resume)));
                    assertThat(written.await(10, TimeUnit.SECONDS)).as("the holder has written its answer").isTrue();
                }
                Thread.sleep(200); // the renewals under way reach the row

                assertTheLeaseOfWorkOutlastingItIsRenewed(engine, other, lease, message);
                resume.countDown();
                for (CompletableFuture<?> holding : stalled) {
                    holding.get(10, TimeUnit.SECONDS);
                }
            } finally {
                resume.countDown();
                engine.shutdown();
                other.shutdown();
            }
        }
    }

    /**
     * The same holds for a retry whose resolver answered "complete" about a stale claim it took over: once the answer
     * is written, its commit may stall as a handler's may, and the renewal of the lease it held while the resolver
     * was asked must not be left waiting for that commit on a renewal thread.
     */
    @Test
    void retriesStalledInCommittingTheirResolversAnswerKeepNoOtherClaimsLeaseFromBeingRenewed() throws Exception {
        TestPostgres.Database database = TestPostgres.newDatabase();
        try (HikariDataSource dataSource = database.dataSource(10)) {
            new IdempotencySchemaMigrator(dataSource, "idempotency_keys").migrate();
            Map<ScopedKey, CountDownLatch> renewing = new ConcurrentHashMap<>();
            Map<ScopedKey, CountDownLatch> answered = new ConcurrentHashMap<>();
            CountDownLatch resume = new CountDownLatch(1);
            Map<ScopedKey, CountDownLatch> renewalStarted = new ConcurrentHashMap<>();
            ThreadLocal<ScopedKey> completing = new ThreadLocal<>();
            PostgresIdempotencyStore store = new PostgresIdempotencyStore(dataSource, "idempotency_keys") {
                @Override
                public boolean renew(ScopedKey key, String fencingToken, Duration lease) {
                    CountDownLatch started = renewing.remove(key);
                    if (started != null) {
                        started.countDown();
                        await(answered.get(key), 2);
                    }
                    return super.renew(key, fencingToken, lease);
                }

                @Override
                public boolean complete(ScopedKey key, String fencingToken, StoredResponse response) {
                    completing.set(key);
                    try {
                        return super.complete(key, fencingToken, response);
                    } finally {
                        completing.remove();
                    }
                }

                @Override
                protected int committed(IntSupplier write) {
                    CountDownLatch written = completing.get() == null ? null : answered.get(completing.get());
                    if (written == null || joinsTransaction()) {
                        return super.committed(write);
                    }
                    return super.committed(() -> { // the answer is written; its commit stalls
                        int count = write.getAsInt();
                        written.countDown();
                        await(resume, 30);
                        return count;
                    });
                }
            };
            // a resolver that answers once a renewal of the retry's lease on the claim has started
            StaleClaimResolver resolver = claim -> {
                CountDownLatch started = renewalStarted.get(claim.key());
                if (started != null) {
                    await(started, 10);
                }
                return StaleClaimResolver.Resolution.complete(new StoredResponse(200, List.of(),
                        "charged".getBytes(StandardCharsets.UTF_8)));
            };
            IdempotencyEngine engine = engine(dataSource, store, resolver);
            IdempotencyEngine other = engine(dataSource, store, resolver); // another instance
            // long enough that a renewal late by a busy machine's pause still comes in time
            Duration lease = Duration.ofMillis(1500);
            byte[] message = "m-1".getBytes(StandardCharsets.UTF_8);
            try {
                CompletableFuture<?>[] stalled = new CompletableFuture<?>[2];
                for (int i = 0; i < stalled.length; i++) {
                    ScopedKey key = new ScopedKey("", "charges-listener", UUID.randomUUID().toString());
                    leaveAStaleClaim(dataSource, store, key, Duration.ofMillis(300), message);
                    CountDownLatch written = new CountDownLatch(1);
                    CountDownLatch started = new CountDownLatch(1);
                    renewalStarted.put(key, started);
                    renewing.put(key, started);
                    answered.put(key, written);
                    stalled[i] = Async.supply(() -> execute(engine, key, message, lease,
                            () -> "ran again".getBytes(StandardCharsets.UTF_8)));
                    assertThat(written.await(10, TimeUnit.SECONDS)).as("the retry has written the answer").isTrue();
                }
                Thread.sleep(200); // the renewals under way reach the row

                assertTheLeaseOfWorkOutlastingItIsRenewed(engine, other, lease, message);
                resume.countDown();
                for (CompletableFuture<?> retry : stalled) {
                    retry.get(10, TimeUnit.SECONDS);
                }
            } finally {
                resume.countDown();
                engine.shutdown();
                other.shutdown();
            }
        }
    }

    /**
     * A pool whose every connection is held by holders at work (sized, as advised, for the concurrent external calls;
     * here one) leaves a renewal that has started waiting for a connection. The holder whose lease it renews holds one
     * of them until its answer is written: waiting for that renewal first, it would wait for its own connection, until
     * the pool gave up on the renewal (HikariCP's connection timeout, 30 s by default), every time its work outlasted a
     * third of its lease.
     */
    @Test
    void aHolderDoesNotWaitForARenewalThatWaitsForTheConnectionTheHolderHolds() throws Exception {
        TestPostgres.Database database = TestPostgres.newDatabase();
        try (HikariDataSource migration = database.dataSource(2)) {
            new IdempotencySchemaMigrator(migration, "idempotency_keys").migrate();
        }
        Duration connectionTimeout = Duration.ofSeconds(6);
        try (HikariDataSource dataSource = database.dataSource(1,
                config -> config.setConnectionTimeout(connectionTimeout.toMillis()))) {
            PostgresIdempotencyStore store = new PostgresIdempotencyStore(dataSource, "idempotency_keys");
            IdempotencyEngine engine = engine(dataSource, store, StaleClaimResolver.RERUN);
            ScopedKey key = new ScopedKey("", "charges-listener", UUID.randomUUID().toString());
            Duration lease = Duration.ofMillis(300);
            try {
                long started = System.nanoTime();
                IdempotencyTemplate.Result result = execute(engine, key, "m-1".getBytes(StandardCharsets.UTF_8),
                        lease, () -> {
                            Await.until("a renewal waiting for the pool's only connection", Duration.ofSeconds(5),
                                    () -> dataSource.getHikariPoolMXBean().getThreadsAwaitingConnection() > 0);
                            return "charged".getBytes(StandardCharsets.UTF_8);
                        });
                Duration took = Duration.ofNanos(System.nanoTime() - started);

                assertThat(result.value()).asString(StandardCharsets.UTF_8).isEqualTo("charged");
                assertThat(took).as("the execution, not held up until the pool gave up on the renewal")
                        .isLessThan(connectionTimeout.dividedBy(2));
                assertThat(store.find(key)).get().extracting(IdempotencyRecord::status)
                        .isEqualTo(RecordStatus.SUCCEEDED);
            } finally {
                engine.shutdown();
            }
        }
    }

    /**
     * A claim whose work outlasts its lease keeps it by its renewals: a retry from another instance meanwhile is told
     * the work is in progress, and the work runs once.
     */
    private static void assertTheLeaseOfWorkOutlastingItIsRenewed(IdempotencyEngine engine, IdempotencyEngine other,
                                                                  Duration lease, byte[] message) throws Exception {
        ScopedKey working = new ScopedKey("", "charges-listener", UUID.randomUUID().toString());
        AtomicInteger runs = new AtomicInteger();
        CountDownLatch claimed = new CountDownLatch(1);
        CountDownLatch retried = new CountDownLatch(1);
        // the work lasts until the retry has been answered, however long a loaded machine takes to send it
        CompletableFuture<IdempotencyTemplate.Result> holder = Async.supply(() -> execute(engine, working,
                message, lease, () -> {
                    runs.incrementAndGet();
                    claimed.countDown();
                    await(retried, 30);
                    return "charged".getBytes(StandardCharsets.UTF_8);
                }));
        assertThat(claimed.await(10, TimeUnit.SECONDS)).as("the holder has claimed the key").isTrue();
        Thread.sleep(lease.toMillis() * 2); // the lease would have run out twice without its renewals
        try {
            assertThatThrownBy(() -> execute(other, working, message, lease, () -> {
                runs.incrementAndGet();
                return "charged again".getBytes(StandardCharsets.UTF_8);
            })).as("the retry of a claim whose holder is working and renewing its lease")
                    .isInstanceOf(IdempotencyTemplate.InProgressException.class);
        } finally {
            retried.countDown();
        }
        assertThat(holder.get(10, TimeUnit.SECONDS).value()).asString(StandardCharsets.UTF_8)
                .isEqualTo("charged");
        assertThat(runs).as("the work ran once").hasValue(1);
    }

    /** Leaves a stale claim of {@code key}: an attempt that crashed after its claim was committed, lease run out. */
    private static void leaveAStaleClaim(HikariDataSource dataSource, PostgresIdempotencyStore store, ScopedKey key,
                                         Duration lease, byte[] message) throws InterruptedException {
        IdempotencyEngine crashed = engine(dataSource, store, StaleClaimResolver.RERUN);
        assertThatThrownBy(() -> execute(crashed, key, message, lease, () -> {
            throw new IllegalStateException("crashed");
        })).hasMessage("crashed");
        crashed.shutdown();
        Thread.sleep(lease.toMillis() + 100);
    }

    /**
     * Work that returns once a renewal of its lease has started, and whose commit, once its answer is written, stalls
     * until {@code resume}.
     */
    private static Callable<byte[]> stallingAfterItsAnswer(CountDownLatch renewalStarted, CountDownLatch written,
                                                           CountDownLatch resume) {
        return () -> {
            assertThat(renewalStarted.await(10, TimeUnit.SECONDS)).as("a renewal has started").isTrue();
            TransactionSynchronizationManager.registerSynchronization(new TransactionSynchronization() {
                @Override
                public void beforeCompletion() { // after the answer was written
                    written.countDown();
                    await(resume, 30);
                }
            });
            return "charged".getBytes(StandardCharsets.UTF_8);
        };
    }

    private static void await(CountDownLatch latch, int seconds) {
        try {
            latch.await(seconds, TimeUnit.SECONDS);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }
}
