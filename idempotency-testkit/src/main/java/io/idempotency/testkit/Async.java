package io.idempotency.testkit;

import java.util.concurrent.CompletableFuture;
import java.util.concurrent.Executor;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.function.Supplier;

/**
 * {@link CompletableFuture#supplyAsync} and {@link CompletableFuture#runAsync} for tasks that block, each on a thread
 * of its own.
 * <p>
 * Without an executor, {@code CompletableFuture} runs tasks on the common {@code ForkJoinPool}. On a machine with two
 * processors that pool has one worker, and recent JDKs (25, for one) use it even then, where Java 17 started a thread
 * per task: a task that waits for a lock — a claim behind another claim, a partition change behind a reader — then
 * holds up every other task, and a test that needs two of them at once times out. Tests make tasks wait on purpose,
 * so they run them here.
 */
public final class Async {

    private static final AtomicInteger THREADS = new AtomicInteger();

    /** Starts each task on a new daemon thread, so that a task a failed test left waiting does not keep the JVM. */
    public static final Executor THREAD_PER_TASK = task -> {
        Thread thread = new Thread(task, "test-async-" + THREADS.incrementAndGet());
        thread.setDaemon(true);
        thread.start();
    };

    private Async() {
    }

    /** {@link CompletableFuture#supplyAsync(Supplier)} on a thread of its own. */
    public static <T> CompletableFuture<T> supply(Supplier<T> task) {
        return CompletableFuture.supplyAsync(task, THREAD_PER_TASK);
    }

    /** {@link CompletableFuture#runAsync(Runnable)} on a thread of its own. */
    public static CompletableFuture<Void> run(Runnable task) {
        return CompletableFuture.runAsync(task, THREAD_PER_TASK);
    }
}
