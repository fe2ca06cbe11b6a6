package io.idempotency.spring.messaging;

import io.idempotency.core.IdempotencyMode;
import io.idempotency.core.IdempotencyTemplate;
import io.idempotency.core.ScopedKey;
import io.idempotency.core.StaleClaimResolver;
import io.idempotency.core.StaleClaimUndecidedException;
import io.idempotency.core.StoredResponse;
import io.idempotency.spring.TestDatabases;
import io.idempotency.testkit.TestPostgres;
import org.junit.jupiter.api.Test;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicReference;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatIllegalStateException;
import static org.assertj.core.api.Assertions.catchThrowable;

/**
 * An intent-first delivery whose work had an unknown outcome leaves its claim {@code PROCESSING}; the redelivery after
 * its lease takes the claim over and asks the {@link StaleClaimResolver}. When the resolver cannot decide — it throws,
 * answers {@code null}, or answers with a status the storage policy does not keep — the redelivery throws, the work
 * does not run, and the claim is held under the redelivery's lease: the next redelivery within it is told "in
 * progress", the one after it asks the resolver again. It is neither the work's own failure nor a refusal before
 * anything was claimed, which is what a listener would take it for by the exception alone.
 */
class UndecidedStaleClaimRedeliveryIntegrationTest {

    private static final byte[] MESSAGE = "{\"payment\":\"p-1\",\"amount\":\"12.50\"}".getBytes(StandardCharsets.UTF_8);
    private static final Duration FIRST_LEASE = Duration.ofMillis(1);
    private static final Duration REDELIVERY_LEASE = Duration.ofSeconds(2);

    @Test
    void aResolverThatCannotDecideKeepsTheClaimForTheRedeliverysLease() throws Exception {
        TestPostgres.Database database = TestPostgres.newDatabase();
        RuntimeException unreachable = new IllegalStateException("the gateway is unreachable");
        AtomicReference<Object> answer = new AtomicReference<>(unreachable);
        AtomicInteger asked = new AtomicInteger();
        StaleClaimResolver resolver = claim -> {
            asked.incrementAndGet();
            Object next = answer.get();
            if (next instanceof RuntimeException e) {
                throw e;
            }
            return (StaleClaimResolver.Resolution) next;
        };
        TestDatabases.nonWebRunner(database)
                .withPropertyValues("idempotency.sweeper.enabled=false", "idempotency.in-flight-wait=100ms")
                .withBean(StaleClaimResolver.class, () -> resolver)
                .run(context -> {
                    assertThat(context).hasNotFailed();
                    IdempotencyTemplate template = context.getBean(IdempotencyTemplate.class);
                    AtomicInteger workRuns = new AtomicInteger();
                    ScopedKey key = new ScopedKey("", "payment-listener", "msg-1");

                    // the first delivery: the work's outcome is unknown, and its lease runs out at once
                    assertThatIllegalStateException().isThrownBy(() -> template.execute(key, MESSAGE,
                            IdempotencyMode.INTENT_FIRST, FIRST_LEASE, () -> {
                                workRuns.incrementAndGet();
                                throw new IllegalStateException("did the payment go through?");
                            }));
                    Thread.sleep(20);

                    // the resolver throws: its own exception, the work not run, the claim held
                    String redelivered = now(database);
                    Throwable thrown = redeliver(template, key, workRuns);
                    assertThat(thrown).isSameAs(unreachable);
                    assertClaimHeldForTheRedeliverysLease(database, redelivered);
                    assertThat(redeliver(template, key, workRuns))
                            .isInstanceOf(IdempotencyTemplate.InProgressException.class);

                    // after that lease: asked again, and it answers null (decides nothing)
                    answer.set(null);
                    Thread.sleep(REDELIVERY_LEASE.toMillis() + 100);
                    redelivered = now(database);
                    assertThat(redeliver(template, key, workRuns)).isInstanceOf(StaleClaimUndecidedException.class)
                            .hasMessageContaining("answered null");
                    assertClaimHeldForTheRedeliverysLease(database, redelivered);
                    assertThat(redeliver(template, key, workRuns))
                            .isInstanceOf(IdempotencyTemplate.InProgressException.class);

                    // a status the storage policy does not keep
                    answer.set(StaleClaimResolver.Resolution.complete(new StoredResponse(503, List.of(),
                            "try again later".getBytes(StandardCharsets.UTF_8))));
                    Thread.sleep(REDELIVERY_LEASE.toMillis() + 100);
                    redelivered = now(database);
                    assertThat(redeliver(template, key, workRuns)).isInstanceOf(StaleClaimUndecidedException.class)
                            .hasMessageContaining("status 503");
                    assertClaimHeldForTheRedeliverysLease(database, redelivered);

                    // once it can tell, the next redelivery after the lease gets its answer
                    answer.set(StaleClaimResolver.Resolution.complete(new StoredResponse(200, List.of(),
                            "charged".getBytes(StandardCharsets.UTF_8))));
                    Thread.sleep(REDELIVERY_LEASE.toMillis() + 100);
                    IdempotencyTemplate.Result result = template.execute(key, MESSAGE, IdempotencyMode.INTENT_FIRST,
                            REDELIVERY_LEASE, () -> {
                                workRuns.incrementAndGet();
                                return "paid again".getBytes(StandardCharsets.UTF_8);
                            });
                    assertThat(result.replayed()).isTrue();
                    assertThat(result.value()).asString(StandardCharsets.UTF_8).isEqualTo("charged");
                    assertThat(workRuns).as("only the first delivery ran the work").hasValue(1);
                    assertThat(asked).as("asked once per lease, not per redelivery").hasValue(4);
                    assertThat(database.queryString("select status from idempotency_keys")).isEqualTo("SUCCEEDED");
                });
    }

    private static Throwable redeliver(IdempotencyTemplate template, ScopedKey key, AtomicInteger workRuns) {
        return catchThrowable(() -> template.execute(key, MESSAGE, IdempotencyMode.INTENT_FIRST, REDELIVERY_LEASE,
                () -> {
                    workRuns.incrementAndGet();
                    return "paid".getBytes(StandardCharsets.UTF_8);
                }));
    }

    /** The database's time, to compare the lease of a claim taken over after it with. */
    private static String now(TestPostgres.Database database) {
        return database.queryString("select now()::text");
    }

    /**
     * The claim is held for the whole lease of the redelivery that took it over after {@code redelivered}: compared
     * with that time, not with the time of the check, which a slow machine may reach well into the lease.
     */
    private static void assertClaimHeldForTheRedeliverysLease(TestPostgres.Database database, String redelivered) {
        assertThat(database.queryString("select status from idempotency_keys")).isEqualTo("PROCESSING");
        assertThat(database.queryString("select locked_until >= timestamptz '" + redelivered + "' + interval '"
                + REDELIVERY_LEASE.toMillis() + " milliseconds' from idempotency_keys"))
                .as("held under the redelivery's lease, not handed back").isEqualTo("t");
    }
}
