package io.idempotency.sample.payment;

import java.nio.charset.StandardCharsets;
import java.time.Duration;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * A request that halts the application's JVM at one of the {@link FaultInjector}'s crash points, and the checks that
 * it really died there: the crash tests of both endpoints rely on them, so they are made in one place.
 */
final class CrashRequest {

    private CrashRequest() {
    }

    /**
     * Sends {@code body} to {@code path} with the fault and checks that the JVM, up before, died at the fault's point
     * ({@code haltedAt}, what it logs there) with {@link FaultInjector#HALT_STATUS}, without answering.
     */
    static void send(SampleAppProcess app, String path, String key, String body, String fault, String haltedAt,
            Duration exitTimeout) throws Exception {
        // A request to a JVM that is already dead gets no answer either, and its exit status would be that of an
        // earlier crash: without these checks the crash would not have to happen for the test to pass.
        assertThat(app.process().isAlive()).as("the application is up before the crash").isTrue();
        byte[] received = app.api().postJsonUntilClosed(path, key, body, fault);
        assertThat(app.awaitExit(exitTimeout)).isEqualTo(FaultInjector.HALT_STATUS);
        // not a byte of an answer: not even a status line, which an HTTP client would report as a failure too
        assertThat(new String(received, StandardCharsets.ISO_8859_1)).as("the JVM must die before answering")
                .isEmpty();
        assertThat(app.output()).as("halted at the point of %s", fault).contains(haltedAt);
    }
}
