package io.idempotency.spring;

import org.springframework.boot.autoconfigure.condition.ConditionOutcome;
import org.springframework.boot.autoconfigure.condition.SpringBootCondition;
import org.springframework.boot.context.properties.bind.Binder;
import org.springframework.context.annotation.ConditionContext;
import org.springframework.core.env.Environment;
import org.springframework.core.type.AnnotatedTypeMetadata;

/**
 * Whether the application has retention work to do: cleanup enabled ({@code idempotency.retention.cleanup.enabled},
 * default true), or the partitioned mode, where every instance keeps partitions made ahead even with cleanup off.
 * Bound like the properties themselves, so {@code drop-partitions} and {@code DROP_PARTITIONS} both count.
 */
class RetentionSchedulerCondition extends SpringBootCondition {

    @Override
    public ConditionOutcome getMatchOutcome(ConditionContext context, AnnotatedTypeMetadata metadata) {
        return outcome(context.getEnvironment());
    }

    /** The condition's outcome under the settings of {@code environment}. */
    static ConditionOutcome outcome(Environment environment) {
        Binder binder = Binder.get(environment);
        boolean enabled = binder.bind("idempotency.retention.cleanup.enabled", Boolean.class).orElse(true);
        IdempotencyProperties.CleanupMode mode = binder.bind("idempotency.retention.cleanup.mode",
                IdempotencyProperties.CleanupMode.class).orElse(IdempotencyProperties.CleanupMode.DELETE);
        if (mode == IdempotencyProperties.CleanupMode.DROP_PARTITIONS) {
            return ConditionOutcome.match("partitioned mode: partitions are created ahead"
                    + (enabled ? " and dropped" : ", cleanup being disabled"));
        }
        return enabled ? ConditionOutcome.match("cleanup enabled")
                : ConditionOutcome.noMatch("idempotency.retention.cleanup.enabled is false");
    }
}
