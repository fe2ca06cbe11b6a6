package io.idempotency.spring;

import io.idempotency.core.StaleClaimResolver;
import io.idempotency.core.StoredResponse;

import java.util.Collection;
import java.util.Set;

/**
 * The application's {@link StaleClaimResolver}, whose "complete" answers keep the headers a handler's answer keeps:
 * those of {@code idempotency.replayed-headers}, never Set-Cookie, Authorization and the like
 * ({@link IdempotencyFilter#NEVER_STORED}), nor those its {@code Connection} header names. A resolver often passes on
 * what a third party answered; its session cookie or credentials must be neither stored nor replayed to the client,
 * and what described its connection means nothing on the client's. Thread-safe.
 */
final class ReplayableResolver implements StaleClaimResolver {

    private final StaleClaimResolver resolver;
    private final Set<String> replayedHeaders;

    private ReplayableResolver(StaleClaimResolver resolver, Set<String> replayedHeaders) {
        this.resolver = resolver;
        this.replayedHeaders = replayedHeaders;
    }

    /** {@code resolver}, its answers keeping only {@code replayedHeaders} (without those never stored). */
    static StaleClaimResolver of(StaleClaimResolver resolver, Collection<String> replayedHeaders) {
        return new ReplayableResolver(resolver, IdempotencyFilter.storedHeaderNames(replayedHeaders));
    }

    @Override
    public Resolution resolve(StaleClaim claim) {
        Resolution resolution = resolver.resolve(claim);
        if (!(resolution instanceof Complete complete)) {
            return resolution; // null too: the engine and the sweeper refuse it as deciding nothing
        }
        StoredResponse answer = complete.response();
        return Resolution.complete(new StoredResponse(answer.status(),
                IdempotencyFilter.storedHeaders(answer.headers(), replayedHeaders), answer.body()));
    }
}
