package io.idempotency.spring;

import org.junit.jupiter.api.Test;
import org.springframework.test.context.TestPropertySource;

import java.util.UUID;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * Behind a proxy that serves the application (deployed under {@code /shop}) at {@code /gateway}, and says so with
 * {@code X-Forwarded-Prefix}, which Spring's {@code ForwardedHeaderFilter} reads
 * ({@code server.forward-headers-strategy=framework}): the application sees {@code /gateway} as its context path.
 * On Jetty a forward made inside the dispatcher fails in Spring MVC's parsing of the forwarded path here, before any
 * handler runs, with or without the library (the context path it reads, {@code /gateway}, does not begin the path of
 * the forward): the forward's refusal holds there because no handler is reached at all.
 */
@TestPropertySource(properties = {"server.servlet.context-path=/shop", "server.forward-headers-strategy=framework"})
class ForwardedPrefixIntegrationTest extends DeployedUnderAPathIntegrationTest {

    @Override
    String sentPrefix() {
        return "/shop";
    }

    @Override
    String seenPrefix() {
        return "/gateway";
    }

    @Override
    String contextPath() {
        return "/gateway";
    }

    @Override
    String proxyHeaders() {
        return "X-Forwarded-Prefix: /gateway\r\nX-Forwarded-Host: shop.example\r\nX-Forwarded-Proto: https\r\n";
    }

    /**
     * The prefix is part of the concrete path the request is fingerprinted by: the same key and body through another
     * prefix (another proxy route, or none) are another request, refused, never answered with a stored answer whose
     * links were made for the first prefix.
     */
    @Test
    void theSameBodyUnderTheKeyThroughAnotherPrefixIsAnotherRequest() throws Exception {
        String key = UUID.randomUUID().toString();
        String note = "prefixed-" + key;

        String first = post("/orders", key, note);
        String elsewhere = post("/shop/orders", "X-Forwarded-Prefix: /other\r\n", key, note);
        String direct = post("/shop/orders", "", key, note);
        String retry = post("/orders", key, note);

        assertThat(first).startsWith("HTTP/1.1 201 ");
        assertThat(elsewhere).startsWith("HTTP/1.1 422 ").contains("\"instance\":\"/other/orders\"");
        assertThat(direct).startsWith("HTTP/1.1 422 ").contains("\"instance\":\"/shop/orders\"");
        assertThat(retry).startsWith("HTTP/1.1 201 ").contains("Idempotent-Replayed: true");
        assertThat(rows(note)).isEqualTo(1);
    }
}
