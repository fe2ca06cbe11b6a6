package io.idempotency.spring;

import org.assertj.core.api.AbstractStringAssert;
import org.springframework.boot.test.context.runner.AbstractApplicationContextRunner;

import java.util.concurrent.atomic.AtomicReference;

import static org.assertj.core.api.Assertions.assertThat;

/** Applications the startup checks refuse: each is run, must not start, and is read for what it was told. */
final class StartupFailures {

    private StartupFailures() {
    }

    /** Runs the application {@code runner} describes, asserts that it did not start, and returns why. */
    static Throwable startupFailure(AbstractApplicationContextRunner<?, ?, ?> runner) {
        AtomicReference<Throwable> failure = new AtomicReference<>();
        runner.run(context -> {
            assertThat(context).hasFailed();
            failure.set(context.getStartupFailure());
        });
        return failure.get();
    }

    /**
     * Asserts that the application does not start; what is chained on is asserted of the message of the failure's root
     * cause: the check's own words, without the bean creation exceptions Spring wraps them in.
     */
    static AbstractStringAssert<?> assertStartFails(AbstractApplicationContextRunner<?, ?, ?> runner) {
        return assertThat(rootMessage(startupFailure(runner)));
    }

    /**
     * Asserts that the application does not start; what is chained on is asserted of the description the starter's
     * failure analyzer gives, the one Spring Boot's startup report shows.
     */
    static AbstractStringAssert<?> assertStartFailsWithDescription(AbstractApplicationContextRunner<?, ?, ?> runner) {
        return assertThat(new IdempotencyFailureAnalyzer().analyze(startupFailure(runner)).getDescription());
    }

    /** The message of the innermost cause of {@code failure}. */
    static String rootMessage(Throwable failure) {
        Throwable root = failure;
        while (root.getCause() != null) {
            root = root.getCause();
        }
        return root.getMessage();
    }
}
