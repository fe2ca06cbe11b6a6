package io.idempotency.spring;

import org.springframework.boot.autoconfigure.condition.ConditionOutcome;
import org.springframework.boot.autoconfigure.condition.SpringBootCondition;
import org.springframework.boot.context.properties.bind.Binder;
import org.springframework.context.annotation.ConditionContext;
import org.springframework.core.env.Environment;
import org.springframework.core.type.AnnotatedTypeMetadata;

/**
 * Whether this instance sweeps stale claims ({@code idempotency.sweeper.enabled}, default true). Bound like the
 * properties themselves, so every value they take as true ({@code yes}, {@code on}, {@code 1}) keeps the sweeper on,
 * rather than only the exact text {@code true}.
 */
class StaleClaimSweepSchedulerCondition extends SpringBootCondition {

    @Override
    public ConditionOutcome getMatchOutcome(ConditionContext context, AnnotatedTypeMetadata metadata) {
        return outcome(context.getEnvironment());
    }

    /** The condition's outcome under the settings of {@code environment}. */
    static ConditionOutcome outcome(Environment environment) {
        boolean enabled = Binder.get(environment).bind("idempotency.sweeper.enabled", Boolean.class).orElse(true);
        return enabled ? ConditionOutcome.match("sweeper enabled")
                : ConditionOutcome.noMatch("idempotency.sweeper.enabled is false");
    }
}
