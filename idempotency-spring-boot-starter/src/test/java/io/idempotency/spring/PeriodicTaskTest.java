package io.idempotency.spring;

import org.junit.jupiter.api.Test;

import java.time.Duration;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;

import static org.assertj.core.api.Assertions.assertThat;

/** The schedule of the background work (cleanup, sweeping): a failed run never ends it. */
class PeriodicTaskTest {

    @Test
    void aRunThatFailsWithAnErrorDoesNotEndTheSchedule() throws Exception {
        AtomicInteger runs = new AtomicInteger();
        CountDownLatch ranAgain = new CountDownLatch(1);
        PeriodicTask task = new PeriodicTask("idempotency-test-task", Duration.ofMillis(20)) {
            @Override
            void runOnce() {
                if (runs.incrementAndGet() == 1) {
                    // e.g. a resolver whose class fails to initialise, or an assertion in an application's code
                    throw new NoClassDefFoundError("com/example/GatewayClient");
                }
                ranAgain.countDown();
            }
        };
        task.start();
        try {
            assertThat(ranAgain.await(10, TimeUnit.SECONDS)).as("runs after the failed one").isTrue();
        } finally {
            task.stop();
        }
    }
}
