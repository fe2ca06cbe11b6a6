package io.idempotency.core;

import org.junit.jupiter.api.Test;

import java.lang.reflect.Proxy;
import java.sql.SQLException;
import java.time.Duration;
import java.util.List;
import java.util.Optional;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.logging.Level;

import static org.assertj.core.api.Assertions.assertThat;

/** Lease renewals while a claim's holder works. */
class LeasesTest {

    /**
     * A scheduled executor ends a schedule for good, without a word, on anything its task throws: a renewal failing
     * with an error (a class of the store's that fails to load, an assertion in a store of the application's) must not
     * leave the holder without renewals, to lose its claim and have its result refused.
     */
    @Test
    void aRenewalThatFailsWithAnErrorIsTriedAgain() throws Exception {
        AtomicInteger renewals = new AtomicInteger();
        CountDownLatch renewedAfterTheFailure = new CountDownLatch(1);
        IdempotencyStore store = (IdempotencyStore) Proxy.newProxyInstance(getClass().getClassLoader(),
                new Class<?>[] {IdempotencyStore.class}, (proxy, method, args) -> {
                    if (renewals.incrementAndGet() == 1) {
                        throw new NoClassDefFoundError("org/postgresql/core/v3/SomeLazyClass");
                    }
                    renewedAfterTheFailure.countDown();
                    return true;
                });
        ScheduledExecutorService executor = Executors.newSingleThreadScheduledExecutor();
        try {
            Leases.hold(executor, store, new ScopedKey("alice", "POST /charges", "k-1"), "token-1",
                    Duration.ofMillis(60));

            assertThat(renewedAfterTheFailure.await(5, TimeUnit.SECONDS)).as("tried again").isTrue();
        } finally {
            executor.shutdownNow();
        }
    }

    /**
     * A store written in a language without checked exceptions (Kotlin) passes its driver's {@code SQLException} on
     * as it is, undeclared: thrown on from the renewal, it too would end the schedule for good, without a word, and the
     * holder would lose its claim to another request that runs the work beside it.
     */
    @Test
    void aRenewalThatFailsWithAnUndeclaredCheckedExceptionIsLoggedAndTriedAgain() throws Exception {
        AtomicInteger renewals = new AtomicInteger();
        CountDownLatch renewedAfterTheFailure = new CountDownLatch(1);
        IdempotencyStore store = new IdempotencyStore() {
            @Override
            public boolean renew(ScopedKey key, String fencingToken, Duration lease) {
                if (renewals.incrementAndGet() == 1) {
                    LeasesTest.<RuntimeException>throwUndeclared(new SQLException("connection reset", "08006"));
                }
                renewedAfterTheFailure.countDown();
                return true;
            }

            @Override
            public ClaimResult claim(ClaimRequest request) {
                throw new UnsupportedOperationException("claim");
            }

            @Override
            public boolean complete(ScopedKey key, String fencingToken, StoredResponse response) {
                throw new UnsupportedOperationException("complete");
            }

            @Override
            public boolean fail(ScopedKey key, String fencingToken) {
                throw new UnsupportedOperationException("fail");
            }

            @Override
            public boolean release(ScopedKey key, String fencingToken) {
                throw new UnsupportedOperationException("release");
            }

            @Override
            public Optional<String> takeOver(ScopedKey key, String expiredToken, Duration lease) {
                throw new UnsupportedOperationException("takeOver");
            }

            @Override
            public List<IdempotencyRecord> findExpiredLeases(int limit) {
                throw new UnsupportedOperationException("findExpiredLeases");
            }

            @Override
            public Optional<IdempotencyRecord> find(ScopedKey key) {
                throw new UnsupportedOperationException("find");
            }

            @Override
            public int deleteExpired(int limit) {
                throw new UnsupportedOperationException("deleteExpired");
            }
        };
        ScheduledExecutorService executor = Executors.newSingleThreadScheduledExecutor();
        try (CapturedLog log = CapturedLog.of(Leases.class)) {
            Leases.hold(executor, store, new ScopedKey("alice", "POST /charges", "k-1"), "token-1",
                    Duration.ofMillis(60));

            assertThat(renewedAfterTheFailure.await(5, TimeUnit.SECONDS)).as("tried again").isTrue();
            assertThat(log.records()).singleElement().satisfies(record -> {
                assertThat(record.getLevel()).isEqualTo(Level.WARNING);
                assertThat(record.getThrown()).isInstanceOf(SQLException.class).hasMessage("connection reset");
            });
        } finally {
            executor.shutdownNow();
        }
    }

