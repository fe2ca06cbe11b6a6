package io.idempotency.spring;

import org.springframework.boot.diagnostics.AbstractFailureAnalyzer;
import org.springframework.boot.diagnostics.FailureAnalysis;

/**
 * Turns the library's startup refusals into Spring Boot's "APPLICATION FAILED TO START" report, with the action to
 * take, rather than a stack trace. Registered in {@code META-INF/spring.factories}; not for use by applications.
 */
public final class IdempotencyFailureAnalyzer extends AbstractFailureAnalyzer<IdempotencyConfigurationException> {

    @Override
    protected FailureAnalysis analyze(Throwable rootFailure, IdempotencyConfigurationException cause) {
        return new FailureAnalysis(cause.getMessage(), cause.action(), cause);
    }
}
