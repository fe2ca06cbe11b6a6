package io.idempotency.core;

import org.junit.jupiter.api.Test;

import java.lang.reflect.Proxy;
import java.sql.SQLException;
import java.time.Duration;
import java.util.List;
import java.util.Optional;
import java.util.concurrent.AbstractExecutorService;
import java.util.concurrent.Callable;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.Delayed;
import java.util.concurrent.Executors;
import java.util.concurrent.FutureTask;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.ScheduledFuture;
import java.util.concurrent.ScheduledThreadPoolExecutor;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.logging.Level;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

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
     * An executor may queue a renewal and then fail to schedule it (a worker thread it starts cannot be created: "unable
     * to create native thread"). The renewal it runs all the same must not wait for its schedule for ever, keeping a
     * renewal thread from every other lease.
     */
    @Test
    void aRenewalWhoseSchedulingFailedDoesNotKeepItsThread() throws Exception {
        IdempotencyStore store = (IdempotencyStore) Proxy.newProxyInstance(getClass().getClassLoader(),
                new Class<?>[] {IdempotencyStore.class}, (proxy, method, args) -> true);
        OutOfMemoryError noThread = new OutOfMemoryError("unable to create native thread");
        CountDownLatch renewing = new CountDownLatch(1);
        ScheduledThreadPoolExecutor executor = new ScheduledThreadPoolExecutor(1) {
            @Override
            public ScheduledFuture<?> scheduleWithFixedDelay(Runnable command, long initialDelay, long delay,
                                                             TimeUnit unit) {
                super.scheduleWithFixedDelay(command, initialDelay, delay, unit); // queued, and then:
                throw noThread;
            }

            @Override
            protected void beforeExecute(Thread thread, Runnable task) {
                super.beforeExecute(thread, task);
                renewing.countDown(); // the first task the thread runs: the queued renewal
            }
        };
        executor.prestartAllCoreThreads();
        try {
            assertThatThrownBy(() -> Leases.hold(executor, store, new ScopedKey("alice", "POST /charges", "k-1"),
                    "token-1", Duration.ofMillis(30))).isSameAs(noThread);

            CountDownLatch ran = new CountDownLatch(1);
            assertThat(renewing.await(5, TimeUnit.SECONDS)).as("the renewal has started on the thread").isTrue();
            executor.execute(ran::countDown);
            assertThat(ran.await(5, TimeUnit.SECONDS)).as("the renewal thread is free for other work").isTrue();
        } finally {
            executor.shutdownNow();
        }
    }

    /**
     * A renewal that fails (it waited for a pool connection until the pool gave up, most of a period) is tried again
     * soon, not a whole period later, when the lease could have run out: here a 60 s lease, renewed every 20 s, whose
     * first renewal fails at once and whose retry must come well before the next period.
     */
    @Test
    void aFailedRenewalIsTriedAgainBeforeTheNextPeriod() throws Exception {
        List<Long> calls = new CopyOnWriteArrayList<>();
        CountDownLatch retried = new CountDownLatch(1);
        IdempotencyStore store = (IdempotencyStore) Proxy.newProxyInstance(getClass().getClassLoader(),
                new Class<?>[] {IdempotencyStore.class}, (proxy, method, args) -> {
                    calls.add(System.nanoTime());
                    if (calls.size() == 1) {
                        throw new IllegalStateException("Connection is not available, request timed out");
                    }
                    retried.countDown();
                    return true;
                });
        ScheduledExecutorService executor = Executors.newSingleThreadScheduledExecutor();
        try {
            // written a period ago: the first renewal is due at once
            Leases.Holding holding = Leases.hold(executor, store, new ScopedKey("alice", "POST /charges", "k-1"),
                    "token-1", Duration.ofSeconds(60), 20_000);

            assertThat(retried.await(10, TimeUnit.SECONDS)).as("tried again within half a period").isTrue();
            assertThat(Duration.ofNanos(calls.get(1) - calls.get(0))).isLessThan(Duration.ofSeconds(10));
            holding.cancel();
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

    private static final ScopedKey KEY = new ScopedKey("alice", "POST /charges", "k-1");

    /** A store that only renews: each renewal is recorded, with whether its thread was interrupted then. */
    private static IdempotencyStore renewingStore(List<Object[]> renewals, RuntimeException failure) {
        return (IdempotencyStore) Proxy.newProxyInstance(LeasesTest.class.getClassLoader(),
                new Class<?>[] {IdempotencyStore.class}, (proxy, method, args) -> {
                    if (!method.getName().equals("renew")) {
                        throw new UnsupportedOperationException(method.getName());
                    }
                    renewals.add(new Object[] {args[0], args[1], args[2], Thread.currentThread().isInterrupted()});
                    if (failure != null) {
                        throw failure;
                    }
                    return true;
                });
    }

    /** An executor that drops a cancelled schedule from its queue at once: an empty queue shows the renewals stopped. */
    private static ScheduledThreadPoolExecutor renewalThread() {
        ScheduledThreadPoolExecutor executor = new ScheduledThreadPoolExecutor(1);
        executor.setRemoveOnCancelPolicy(true);
        return executor;
    }

    /**
     * A holder interrupted before it decided anything (the application stopping) hands its lease back: the renewals
     * stop, and the lease is ended at once, so that a retry or the sweeper takes the claim over now rather than after
     * the lease. The store is asked without the interrupt, which a pool would answer by refusing a connection, and the
     * interrupt is kept for the holder's caller.
     */
    @Test
    void aLeaseHandedBackStopsItsRenewalsAndEndsAtOnceWithoutTheInterruptWhichIsKept() {
        List<Object[]> renewals = new CopyOnWriteArrayList<>();
        IdempotencyStore store = renewingStore(renewals, null);
        ScheduledThreadPoolExecutor executor = renewalThread();
        try {
            Leases.Holding holding = Leases.hold(executor, store, KEY, "token-1", Duration.ofHours(1));
            assertThat(executor.getQueue()).as("renewals scheduled").hasSize(1);
            RuntimeException failure = new RuntimeException("interrupted");

            Thread.currentThread().interrupt();
            Leases.handBack(holding, store, KEY, "token-1", failure);

            assertThat(Thread.interrupted()).as("the interrupt is kept").isTrue();
            assertThat(executor.getQueue()).as("no renewal is scheduled any more").isEmpty();
            assertThat(renewals).singleElement().satisfies(renewal -> assertThat(renewal)
                    .containsExactly(KEY, "token-1", IdempotencyEngine.MIN_LEASE, false));
            assertThat(failure.getSuppressed()).isEmpty();
        } finally {
            Thread.interrupted();
            executor.shutdownNow();
        }
    }

    /** Ending a lease that fails leaves it to run out as it would have, and says why on the holder's failure. */
    @Test
    void aLeaseThatCannotBeEndedSaysWhyOnTheFailureOfItsHolderAndKeepsTheInterrupt() {
        List<Object[]> renewals = new CopyOnWriteArrayList<>();
        IllegalStateException refused = new IllegalStateException("connection refused");
        IdempotencyStore store = renewingStore(renewals, refused);
        RuntimeException failure = new RuntimeException("interrupted");
        try {
            Thread.currentThread().interrupt();
            Leases.endLease(store, KEY, "token-1", failure);

            assertThat(Thread.interrupted()).as("the interrupt is kept").isTrue();
            assertThat(renewals).singleElement().satisfies(renewal -> assertThat(renewal)
                    .containsExactly(KEY, "token-1", IdempotencyEngine.MIN_LEASE, false));
            assertThat(failure.getSuppressed()).containsExactly(refused);
        } finally {
            Thread.interrupted();
        }
    }

    /** A decision already made is written without the thread's interrupt, which is given back afterwards. */
    @Test
    void aWriteRunUninterruptedSeesNoInterruptAndTheInterruptIsKept() {
        try {
            Thread.currentThread().interrupt();
            AtomicBoolean interruptedWhileWriting = new AtomicBoolean(true);

            boolean written = Leases.uninterrupted(() -> {
                interruptedWhileWriting.set(Thread.currentThread().isInterrupted());
                return true;
            });

            assertThat(written).isTrue();
            assertThat(interruptedWhileWriting).as("interrupted while writing").isFalse();
            assertThat(Thread.interrupted()).as("the interrupt is kept").isTrue();
            assertThatThrownBy(() -> Leases.uninterrupted(() -> {
                throw new IllegalStateException("refused");
            })).hasMessage("refused");
            assertThat(Thread.interrupted()).as("not interrupted when it was not").isFalse();
        } finally {
            Thread.interrupted();
        }
    }

    /**
     * A holder about to write its outcome stops its renewals, and a renewal still waiting (for a pooled connection,
     * which the holder's own transaction may be keeping from it) is interrupted rather than waited for.
     */
    @Test
    void stoppingALeaseInterruptsTheRenewalUnderWayAndEndsTheSchedule() throws Exception {
        CountDownLatch renewing = new CountDownLatch(1);
        CountDownLatch never = new CountDownLatch(1);
        AtomicBoolean interrupted = new AtomicBoolean();
        IdempotencyStore store = (IdempotencyStore) Proxy.newProxyInstance(getClass().getClassLoader(),
                new Class<?>[] {IdempotencyStore.class}, (proxy, method, args) -> {
                    renewing.countDown();
                    try {
                        never.await(30, TimeUnit.SECONDS); // waits for a connection that a holder keeps
                    } catch (InterruptedException e) {
                        interrupted.set(true);
                        throw e;
                    }
                    return true;
                });
        ScheduledThreadPoolExecutor executor = renewalThread();
        try {
            Leases.Holding holding = Leases.hold(executor, store, KEY, "token-1", Duration.ofMillis(3));
            assertThat(renewing.await(10, TimeUnit.SECONDS)).as("a renewal under way").isTrue();

            Leases.stop(holding);

            assertThat(interrupted).as("the renewal under way was interrupted").isTrue();
            assertThat(executor.getQueue()).as("no renewal is scheduled any more").isEmpty();
        } finally {
            executor.shutdownNow();
        }
    }
    /**
     * Renewals that keep failing (the database unreachable for more than a period) start a chain of retries at each
     * failure of the schedule, and an earlier chain may still have a retry to come. Stopping the lease must interrupt
     * every retry under way, not only the latest chain's: one still waiting for a pooled connection would otherwise
     * hold up the holder's commit (which waits for the renewal under way to end) until the pool gave up on it.
     * The renewals run here when the test says, on threads of its own, in the order the executor would run them.
     */
    @Test
    void stoppingALeaseInterruptsTheRetriesOfEveryChain() throws Exception {
        AtomicInteger calls = new AtomicInteger();
        CountDownLatch waitingForAConnection = new CountDownLatch(1);
        IdempotencyStore store = (IdempotencyStore) Proxy.newProxyInstance(getClass().getClassLoader(),
                new Class<?>[] {IdempotencyStore.class}, (proxy, method, args) -> {
                    if (calls.incrementAndGet() <= 3) {
                        throw new IllegalStateException("Connection is not available, request timed out");
                    }
                    waitingForAConnection.countDown();
                    Thread.sleep(10_000); // as a pool waits for a connection, until interrupted
                    return true;
                });
        ManualScheduler scheduler = new ManualScheduler();
        Leases.Holding holding = Leases.hold(scheduler, store, new ScopedKey("alice", "POST /charges", "k-1"),
                "token-1", Duration.ofSeconds(3));
        ManualScheduler.Task schedule = scheduler.tasks.get(0);

        schedule.run(); // fails: a chain of retries begins
        scheduler.tasks.get(1).run(); // its first retry fails: its second is due
        ManualScheduler.Task earlierChain = scheduler.tasks.get(2);
        schedule.run(); // the schedule's next renewal fails too, before that retry: another chain begins
        assertThat(scheduler.tasks).as("the schedule and the retries").hasSize(4);
        Thread retrying = new Thread(earlierChain::run); // the earlier chain's retry, waiting for a connection
        retrying.start();
        assertThat(waitingForAConnection.await(5, TimeUnit.SECONDS)).isTrue();

        long stopping = System.nanoTime();
        Leases.stop(holding);
        Duration took = Duration.ofNanos(System.nanoTime() - stopping);

        retrying.join(10_000);
        assertThat(took).as("the stop, which interrupts the retry waiting for a connection")
                .isLessThan(Duration.ofSeconds(5));
    }

    /**
     * A scheduled executor whose tasks run only when the test runs them, each as the real executor would: a periodic
     * one again at each run, and a cancellation with interruption interrupts the thread running it.
     */
    private static final class ManualScheduler extends AbstractExecutorService
            implements ScheduledExecutorService {

        final List<Task> tasks = new CopyOnWriteArrayList<>();

        static final class Task extends FutureTask<Void>
                implements ScheduledFuture<Void> {

            private final boolean periodic;

            Task(Runnable command, boolean periodic) {
                super(command, null);
                this.periodic = periodic;
            }

            @Override
            public void run() {
                if (periodic) {
                    runAndReset();
                } else {
                    super.run();
                }
            }

            @Override
            public long getDelay(TimeUnit unit) {
                return 0;
            }

            @Override
            public int compareTo(Delayed other) {
                return 0;
            }
        }

        private Task add(Runnable command, boolean periodic) {
            Task task = new Task(command, periodic);
            tasks.add(task);
            return task;
        }

        @Override
        public ScheduledFuture<?> schedule(Runnable command, long delay, TimeUnit unit) {
            return add(command, false);
        }

        @Override
        public <V> ScheduledFuture<V> schedule(Callable<V> callable, long delay, TimeUnit unit) {
            throw new UnsupportedOperationException();
        }

        @Override
        public ScheduledFuture<?> scheduleAtFixedRate(Runnable command, long initialDelay, long period,
                                                      TimeUnit unit) {
            return add(command, true);
        }

        @Override
        public ScheduledFuture<?> scheduleWithFixedDelay(Runnable command, long initialDelay, long delay,
                                                         TimeUnit unit) {
            return add(command, true);
        }

        @Override
        public void execute(Runnable command) {
            add(command, false);
        }

        @Override
        public void shutdown() {
        }

        @Override
        public List<Runnable> shutdownNow() {
            return List.of();
        }

        @Override
        public boolean isShutdown() {
            return false;
        }

        @Override
        public boolean isTerminated() {
            return false;
        }

        @Override
        public boolean awaitTermination(long timeout, TimeUnit unit) {
            return true;
        }
    }
}
