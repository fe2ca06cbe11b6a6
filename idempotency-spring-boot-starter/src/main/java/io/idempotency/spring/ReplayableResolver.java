package io.idempotency.spring;

import io.idempotency.core.StaleClaimResolver;
import io.idempotency.core.StaleClaimUndecidedException;
import io.idempotency.core.StoredResponse;

import java.util.Collection;
import java.util.List;
import java.util.Set;

/**
 * The application's {@link StaleClaimResolver}, whose "complete" answers keep the headers a handler's answer keeps:
 * those of {@code idempotency.replayed-headers}, never Set-Cookie, Authorization and the like
 * ({@link IdempotencyFilter#NEVER_STORED}), nor those its {@code Connection} header names. A resolver often passes on
 * what a third party answered; its session cookie or credentials must be neither stored nor replayed to the client,
 * and what described its connection means nothing on the client's. Nor is an answer kept whose headers take more than
 * the server sends, as a handler's such answer is not ({@link IdempotencyFilter#HEADER_SECTION_MARGIN}): stored, it
 * and every replay of it would fail for as long as the record is kept. It is refused as a failure of the resolver,
 * which leaves the claim PROCESSING for a later resolution. Thread-safe.
 */
final class ReplayableResolver implements StaleClaimResolver {

    private final StaleClaimResolver resolver;
    private final Set<String> replayedHeaders;
    private final HeaderSectionLimit headerSectionLimit;

    private ReplayableResolver(StaleClaimResolver resolver, Set<String> replayedHeaders,
                               HeaderSectionLimit headerSectionLimit) {
        this.resolver = resolver;
        this.replayedHeaders = replayedHeaders;
        this.headerSectionLimit = headerSectionLimit;
    }

    /**
     * {@code resolver}, its answers keeping only {@code replayedHeaders} (without those never stored), and refused when
     * those take more than {@code headerSectionLimit} allows.
     */
    static StaleClaimResolver of(StaleClaimResolver resolver, Collection<String> replayedHeaders,
                                 HeaderSectionLimit headerSectionLimit) {
        return new ReplayableResolver(resolver, IdempotencyFilter.storedHeaderNames(replayedHeaders),
                headerSectionLimit);
    }

    @Override
    public Resolution resolve(StaleClaim claim) {
        Resolution resolution = resolver.resolve(claim);
        if (!(resolution instanceof Complete complete)) {
            return resolution; // null too: the engine and the sweeper refuse it as deciding nothing
        }
        StoredResponse answer = complete.response();
        List<StoredResponse.Header> headers = IdempotencyFilter.storedHeaders(answer.headers(), replayedHeaders);
        long limit = headerSectionLimit.bytes();
        long bytes = headerSectionLowerBound(headers);
        if (bytes > limit - IdempotencyFilter.HEADER_SECTION_MARGIN) {
            throw new StaleClaimUndecidedException("the stale claim resolver answered complete with headers of at"
                    + " least " + bytes + " bytes for " + claim.key() + ", more than the server sends (" + limit
                    + ") less " + IdempotencyFilter.HEADER_SECTION_MARGIN + " bytes for the headers it and a replay"
                    + " add: the answer and every replay of it could not be sent. The claim stays PROCESSING and is"
                    + " resolved again once its lease has run out; answer with fewer headers");
        }
        return Resolution.complete(new StoredResponse(answer.status(), headers, answer.body()));
    }

    /**
     * The fewest bytes the header section of an answer with {@code headers} takes over HTTP/1.1, counted as
     * {@link DeferredResponse#headerSectionLowerBound()} counts a handler's.
     */
    static long headerSectionLowerBound(List<StoredResponse.Header> headers) {
        long bytes = "HTTP/1.1 200 \r\n\r\n".length();
        for (StoredResponse.Header header : headers) {
            bytes += header.name().length() + ": \r\n".length() + header.value().length();
        }
        return bytes;
    }
}
