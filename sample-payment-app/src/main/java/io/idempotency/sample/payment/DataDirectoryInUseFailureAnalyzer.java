package io.idempotency.sample.payment;

import org.springframework.boot.diagnostics.AbstractFailureAnalyzer;
import org.springframework.boot.diagnostics.FailureAnalysis;

/**
 * A second instance started on the data directory of a running one (the first one was not stopped): Spring Boot's
 * "APPLICATION FAILED TO START" report says so and what to do, instead of a page of nested bean creation errors.
 * Registered in {@code META-INF/spring.factories}.
 */
public final class DataDirectoryInUseFailureAnalyzer
        extends AbstractFailureAnalyzer<EmbeddedPostgresServer.DataDirectoryInUseException> {

    @Override
    protected FailureAnalysis analyze(Throwable rootFailure, EmbeddedPostgresServer.DataDirectoryInUseException cause) {
        return new FailureAnalysis(cause.getMessage() + ".", "Stop the instance that is running (it keeps its data"
                + " there), start this one with another --sample.embedded.data-dir, or point spring.datasource.url"
                + " at a PostgreSQL of your own.", cause);
    }
}
