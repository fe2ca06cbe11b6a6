package io.idempotency.jdbc;

import org.springframework.aot.hint.RuntimeHints;
import org.springframework.aot.hint.RuntimeHintsRegistrar;

/**
 * The shipped schema scripts, read from the class path when the table is created or checked (and for the checksum of
 * the library's migration): a native image holds only the resources it was told of. Found through
 * {@code META-INF/spring/aot.factories} by Spring's ahead-of-time processing.
 */
public final class IdempotencySchemaRuntimeHints implements RuntimeHintsRegistrar {

    @Override
    public void registerHints(RuntimeHints hints, ClassLoader classLoader) {
        hints.resources().registerPattern(IdempotencySchema.POSTGRESQL_SCRIPT);
        hints.resources().registerPattern(IdempotencySchema.POSTGRESQL_PARTITIONED_SCRIPT);
    }
}
