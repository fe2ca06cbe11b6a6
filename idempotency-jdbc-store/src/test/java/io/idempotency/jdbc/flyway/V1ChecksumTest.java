package io.idempotency.jdbc.flyway;

import org.junit.jupiter.api.Test;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * V1's checksum is fixed, as every migrated database's history holds it; the scripts V1 runs must stay what they were
 * when it was fixed. A change of the table is a new migration (V2 and up), so that a database migrated by an earlier
 * release gets it too, and one migrated now does not get it twice.
 */
class V1ChecksumTest {

    @Test
    void theShippedScriptsAreTheOnesV1WasFixedWith() {
        assertThat(V1__Create_idempotency_keys.checksumOfScripts())
                .as("the shipped schema scripts changed: leave what V1 runs as it was, and ship the change as a"
                        + " migration of its own")
                .isEqualTo(V1__Create_idempotency_keys.CHECKSUM);
        assertThat(new V1__Create_idempotency_keys("any_table", true).getChecksum())
                .as("whatever the table's name and layout").isEqualTo(V1__Create_idempotency_keys.CHECKSUM);
    }
}
