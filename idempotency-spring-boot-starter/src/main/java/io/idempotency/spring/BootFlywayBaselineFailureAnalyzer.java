package io.idempotency.spring;

import io.idempotency.jdbc.flyway.IdempotencySchemaMigrator;
import org.springframework.boot.diagnostics.FailureAnalysis;
import org.springframework.boot.diagnostics.FailureAnalyzer;

/**
 * Explains Flyway's refusal of a schema "that is not empty but has no schema history table" when Spring Boot's own
 * Flyway is added to an application that used the library before: the library's table and its migration history
 * (kept apart from the application's) are in the schema already, and Flyway needs a baseline below the application's
 * first migration to start a history of its own. Flyway's message alone says nothing of the library, nor that the
 * baseline version Flyway uses by default would mark the application's {@code V1} as applied without running it.
 * Registered in {@code META-INF/spring.factories}; not for use by applications.
 */
public final class BootFlywayBaselineFailureAnalyzer implements FailureAnalyzer {

    private static final String FLYWAY_EXCEPTION = "org.flywaydb.core.api.FlywayException";

    @Override
    public FailureAnalysis analyze(Throwable failure) {
        for (Throwable cause = failure; cause != null; cause = cause.getCause()) {
            String message = cause.getMessage();
            if (isFlywayException(cause) && message != null && message.contains("non-empty schema")
                    && message.contains("no schema history table")) {
                return new FailureAnalysis(description(message), ACTION, cause);
            }
            if (cause.getCause() == cause) {
                break;
            }
        }
        return null;
    }

    private static String description(String message) {
        return "Flyway (Spring Boot's, for the application's own migrations) refused to start: " + message
                + "\n\nIf the application used the idempotency starter before Spring Boot's Flyway was added, the"
                + " starter's table and its own migration history (" + IdempotencySchemaMigrator.HISTORY_TABLE
                + " for the default table) are in that schema already, which Flyway counts as not empty.";
    }

    private static final String ACTION = "If the schema's only tables are the idempotency starter's (its table and"
            + " " + IdempotencySchemaMigrator.HISTORY_TABLE + "), set spring.flyway.baseline-on-migrate=true and"
            + " spring.flyway.baseline-version=0: Spring Boot's Flyway then starts a history of its own below your"
            + " first migration and still runs your V1 (with the default baseline version, 1, it would mark V1 as"
            + " applied without running it). If the schema holds tables your migrations made before Flyway kept their"
            + " history, baseline at the version that made them instead (spring.flyway.baseline-version), so that"
            + " those migrations are not run again.";

    private static boolean isFlywayException(Throwable failure) {
        for (Class<?> type = failure.getClass(); type != null; type = type.getSuperclass()) {
            if (type.getName().equals(FLYWAY_EXCEPTION)) {
                return true;
            }
        }
        return false;
    }
}
