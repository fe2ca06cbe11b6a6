package io.idempotency.sample.payment;

import java.util.List;

/**
 * The faults the {@code X-Chaos} header asks {@code POST /charges} to inject, as a handler parameter. Resolved by
 * {@link ChargeWebConfiguration} while Spring MVC binds the arguments — before the {@code @Idempotent} advice claims
 * the key — so an unknown fault is a 400 that leaves nothing behind. Empty unless {@code sample.chaos.enabled=true}.
 *
 * @param faults the faults, in the order the header lists them
 */
public record ChargeFaults(List<FaultInjector.Fault> faults) {

    public ChargeFaults {
        faults = List.copyOf(faults);
    }
}
