package io.idempotency.mariadb;

import org.springframework.aot.hint.RuntimeHints;
import org.springframework.aot.hint.RuntimeHintsRegistrar;

/**
 * The shipped schema script ({@link MariaDbIdempotencyStore#schema(String)} reads it from the class path): a native
 * image holds only the resources it was told of. Found through {@code META-INF/spring/aot.factories} by Spring's
 * ahead-of-time processing.
 */
public final class MariaDbSchemaRuntimeHints implements RuntimeHintsRegistrar {

    @Override
    public void registerHints(RuntimeHints hints, ClassLoader classLoader) {
        hints.resources().registerPattern(MariaDbIdempotencyStore.SCHEMA_SCRIPT.substring(1));
    }
}
