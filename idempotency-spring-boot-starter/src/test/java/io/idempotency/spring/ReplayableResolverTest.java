package io.idempotency.spring;

import io.idempotency.core.ScopedKey;
import io.idempotency.core.StaleClaimResolver;
import io.idempotency.core.StaleClaimUndecidedException;
import io.idempotency.core.StoredResponse;
import org.junit.jupiter.api.Test;

import java.time.Instant;
import java.util.List;
import java.util.stream.IntStream;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/**
 * A resolver's "complete" answer whose headers the server could not send is refused as deciding nothing, with the
 * type a message listener tells from its own mistakes by (side-effects.md: redeliver later), and one that fits is kept
 * without the headers that are never stored.
 */
class ReplayableResolverTest {

    private static final StaleClaimResolver.StaleClaim CLAIM = new StaleClaimResolver.StaleClaim(
            new ScopedKey("", "charges", "k-1"), "downstream", "hash", Instant.EPOCH, Instant.EPOCH, false);

    @Test
    void anAnswerWithMoreHeadersThanTheServerSendsDecidesNothing() {
        HeaderSectionLimit limit = new HeaderSectionLimit();
        limit.limit(8 * 1024);
        List<StoredResponse.Header> links = IntStream.range(0, 400)
                .mapToObj(i -> new StoredResponse.Header("Link", "</gateway/charges/7/events/" + i + ">; rel=\"item\""))
                .toList();
        StaleClaimResolver resolver = ReplayableResolver.of(
                claim -> StaleClaimResolver.Resolution.complete(new StoredResponse(201, links, new byte[0])),
                List.of("Link"), limit);

        assertThatThrownBy(() -> resolver.resolve(CLAIM)).isInstanceOf(StaleClaimUndecidedException.class)
                .hasMessageContaining("answer with fewer headers");
    }

    @Test
    void anAnswerThatFitsKeepsOnlyTheHeadersThatAreStored() {
        HeaderSectionLimit limit = new HeaderSectionLimit();
        limit.limit(8 * 1024);
        StaleClaimResolver resolver = ReplayableResolver.of(
                claim -> StaleClaimResolver.Resolution.complete(new StoredResponse(201, List.of(
                        new StoredResponse.Header("Link", "</gateway/charges/7>"),
                        new StoredResponse.Header("Set-Cookie", "gateway-session=secret")), new byte[0])),
                List.of("Link", "Set-Cookie"), limit);

        StaleClaimResolver.Resolution resolution = resolver.resolve(CLAIM);

        assertThat(resolution).isInstanceOf(StaleClaimResolver.Complete.class);
        assertThat(((StaleClaimResolver.Complete) resolution).response().headers())
                .extracting(StoredResponse.Header::name).containsExactly("Link");
    }
}
