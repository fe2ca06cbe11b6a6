package io.idempotency.mariadb;

import org.junit.jupiter.api.Test;
import org.springframework.aot.hint.RuntimeHints;
import org.springframework.aot.hint.RuntimeHintsRegistrar;
import org.springframework.aot.hint.predicate.RuntimeHintsPredicates;
import org.springframework.beans.factory.aot.AotServices;

import static org.assertj.core.api.Assertions.assertThat;

/** Spring's ahead-of-time processing finds the schema script a native image must hold. */
class MariaDbSchemaRuntimeHintsTest {

    @Test
    void theSchemaScriptIsAResourceOfTheImage() {
        RuntimeHints hints = new RuntimeHints();
        AotServices.factories().load(RuntimeHintsRegistrar.class)
                .forEach(registrar -> registrar.registerHints(hints, getClass().getClassLoader()));

        assertThat(RuntimeHintsPredicates.resource().forResource(MariaDbIdempotencyStore.SCHEMA_SCRIPT.substring(1)))
                .accepts(hints);
        assertThat(MariaDbIdempotencyStore.schema("idempotency_keys")).contains("CREATE TABLE");
    }
}
