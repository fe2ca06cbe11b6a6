package io.idempotency.spring;

import io.idempotency.core.IdempotencyEngine;
import io.idempotency.core.IdempotencyMode;
import io.idempotency.core.IdempotencyTemplate;
import io.idempotency.core.ScopedKey;
import io.idempotency.testkit.TestPostgres;
import org.junit.jupiter.api.Test;

import java.nio.charset.StandardCharsets;
import java.time.Duration;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatIllegalStateException;
import static org.assertj.core.api.Assertions.catchThrowable;

/**
 * Work still reaching the engine after it was shut down (a message consumer the application does not stop with its
 * context, say), while the database is still there: it is refused, and leaves no claim held for a lease.
 */
class EngineShutdownIntegrationTest {

    private static final ScopedKey KEY = new ScopedKey("", "payment-events", "message-1");
    private static final byte[] MESSAGE = "{\"amount\":100}".getBytes(StandardCharsets.UTF_8);

    @Test
    void aStaleClaimMetAfterTheShutdownIsNotKeptFromTheOtherInstances() {
        TestPostgres.Database database = TestPostgres.newDatabase();
        TestDatabases.nonWebRunner(database).withPropertyValues("idempotency.sweeper.enabled=false").run(context -> {
            IdempotencyTemplate template = context.getBean(IdempotencyTemplate.class);
            // the first delivery's work had an unknown outcome: its claim stays PROCESSING, and its lease runs out
            assertThatIllegalStateException().isThrownBy(() -> template.execute(KEY, MESSAGE,
                    IdempotencyMode.INTENT_FIRST, Duration.ofMillis(1), () -> {
                        throw new IllegalStateException("did the payment go through?");
                    }));

            context.getBean(IdempotencyEngine.class).shutdown();

            // the redelivery, after the shutdown: it would take the stale claim over, then could not hold it
            Throwable refused = catchThrowable(() -> template.execute(KEY, MESSAGE, IdempotencyMode.INTENT_FIRST,
                    Duration.ofMinutes(1), () -> "paid".getBytes(StandardCharsets.UTF_8)));

            assertThat(database.queryString("select status from idempotency_keys")).isEqualTo("PROCESSING");
            assertThat(database.queryString("select locked_until < now() + interval '1 second' from idempotency_keys"))
                    .as("the claim can be taken over at once, not after the minute of this lease").isEqualTo("t");
            assertThat(refused).isInstanceOf(io.idempotency.core.EngineShutDownException.class)
                    .hasMessageContaining("shut down");
        });
    }

    @Test
    void intentFirstWorkStartedAfterTheShutdownIsRefusedAndLeavesNoClaim() {
        TestPostgres.Database database = TestPostgres.newDatabase();
        TestDatabases.nonWebRunner(database).withPropertyValues("idempotency.sweeper.enabled=false").run(context -> {
            IdempotencyTemplate template = context.getBean(IdempotencyTemplate.class);
            context.getBean(IdempotencyEngine.class).shutdown();
            boolean[] ran = {false};

            assertThatIllegalStateException().isThrownBy(() -> template.execute(KEY, MESSAGE,
                    IdempotencyMode.INTENT_FIRST, Duration.ofMinutes(1), () -> {
                        ran[0] = true;
                        return "paid".getBytes(StandardCharsets.UTF_8);
                    })).withMessageContaining("shut down");

            assertThat(ran[0]).as("no work runs without its lease renewed").isFalse();
            assertThat(database.queryLong("select count(*) from idempotency_keys"))
                    .as("the claim is released: the message, delivered again, runs at once elsewhere").isZero();
        });
    }
}
