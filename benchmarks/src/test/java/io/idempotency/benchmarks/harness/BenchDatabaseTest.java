package io.idempotency.benchmarks.harness;

import org.junit.jupiter.api.Test;

import static org.assertj.core.api.Assertions.assertThat;

class BenchDatabaseTest {

    @Test
    void aPasswordInTheUrlIsNotPrinted() {
        // the report's header names the server by its URL, and the docs allow the password in it
        assertThat(BenchDatabase.shown("jdbc:postgresql://db:5432/bench?user=bench&password=s3cr%26t!&ssl=false"))
                .isEqualTo("jdbc:postgresql://db:5432/bench?user=bench&password=***&ssl=false");
        assertThat(BenchDatabase.shown("jdbc:postgresql://db/bench?PASSWORD=x"))
                .isEqualTo("jdbc:postgresql://db/bench?PASSWORD=***");
        assertThat(BenchDatabase.shown("jdbc:postgresql://db/bench?user=bench"))
                .isEqualTo("jdbc:postgresql://db/bench?user=bench");
    }
}
