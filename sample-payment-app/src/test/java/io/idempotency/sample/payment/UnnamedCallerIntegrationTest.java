package io.idempotency.sample.payment;

import io.idempotency.spring.CallerResolver;
import io.idempotency.testkit.TestPostgres;
import org.junit.jupiter.api.Test;
import org.springframework.boot.test.context.SpringBootTest;
import org.springframework.boot.test.context.TestConfiguration;
import org.springframework.boot.test.web.server.LocalServerPort;
import org.springframework.context.annotation.Bean;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;

import java.net.http.HttpResponse;
import java.util.Map;
import java.util.UUID;

import static io.idempotency.sample.payment.PaymentApi.REPLAYED_HEADER;
import static org.assertj.core.api.Assertions.assertThat;

/**
 * A {@link CallerResolver} that cannot name a caller and returns null, against its contract (a tenant lookup that
 * finds nothing, say): the request must be refused, never scoped as anonymous, where every anonymous client's stored
 * answers would be replayed to it.
 */
@SpringBootTest(webEnvironment = SpringBootTest.WebEnvironment.RANDOM_PORT)
class UnnamedCallerIntegrationTest {

    private static final TestPostgres.Database DB = TestPostgres.newDatabase();

    @DynamicPropertySource
    static void database(DynamicPropertyRegistry registry) {
        DB.springProperties().forEach((name, value) -> registry.add(name, () -> value));
    }

    @LocalServerPort
    int port;

    @Test
    void aCallerTheResolverCannotNameIsRefusedRatherThanAnsweredAsAnonymous() throws Exception {
        PaymentApi api = PaymentApi.onPort(port);
        String key = UUID.randomUUID().toString();
        String body = PaymentApi.body(PaymentApi.newOrderId(), "3.00");

        HttpResponse<byte[]> anonymous = api.createPaymentAs(null, null, key, body, null);
        HttpResponse<byte[]> bob = api.createPaymentAs("bob", "bob-pass", key, body, null);

        assertThat(anonymous.statusCode()).isEqualTo(201);
        assertThat(bob.headers().firstValue(REPLAYED_HEADER)).as("the anonymous client's answer").isEmpty();
        assertThat(bob.statusCode()).isEqualTo(500);
        assertThat(DB.queryLong("select count(*) from idempotency_keys where idempotency_key = '" + key + "'"))
                .isEqualTo(1);
    }

    @TestConfiguration(proxyBeanMethods = false)
    static class Tenants {

        private static final Map<String, String> TENANT_OF_USER = Map.of("alice", "tenant-a");

        /** Anonymous callers are "", alice is tenant-a; bob belongs to no tenant it knows of. */
        @Bean
        CallerResolver tenantCaller() {
            return request -> request.getUserPrincipal() == null ? ""
                    : TENANT_OF_USER.get(request.getUserPrincipal().getName());
        }
    }
}
