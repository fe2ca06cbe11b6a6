package io.idempotency.spring;

import org.junit.jupiter.api.Test;
import org.springframework.test.context.TestPropertySource;

import java.net.http.HttpResponse;
import java.util.List;
import java.util.Locale;
import java.util.UUID;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * Headers that carry one client's credentials or session are never stored or replayed, even when the application
 * lists them among the replayed headers: an anonymous caller's stored answer could otherwise hand one client's session
 * to another.
 */
@TestPropertySource(properties = {
        "idempotency.replayed-headers=Content-Type,Location,Set-Cookie,Authorization,WWW-Authenticate,"
                + "Authentication-Info",
        "idempotency.replay-cache.max-entries=0"})
class SensitiveHeadersIntegrationTest extends OrdersApplicationTest {

    /** Every header of credentials, challenges for them, or session state (RFC 9110, section 11; RFC 6265). */
    private static final List<String> CREDENTIALS = List.of("Set-Cookie", "Set-Cookie2", "Cookie", "Authorization",
            "Proxy-Authorization", "WWW-Authenticate", "Proxy-Authenticate", "Authentication-Info",
            "Proxy-Authentication-Info");

    @Test
    void noCredentialHeaderIsAmongThoseStored() {
        for (String name : CREDENTIALS) {
            assertThat(IdempotencyFilter.storedHeaderNames(List.of(name, name.toUpperCase(Locale.ROOT))))
                    .as(name).isEmpty();
        }
    }

    @Test
    void credentialsAreNeverStoredEvenWhenListed() throws Exception {
        String key = UUID.randomUUID().toString();
        String body = "{\"note\":\"cookie-" + key + "\"}";

        HttpResponse<byte[]> first = post("/orders", key, body);
        HttpResponse<byte[]> replay = post("/orders", key, body);

        assertThat(first.statusCode()).isEqualTo(201);
        assertThat(first.headers().firstValue("Set-Cookie")).as("the first answer is sent whole").isPresent();
        assertThat(first.headers().firstValue("Authentication-Info")).isPresent();
        assertThat(storedHeaders(key)).containsIgnoringCase("Location:").doesNotContainIgnoringCase("set-cookie")
                .doesNotContainIgnoringCase("authentication-info").doesNotContain("secret-");
        assertThat(replay.headers().firstValue("Idempotent-Replayed")).hasValue("true");
        assertThat(replay.headers().firstValue("Location")).isEqualTo(first.headers().firstValue("Location"));
        assertThat(replay.headers().firstValue("Set-Cookie")).isEmpty();
        assertThat(replay.headers().firstValue("Authentication-Info")).isEmpty();
    }

    @Test
    void aTokenInTheAnswersAuthorizationHeaderIsNeverStoredEvenWhenListed() throws Exception {
        // replayed, the token would reach whoever sends the key with the same request, as every anonymous client is
        // one caller
        String key = UUID.randomUUID().toString();
        String body = "{\"note\":\"token-" + key + "\"}";

        HttpResponse<byte[]> first = post("/orders/with-token", key, body);
        HttpResponse<byte[]> replay = post("/orders/with-token", key, body);

        assertThat(first.statusCode()).isEqualTo(201);
        assertThat(first.headers().firstValue("Authorization")).as("the first answer is sent whole")
                .hasValueSatisfying(token -> assertThat(token).startsWith("Bearer secret-"));
        assertThat(storedHeaders(key)).containsIgnoringCase("Location:").doesNotContainIgnoringCase("authorization")
                .doesNotContain("secret-");
        assertThat(replay.headers().firstValue("Idempotent-Replayed")).hasValue("true");
        assertThat(replay.headers().firstValue("Authorization")).isEmpty();
    }

    @Test
    void aSessionIdInAnEncodedUrlIsNeitherStoredNorReplayed() throws Exception {
        // the handler creates a session and redirects: for a client that sent no session cookie, the container writes
        // the session's id into the encoded URL (URL rewriting), and a replay would hand that session to whoever sends
        // the key with the same request, as every anonymous client is one caller
        String key = UUID.randomUUID().toString();
        String body = "{\"note\":\"session-" + key + "\"}";

        HttpResponse<byte[]> unguarded = send(request("/views/session-orders/unguarded",
                "{\"note\":\"session-unguarded-" + key + "\"}").build());
        HttpResponse<byte[]> first = post("/views/session-orders", key, body);
        HttpResponse<byte[]> replay = post("/views/session-orders", key, body);

        assertThat(unguarded.headers().firstValue("Location")).as("the container encodes the session into URLs")
                .hasValueSatisfying(location -> assertThat(location).containsIgnoringCase(";jsessionid="));
        assertThat(first.statusCode()).isEqualTo(302);
        assertThat(first.headers().firstValue("Set-Cookie")).as("the session is the first client's")
                .hasValueSatisfying(cookie -> assertThat(cookie).startsWith("JSESSIONID="));
        assertThat(storedHeaders(key)).containsIgnoringCase("Location:").doesNotContainIgnoringCase("jsessionid");
        assertThat(replay.headers().firstValue("Idempotent-Replayed")).hasValue("true");
        assertThat(replay.headers().firstValue("Location")).isEqualTo(first.headers().firstValue("Location"))
                .hasValueSatisfying(location -> assertThat(location).contains("/orders/")
                        .doesNotContainIgnoringCase("jsessionid"));
        assertThat(replay.headers().firstValue("Set-Cookie")).as("never the first client's session")
                .isNotEqualTo(first.headers().firstValue("Set-Cookie"));
        assertThat(rows("session-" + key)).isEqualTo(1);
    }
}
