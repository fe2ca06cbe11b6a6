package io.idempotency.testkit;

import java.time.Duration;
import java.util.function.BooleanSupplier;

/**
 * Waits for a condition a test cannot be told of, looking again every few milliseconds until a deadline: what a
 * test does instead of guessing with a sleep how long something takes on a busy machine.
 */
public final class Await {

    private static final long POLL_MILLIS = 10;

    private Await() {
    }

    /**
     * Returns once {@code condition} holds; fails with {@code what} when it still does not after {@code timeout}.
     *
     * @param what      what is awaited, for the failure's message
     * @param timeout   the longest wait
     * @param condition asked first at once, then every {@value #POLL_MILLIS} ms
     */
    public static void until(String what, Duration timeout, BooleanSupplier condition) throws InterruptedException {
        long deadline = System.nanoTime() + timeout.toNanos();
        while (!condition.getAsBoolean()) {
            if (System.nanoTime() - deadline > 0) {
                throw new AssertionError("not within " + timeout + ": " + what);
            }
            Thread.sleep(POLL_MILLIS);
        }
    }
}
