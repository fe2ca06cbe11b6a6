package io.idempotency.sample.payment;

import java.util.ArrayDeque;
import java.util.Deque;
import java.util.EnumSet;
import java.util.Set;

/**
 * The life of a payment at the provider: {@code PENDING}, then {@code SUCCEEDED}, {@code FAILED} or {@code CLOSED}
 * (abandoned unpaid). A succeeded payment may be {@code DISPUTED} by the payer's bank, and return to
 * {@code SUCCEEDED} when the dispute is won — a status can come back, so the status alone cannot tell an old event
 * from a new one: the version can. A succeeded or disputed payment may end {@code REFUNDED}.
 */
public enum ProviderStatus {
    PENDING,
    SUCCEEDED,
    FAILED,
    CLOSED,
    DISPUTED,
    REFUNDED;

    /** The statuses this one may directly follow. */
    public Set<ProviderStatus> predecessors() {
        return switch (this) {
            case PENDING -> EnumSet.noneOf(ProviderStatus.class);
            case SUCCEEDED -> EnumSet.of(PENDING, DISPUTED);
            case FAILED, CLOSED -> EnumSet.of(PENDING);
            case DISPUTED -> EnumSet.of(SUCCEEDED);
            case REFUNDED -> EnumSet.of(SUCCEEDED, DISPUTED);
        };
    }

    /** Whether {@code later} can come after this status, directly or through others. */
    public boolean canLeadTo(ProviderStatus later) {
        return later.predecessors().contains(this) || canReachThroughOthers(later);
    }

    /** Whether {@code later} can come after this status through at least one other status. */
    public boolean canReachThroughOthers(ProviderStatus later) {
        // walk back from later's predecessors' predecessors: is this status among their ancestors?
        Set<ProviderStatus> seen = EnumSet.noneOf(ProviderStatus.class);
        Deque<ProviderStatus> open = new ArrayDeque<>(later.predecessors());
        while (!open.isEmpty()) {
            ProviderStatus step = open.pop();
            for (ProviderStatus before : step.predecessors()) {
                if (before == this) {
                    return true;
                }
                if (seen.add(before)) {
                    open.push(before);
                }
            }
        }
        return false;
    }
}
