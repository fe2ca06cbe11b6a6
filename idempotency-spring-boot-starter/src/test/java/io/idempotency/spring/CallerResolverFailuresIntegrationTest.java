package io.idempotency.spring;

import org.junit.jupiter.api.Test;
import org.springframework.boot.test.context.TestConfiguration;
import org.springframework.context.annotation.Bean;
import org.springframework.context.annotation.Import;

import java.io.IOException;
import java.net.http.HttpResponse;
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
            assertRefusedRatherThanReplayedTheAnonymousAnswer(tenant, (key, body) -> postAs(tenant, key, body));
        }
    }

    @Test
    void aRefusedRequestKeepsNothingAndItsKeyStaysFreeForTheCallerOnceNamed() throws Exception {
        assertARefusedCallerKeepsNothingAndLeavesTheKeyFree((key, body) -> postAs("down", key, body),
                (key, body) -> postAs("acme", key, body));
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
