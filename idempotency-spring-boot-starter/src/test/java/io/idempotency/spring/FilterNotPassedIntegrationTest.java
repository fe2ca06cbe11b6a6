package io.idempotency.spring;

import org.junit.jupiter.api.Test;
import org.springframework.boot.web.servlet.FilterRegistrationBean;
import org.springframework.context.annotation.Bean;
import org.springframework.context.annotation.Configuration;
import org.springframework.context.annotation.Import;

import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.util.HashSet;
import java.util.UUID;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * An {@code @Idempotent} handler reached by a request that never passed the {@link IdempotencyFilter} (here its
 * registration is disabled) cannot be made idempotent: it is refused with a 500 in the application's error format
 * before anything is claimed or written, never run without idempotency.
 */
@Import(FilterNotPassedIntegrationTest.DisabledRegistration.class)
class FilterNotPassedIntegrationTest extends OrdersApplicationTest {

    @Configuration(proxyBeanMethods = false)
    static class DisabledRegistration {
        @Bean
        FilterRegistrationBean<IdempotencyFilter> idempotencyFilterRegistration(
                ProblemResponses problems, IdempotencyProperties properties, IdempotentMethods methods) {
            FilterRegistrationBean<IdempotencyFilter> registration = new FilterRegistrationBean<>(new IdempotencyFilter(
                    problems, 1 << 20, 1 << 20, new HashSet<>(properties.getReplayedHeaders()), methods));
            registration.setOrder(IdempotencyFilter.ORDER);
            registration.setEnabled(false);
            return registration;
        }
    }

    @Test
    void anIdempotentHandlerReachedWithoutTheFilterIsRefusedAndWritesNothing() throws Exception {
        String key = UUID.randomUUID().toString();
        String note = "unfiltered-" + key;

        HttpResponse<byte[]> answer = post("/orders", key, "{\"note\":\"" + note + "\"}");

        String body = new String(answer.body(), StandardCharsets.UTF_8);
        assertThat(answer.statusCode()).as(body).isEqualTo(500);
        assertThat(answer.headers().firstValue("Content-Type")).as("Spring Boot's error answer, not the library's")
                .hasValueSatisfying(type -> assertThat(type).startsWith("application/json"));
        assertThat(body).contains("\"status\":500").contains("\"path\":\"/orders\"")
                .doesNotContain(ProblemResponses.DEFAULT_TYPE_BASE);
        assertThat(rows(note)).as("the handler did not run").isZero();
        assertThat(keyRows(key)).as("nothing was claimed").isZero();
    }
}
