package io.idempotency.spring;

import io.idempotency.testkit.TestPostgres;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;
import org.springframework.boot.diagnostics.FailureAnalysis;

import static io.idempotency.spring.StartupFailures.startupFailure;
import static org.assertj.core.api.Assertions.assertThat;

/**
 * The README's {@code idempotency.methods}: a name the IANA registry does not hold as a method an answer can be
 * replayed for stops the start, naming the setting. CONNECT is registered but opens a tunnel, with no answer to
 * replay; PRI is HTTP/2's connection preface; {@code *} is the registry's wildcard.
 */
class UnregisteredMethodSettingTest {

    private static final TestPostgres.Database DATABASE = TestPostgres.newDatabase();

    @ParameterizedTest
    @ValueSource(strings = {"CONNECT", "connect", "PRI", "*"})
    void aMethodWithNoAnswerToReplayStopsTheStartNamingTheSetting(String method) {
        FailureAnalysis analysis = new IdempotencyFailureAnalyzer().analyze(startupFailure(
                TestDatabases.contextRunner(DATABASE).withPropertyValues("idempotency.methods=POST," + method)));

        assertThat(analysis).as("a report naming the setting, not a bare exception").isNotNull();
        assertThat(analysis.getDescription()).startsWith("idempotency.methods (").contains(method + " is none");
        assertThat(analysis.getAction()).contains("idempotency.methods");
    }
}