    @SuppressWarnings("unchecked")
    private static <T extends Throwable> void throwUndeclared(Throwable failure) throws T {
        throw (T) failure;
    }

    /**
     * A lease is renewed early, long before it would run out: renewed only as it ends, it would be over for a moment
     * in every period — the statement that renews it takes its time — and another instance, or the sweeper, could
     * take the claim over then and run the work a second time beside its holder.
     */
    @Test
    void aLeaseIsRenewedLongBeforeItWouldRunOut() throws Exception {
        // long enough that a busy machine's scheduling delays (tens of milliseconds) stay far inside the bound
        Duration lease = Duration.ofSeconds(3);
        List<Long> renewedAt = new CopyOnWriteArrayList<>();
        List<Object> renewedFor = new CopyOnWriteArrayList<>();
        CountDownLatch threeRenewals = new CountDownLatch(3);
        IdempotencyStore store = (IdempotencyStore) Proxy.newProxyInstance(getClass().getClassLoader(),
                new Class<?>[] {IdempotencyStore.class}, (proxy, method, args) -> {
                    if (!method.getName().equals("renew")) {
                        throw new UnsupportedOperationException(method.getName());
                    }
                    renewedAt.add(System.nanoTime());
                    renewedFor.add(args[2]);
                    threeRenewals.countDown();
                    return true;
                });
        ScheduledExecutorService executor = Executors.newSingleThreadScheduledExecutor();
        try {
            long claimed = System.nanoTime();
            Leases.hold(executor, store, new ScopedKey("alice", "POST /charges", "k-1"), "token-1", lease);

            assertThat(threeRenewals.await(15, TimeUnit.SECONDS)).as("renewed while its holder works").isTrue();
            long previous = claimed;
            for (long at : renewedAt.subList(0, 3)) {
                assertThat(Duration.ofNanos(at - previous)).as("time from the last renewal (or the claim)")
                        .isLessThan(lease.multipliedBy(2).dividedBy(3));
                previous = at;
            }
            assertThat(renewedFor).as("each renewal is for the whole lease").allMatch(lease::equals);
        } finally {
            executor.shutdownNow();
        }
    }

    @Test
    void aRenewalThatFailsIsLoggedWithItsClaimAndTriedAgain() throws Exception {
        AtomicInteger renewals = new AtomicInteger();
        CountDownLatch renewedAfterTheFailure = new CountDownLatch(1);
        IdempotencyStore store = (IdempotencyStore) Proxy.newProxyInstance(getClass().getClassLoader(),
                new Class<?>[] {IdempotencyStore.class}, (proxy, method, args) -> {
                    if (!method.getName().equals("renew")) {
                        throw new UnsupportedOperationException(method.getName());
                    }
                    if (renewals.incrementAndGet() == 1) {
                        throw new IllegalStateException("connection refused");
                    }
                    renewedAfterTheFailure.countDown();
                    return true;
                });
        ScheduledExecutorService executor = Executors.newSingleThreadScheduledExecutor();
        try (CapturedLog log = CapturedLog.of(Leases.class)) {
            Leases.hold(executor, store, new ScopedKey("alice", "POST /charges", "k-1"), "token-1",
                    Duration.ofMillis(60));

            assertThat(renewedAfterTheFailure.await(10, TimeUnit.SECONDS)).as("tried again").isTrue();
            // a holder whose lease cannot be renewed may lose its claim: the operator must hear of it
            assertThat(log.records()).singleElement().satisfies(record -> {
                assertThat(record.getLevel()).isEqualTo(Level.WARNING);
                assertThat(record.getMessage()).contains("alice", "POST /charges", "k-1");
                assertThat(record.getThrown()).hasMessage("connection refused");
            });
        } finally {
            executor.shutdownNow();
        }
    }
}
