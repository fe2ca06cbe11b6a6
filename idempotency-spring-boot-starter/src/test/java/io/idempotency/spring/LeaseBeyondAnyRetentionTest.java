package io.idempotency.spring;

import io.idempotency.core.Idempotent;
import io.idempotency.core.IdempotencyMode;
import io.idempotency.testkit.TestPostgres;
import org.junit.jupiter.api.Test;
import org.springframework.boot.diagnostics.FailureAnalysis;
import org.springframework.web.bind.annotation.PostMapping;
import org.springframework.web.bind.annotation.RestController;

import static io.idempotency.spring.StartupFailures.startupFailure;
import static org.assertj.core.api.Assertions.assertThat;

/**
 * A lease so long that the retry window plus it is more than a duration can count (a slip of the keyboard: a few
 * hundred trillion days): refused as any lease the retention does not cover, naming the settings, not with an
 * arithmetic overflow from inside a bean.
 */
class LeaseBeyondAnyRetentionTest {

    private static final TestPostgres.Database DATABASE = TestPostgres.newDatabase();

    @Test
    void aConfiguredLeaseBeyondWhatADurationCountsIsRefusedByName() {
        FailureAnalysis analysis = new IdempotencyFailureAnalyzer().analyze(startupFailure(
                TestDatabases.contextRunner(DATABASE).withPropertyValues("idempotency.lease=106751991167300d")));
        assertThat(analysis).as("a report naming the settings, not a bare overflow").isNotNull();
        assertThat(analysis.getDescription()).startsWith("idempotency.retention.ttl (30d) must be at least")
                .contains("idempotency.lease (106751991167300d)");
    }

    @Test
    void anEndpointLeaseBeyondWhatADurationCountsIsRefusedNamingTheMethod() {
        FailureAnalysis analysis = new IdempotencyFailureAnalyzer().analyze(startupFailure(
                TestDatabases.contextRunner(DATABASE).withUserConfiguration(Charges.class)));
        assertThat(analysis).as("a report naming the method, not a bare overflow").isNotNull();
        assertThat(analysis.getDescription()).contains("LeaseBeyondAnyRetentionTest$Charges.charge()",
                "idempotency.retention.ttl (30d) must be at least");
    }

    @RestController
    static class Charges {
        @PostMapping("/charges")
        @Idempotent(mode = IdempotencyMode.INTENT_FIRST, lease = "106751991167300d")
        public String charge() {
            return "charged";
        }
    }
}
