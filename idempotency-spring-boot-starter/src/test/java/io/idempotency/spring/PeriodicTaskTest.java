package io.idempotency.spring;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.ExtendWith;
import org.springframework.boot.test.system.CapturedOutput;
import org.springframework.boot.test.system.OutputCaptureExtension;

import java.time.Duration;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;

import static org.assertj.core.api.Assertions.assertThat;

/** The schedule of the background work (cleanup, sweeping): a failed run never ends it. */
@ExtendWith(OutputCaptureExtension.class)
class PeriodicTaskTest {

    @Test
    void stopsInThePhaseOfTheWebServersGracefulShutdown() {
        // a copy of Spring Boot's constant, which an application without a web server does not have: kept equal
        assertThat(PeriodicTask.PHASE).isEqualTo(
                org.springframework.boot.web.server.context.WebServerApplicationContext.GRACEFUL_SHUTDOWN_PHASE);
    }

    @Test
    void aRunThatFailsWithAnErrorDoesNotEndTheSchedule() throws Exception {
        // e.g. a resolver whose class fails to initialise, or an assertion in an application's code
        assertRunsAgainAfterAFirstRunThat(() -> {
            throw new NoClassDefFoundError("com/example/GatewayClient");
        });
    }

    @Test
    void aRunThatFailsWithAnUndeclaredCheckedExceptionDoesNotEndTheSchedule() throws Exception {
        // e.g. an IdempotencyStore or a resolver written in Kotlin, which declares no checked exception and passes
        // the driver's on
        assertRunsAgainAfterAFirstRunThat(
                () -> throwUndeclared(new java.sql.SQLException("connection reset", "08006")));
    }

    @Test
    void aRunThatFailsWithAThrowableOfNeitherKindDoesNotEndTheSchedule() throws Exception {
        // thrown undeclared, as a checked exception is, by code that subclasses Throwable itself
        assertRunsAgainAfterAFirstRunThat(() -> throwUndeclared(new Throwable("neither an exception nor an error")));
    }

    private static void assertRunsAgainAfterAFirstRunThat(Runnable failingRun) throws InterruptedException {
        AtomicInteger runs = new AtomicInteger();
        CountDownLatch ranAgain = new CountDownLatch(1);
        PeriodicTask task = new PeriodicTask("idempotency-test-task", Duration.ofMillis(20)) {
            @Override
            void runOnce() {
                if (runs.incrementAndGet() == 1) {
                    failingRun.run();
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

    @SuppressWarnings("unchecked")
    private static <T extends Throwable> void throwUndeclared(Throwable failure) throws T {
        throw (T) failure;
    }

    @Test
    void theLifecycleStopCallsBackOnceTheRunInProgressHasEnded() throws Exception {
        CountDownLatch running = new CountDownLatch(1);
        AtomicBoolean runEnded = new AtomicBoolean();
        PeriodicTask task = new PeriodicTask("idempotency-test-task", Duration.ofMillis(20)) {
            @Override
            void runOnce() {
                running.countDown();
                try {
                    Thread.sleep(30_000); // a statement in progress
                } catch (InterruptedException e) {
                    // the statement finishes all the same before the run notices
                    long until = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(200);
                    while (System.nanoTime() < until) {
                        Thread.onSpinWait();
                    }
                    runEnded.set(true);
                    Thread.currentThread().interrupt();
                }
            }
        };
        task.start();
        assertThat(running.await(10, TimeUnit.SECONDS)).isTrue();
        CompletableFuture<Boolean> endedWhenCalledBack = new CompletableFuture<>();

        task.stop(() -> endedWhenCalledBack.complete(runEnded.get()));

        assertThat(task.isRunning()).isFalse();
        assertThat(endedWhenCalledBack.get(10, TimeUnit.SECONDS)).as("the run had ended").isTrue();
    }

    @Test
    void aRunInterruptedByAStopIsTheStopsFailureAlsoWhenTheTaskStartedAgainMeanwhile(CapturedOutput output)
            throws Exception {
        CountDownLatch running = new CountDownLatch(1);
        CountDownLatch failed = new CountDownLatch(1);
        CountDownLatch restarted = new CountDownLatch(1);
        AtomicInteger runs = new AtomicInteger();
        PeriodicTask task = new PeriodicTask("idempotency-restarted-task", Duration.ofMillis(20)) {
            @Override
            void runOnce() {
                if (runs.incrementAndGet() > 1) {
                    return; // the new schedule's runs
                }
                running.countDown();
                try {
                    Thread.sleep(30_000); // a statement in progress
                } catch (InterruptedException e) {
                    try {
                        restarted.await(10, TimeUnit.SECONDS); // the run ends after the task has been started again
                    } catch (InterruptedException ignored) {
                        // ends now
                    }
                    failed.countDown();
                    throw new IllegalStateException("statement cancelled by the interrupt");
                }
            }
        };
        task.start();
        assertThat(running.await(10, TimeUnit.SECONDS)).isTrue();
        CountDownLatch calledBack = new CountDownLatch(1);

        task.stop(calledBack::countDown);
        task.start();
        restarted.countDown();
        try {
            assertThat(failed.await(10, TimeUnit.SECONDS)).isTrue();
            assertThat(calledBack.await(10, TimeUnit.SECONDS)).isTrue();
        } finally {
            task.stop();
        }

        assertThat(output.getOut() + output.getErr())
                .contains("idempotency-restarted-task stopped during a run")
                .doesNotContain("idempotency-restarted-task failed");
    }

    /** Started again while running, as {@code SmartLifecycle} allows: one schedule, which the stop ends. */
    @Test
    void aStartWhileRunningKeepsOneScheduleThatTheStopEnds() throws InterruptedException {
        PeriodicTask task = new PeriodicTask("idempotency-started-twice", Duration.ofMillis(20)) {
            @Override
            void runOnce() {
            }
        };
        task.start();
        task.start();
        task.stop();

        assertThat(task.isRunning()).isFalse();
        for (Thread thread : Thread.getAllStackTraces().keySet()) {
            if (thread.getName().equals("idempotency-started-twice")) {
                thread.join(10_000); // a stopped schedule's thread ends as soon as it has left its last run
                assertThat(thread.isAlive()).as("a schedule left running").isFalse();
            }
        }
    }
}
