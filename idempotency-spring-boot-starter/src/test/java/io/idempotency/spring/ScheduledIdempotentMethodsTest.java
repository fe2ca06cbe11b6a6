package io.idempotency.spring;

import io.idempotency.core.Idempotent;
import io.idempotency.testkit.TestPostgres;
import org.junit.jupiter.api.Test;
import org.springframework.context.annotation.Configuration;
import org.springframework.scheduling.annotation.EnableScheduling;
import org.springframework.scheduling.annotation.Scheduled;
import org.springframework.stereotype.Service;
import org.springframework.web.bind.annotation.PostMapping;
import org.springframework.web.bind.annotation.RestController;

import java.util.concurrent.atomic.AtomicInteger;

import static io.idempotency.spring.StartupFailures.assertStartFailsWithDescription;
import static org.assertj.core.api.Assertions.assertThat;

/**
 * {@code @Idempotent} on a {@code @Scheduled} method: Spring's scheduler calls it on a thread of its own, never inside
 * a request, so there is no key to take and the advice fails every run, and the scheduled work never runs. The
 * application must say so at startup, not start and fail in the background run after run.
 */
class ScheduledIdempotentMethodsTest {

    private static final TestPostgres.Database DATABASE = TestPostgres.newDatabase();

    static final AtomicInteger RUNS = new AtomicInteger();

    @Test
    void aScheduledIdempotentMethodStopsTheStart() {
        assertStartFailsWithDescription(TestDatabases.contextRunner(DATABASE)
                .withUserConfiguration(SchedulingEnabled.class, Reconciliation.class))
                .contains("ScheduledIdempotentMethodsTest$Reconciliation.reconcile()", "@Scheduled",
                        "IdempotencyTemplate");
        assertThat(RUNS).hasValue(0);
    }

    @Test
    void aScheduledIdempotentHandlerStopsTheStartToo() {
        assertStartFailsWithDescription(TestDatabases.contextRunner(DATABASE)
                .withUserConfiguration(SchedulingEnabled.class, ReconciliationEndpoint.class))
                .contains("ScheduledIdempotentMethodsTest$ReconciliationEndpoint.reconcile()", "@Scheduled");
    }

    /** A scheduled method beside an idempotent one, on the same bean, is no concern of the starter's. */
    @Test
    void aScheduledMethodThatIsNotIdempotentStarts() {
        TestDatabases.contextRunner(DATABASE).withUserConfiguration(SchedulingEnabled.class, Mixed.class)
                .run(context -> assertThat(context).hasNotFailed());
    }

    @Configuration(proxyBeanMethods = false)
    @EnableScheduling
    static class SchedulingEnabled {
    }

    @Service
    static class Reconciliation {
        @Scheduled(fixedDelay = 50)
        @Idempotent
        public void reconcile() {
            RUNS.incrementAndGet();
        }
    }

    @RestController
    static class ReconciliationEndpoint {
        @PostMapping("/reconciliations")
        @Scheduled(fixedDelay = 50)
        @Idempotent
        public void reconcile() {
            RUNS.incrementAndGet();
        }
    }

    @RestController
    static class Mixed {
        @PostMapping("/reconciliations")
        @Idempotent
        public void reconcile() {
        }

        @Scheduled(fixedDelay = 60_000)
        public void sweep() {
        }
    }
}
