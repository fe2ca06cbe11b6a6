package io.idempotency.spring.app;

import org.springframework.stereotype.Component;

import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicLong;

/**
 * A third party that deduplicates on the idempotency key it receives, as a payment gateway does. Kept in memory: it is
 * deliberately outside the application's database, so no transaction can roll its charges back.
 */
@Component
public class FakeGateway {

    private final Map<String, Long> charges = new ConcurrentHashMap<>();
    private final AtomicLong ids = new AtomicLong();
    private final AtomicLong calls = new AtomicLong();

    /** Charges once per key; returns the charge id. */
    public long charge(String idempotencyKey) {
        calls.incrementAndGet();
        return charges.computeIfAbsent(idempotencyKey, key -> ids.incrementAndGet());
    }

    public Long chargeFor(String idempotencyKey) {
        return charges.get(idempotencyKey);
    }

    public int charges() {
        return charges.size();
    }

    public long calls() {
        return calls.get();
    }
}
