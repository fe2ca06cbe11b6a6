package io.idempotency.spring.app;

import io.idempotency.core.StaleClaimResolver;
import io.idempotency.core.StoredResponse;
import org.springframework.stereotype.Component;

import java.nio.charset.StandardCharsets;
import java.util.List;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicReference;
import java.util.function.Supplier;

/** Asks the gateway whether a stale claim's charge happened: if so, completes with it; if not, lets the retry rerun. */
@Component
public class GatewayResolver implements StaleClaimResolver {

    private final FakeGateway gateway;
    private final AtomicInteger consultations = new AtomicInteger();

    public GatewayResolver(FakeGateway gateway) {
        this.gateway = gateway;
    }

    private final AtomicReference<Supplier<Resolution>> next = new AtomicReference<>();

    /** The next consultation answers with {@code decision} (which may throw) instead of asking the gateway. */
    public void decideNext(Supplier<Resolution> decision) {
        next.set(decision);
    }

    @Override
    public Resolution resolve(StaleClaim claim) {
        consultations.incrementAndGet();
        Supplier<Resolution> decision = next.getAndSet(null);
        if (decision != null) {
            return decision.get();
        }
        Long charge = gateway.chargeFor(claim.downstreamKey());
        if (charge == null) {
            return Resolution.rerun();
        }
        return Resolution.complete(new StoredResponse(201,
                List.of(new StoredResponse.Header("Content-Type", "application/json")),
                ("{\"charge\":" + charge + ",\"resolved\":true}").getBytes(StandardCharsets.UTF_8)));
    }

    public int consultations() {
        return consultations.get();
    }
}
