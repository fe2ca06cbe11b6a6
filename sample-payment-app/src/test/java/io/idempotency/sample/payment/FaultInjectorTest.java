package io.idempotency.sample.payment;

import org.junit.jupiter.api.Test;
import org.springframework.web.server.ResponseStatusException;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/** The {@code X-Chaos} header is inert unless fault injection is switched on, and strict when it is. */
class FaultInjectorTest {

    @Test
    void headerIsIgnoredWhenChaosIsDisabled() {
        FaultInjector disabled = new FaultInjector(new ChaosProperties(false), null, null);

        assertThat(disabled.parse("crash-after-write")).isEmpty();
        assertThat(disabled.parse("no such fault")).isEmpty();
    }

    @Test
    void enabledChaosParsesEveryFaultInOrder() {
        FaultInjector enabled = new FaultInjector(new ChaosProperties(true), null, null);

        assertThat(enabled.parse("delay-ms=300, crash-after-commit, crash-before-write"))
                .containsExactly(new FaultInjector.Fault(FaultInjector.Kind.DELAY, 300),
                        new FaultInjector.Fault(FaultInjector.Kind.CRASH_AFTER_COMMIT, 0),
                        new FaultInjector.Fault(FaultInjector.Kind.CRASH_BEFORE_WRITE, 0));
        assertThat(enabled.parse(null)).isEmpty();
        assertThatThrownBy(() -> enabled.parse("crash-sometime")).isInstanceOf(ResponseStatusException.class);
        assertThatThrownBy(() -> enabled.parse("delay-ms=-1")).isInstanceOf(ResponseStatusException.class);
    }

    @Test
    void eachEndpointAcceptsOnlyItsOwnFaults() {
        FaultInjector enabled = new FaultInjector(new ChaosProperties(true), null, null);

        assertThat(enabled.parseForCharges("crash-before-charge,fail-before-charge, crash-after-charge,"
                + "fail-after-charge, crash-before-commit, crash-after-commit, delay-ms=5"))
                .containsExactly(new FaultInjector.Fault(FaultInjector.Kind.CRASH_BEFORE_CHARGE, 0),
                        new FaultInjector.Fault(FaultInjector.Kind.FAIL_BEFORE_CHARGE, 0),
                        new FaultInjector.Fault(FaultInjector.Kind.CRASH_AFTER_CHARGE, 0),
                        new FaultInjector.Fault(FaultInjector.Kind.FAIL_AFTER_CHARGE, 0),
                        new FaultInjector.Fault(FaultInjector.Kind.CRASH_BEFORE_COMMIT, 0),
                        new FaultInjector.Fault(FaultInjector.Kind.CRASH_AFTER_COMMIT, 0),
                        new FaultInjector.Fault(FaultInjector.Kind.DELAY, 5));
        assertThatThrownBy(() -> enabled.parseForCharges("crash-after-write"))
                .isInstanceOf(ResponseStatusException.class)
                .hasMessageContaining("crash-after-charge");
        assertThatThrownBy(() -> enabled.parse("crash-after-charge"))
                .isInstanceOf(ResponseStatusException.class)
                .hasMessageContaining("crash-after-commit");
        assertThat(new FaultInjector(new ChaosProperties(false), null, null).parseForCharges("crash-after-charge"))
                .isEmpty();
    }
}
