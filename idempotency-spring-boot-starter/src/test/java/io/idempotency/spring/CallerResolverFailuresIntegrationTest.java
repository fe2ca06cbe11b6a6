package io.idempotency.spring;

import org.junit.jupiter.api.Test;
import org.springframework.boot.test.context.TestConfiguration;
import org.springframework.context.annotation.Bean;
import org.springframework.context.annotation.Import;

import java.io.IOException;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.util.List;
import java.util.UUID;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * A caller resolver that names no caller, or fails, is never taken for the anonymous caller: the request is refused
 * before anything is claimed, and is never answered with what an anonymous request stored under the same key. Callers
 * whose names differ only in case are two callers.
 */
@Import(CallerResolverFailuresIntegrationTest.Tenants.class)
class CallerResolverFailuresIntegrationTest extends OrdersApplicationTest {

    /** The caller is the tenant its {@code X-Tenant} header names; "none" names none, "down" fails. */
    @TestConfiguration
    static class Tenants {
        @Bean
        CallerResolver tenantCallerResolver() {
            return request -> {
                String tenant = request.getHeader("X-Tenant");
                if (tenant == null) {
                    return "";
                }
                return switch (tenant) {
                    case "none" -> null;
                    case "down" -> throw new IllegalStateException("the tenant directory is down");
                    default -> "tenant-" + tenant;
                };
            };
        }
    }

    @Test
    void aCallerTheResolverDoesNotNameIsRefusedRatherThanReplayedTheAnonymousAnswer() throws Exception {
        for (String tenant : new String[] {"none", "down"}) {
            String key = UUID.randomUUID().toString();
            String note = "unresolved-" + tenant + "-" + key;
            String body = "{\"note\":\"" + note + "\",\"amount\":\"3.00\"}";

            HttpResponse<byte[]> anonymous = post("/orders", key, body);
            HttpResponse<byte[]> unresolved = postAs(tenant, key, body);
            HttpResponse<byte[]> unresolvedAgain = postAs(tenant, key, body);

            assertThat(anonymous.statusCode()).as(tenant).isEqualTo(201);
            for (HttpResponse<byte[]> refused : List.of(unresolved, unresolvedAgain)) {
                assertThat(refused.statusCode()).as(tenant).isEqualTo(500);
                assertThat(refused.headers().firstValue("Idempotent-Replayed")).as(tenant).isEmpty();
                assertThat(new String(refused.body(), StandardCharsets.UTF_8)).as(tenant)
                        .doesNotContain(new String(anonymous.body(), StandardCharsets.UTF_8));
            }
            assertThat(rows(note)).as(tenant + ": the anonymous request's row only").isEqualTo(1);
            assertThat(keyRows(key)).as(tenant + ": the anonymous request's record only").isEqualTo(1);
        }
    }

    @Test
    void aRefusedRequestKeepsNothingAndItsKeyStaysFreeForTheCallerOnceNamed() throws Exception {
        String key = UUID.randomUUID().toString();
        String note = "unresolved-first-" + key;
        String body = "{\"note\":\"" + note + "\",\"amount\":\"4.00\"}";

        HttpResponse<byte[]> down = postAs("down", key, body);

        assertThat(down.statusCode()).isEqualTo(500);
        assertThat(rows(note)).isZero();
        assertThat(keyRows(key)).isZero();

        HttpResponse<byte[]> named = postAs("acme", key, body);

        assertThat(named.statusCode()).isEqualTo(201);
        assertThat(named.headers().firstValue("Idempotent-Replayed")).isEmpty();
        assertThat(rows(note)).isEqualTo(1);
    }

    @Test
    void namesThatDifferInCaseAreTwoCallers() throws Exception {
        // PostgreSQL compares the caller column byte for byte: a resolver that should fold case must do so itself
        String key = UUID.randomUUID().toString();
        String note = "case-" + key;
        String body = "{\"note\":\"" + note + "\",\"amount\":\"5.00\"}";

        HttpResponse<byte[]> upper = postAs("Acme", key, body);
        HttpResponse<byte[]> lower = postAs("acme", key, body);

        assertThat(upper.statusCode()).isEqualTo(201);
        assertThat(lower.statusCode()).isEqualTo(201);
        assertThat(lower.headers().firstValue("Idempotent-Replayed")).as("not the other caller's answer").isEmpty();
        assertThat(lower.headers().firstValue("Location")).isNotEqualTo(upper.headers().firstValue("Location"));
        assertThat(rows(note)).isEqualTo(2);
    }

    private HttpResponse<byte[]> postAs(String tenant, String key, String body)
            throws IOException, InterruptedException {
        return send(request("/orders", body).header("Idempotency-Key", key).header("X-Tenant", tenant).build());
    }
}
