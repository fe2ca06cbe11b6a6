package io.idempotency.sample.payment;

import io.idempotency.core.Idempotent;
import io.idempotency.testkit.TestPostgres;
import org.junit.jupiter.api.Test;
import org.springframework.boot.test.context.SpringBootTest;
import org.springframework.boot.test.context.TestConfiguration;
import org.springframework.boot.test.web.server.LocalServerPort;
import org.springframework.context.annotation.Bean;
import org.springframework.core.annotation.Order;
import org.springframework.jdbc.core.simple.JdbcClient;
import org.springframework.security.access.AccessDeniedException;
import org.springframework.security.access.prepost.PostAuthorize;
import org.springframework.security.config.Customizer;
import org.springframework.security.config.annotation.method.configuration.EnableMethodSecurity;
import org.springframework.security.config.annotation.web.builders.HttpSecurity;
import org.springframework.security.web.SecurityFilterChain;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;
import org.springframework.web.bind.annotation.ExceptionHandler;
import org.springframework.web.bind.annotation.PathVariable;
import org.springframework.web.bind.annotation.PostMapping;
import org.springframework.web.bind.annotation.RestController;

import java.net.http.HttpResponse;
import java.util.Map;
import java.util.UUID;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * Spring Security's filter chain ordered after the {@code IdempotencyFilter} ({@code spring.security.filter.order}
 * above its order), with an access-denied handler that writes its own answer instead of calling {@code sendError}:
 * a {@code @PostAuthorize} refusal then no longer passes through the filter as an exception. It must still roll the
 * handler back and store nothing, as it does with the chain in its default place.
 */
@SpringBootTest(webEnvironment = SpringBootTest.WebEnvironment.RANDOM_PORT,
        properties = "spring.security.filter.order=0")
class SecurityChainAfterTheFilterIntegrationTest {

    private static final TestPostgres.Database DB = TestPostgres.newDatabase();

    @DynamicPropertySource
    static void database(DynamicPropertyRegistry registry) {
        DB.springProperties().forEach((name, value) -> registry.add(name, () -> value));
    }

    @LocalServerPort
    int port;

    @Test
    void aRefusalOfTheReturnedAnswerAnsweredByTheChainRollsTheHandlerBackAndStoresNothing() throws Exception {
        String key = UUID.randomUUID().toString();

        HttpResponse<byte[]> refused = post(key, "alice:alice-pass");
        HttpResponse<byte[]> again = post(key, "alice:alice-pass");

        assertThat(refused.statusCode()).isEqualTo(403);
        assertThat(PaymentApi.text(refused)).isEqualTo("{\"error\":\"denied\"}");
        assertThat(again.statusCode()).isEqualTo(403);
        assertThat(again.headers().firstValue("Idempotent-Replayed")).isEmpty();
        assertThat(notes(key)).isZero();
        assertThat(records(key)).isZero();
    }

    @Test
    void anAcceptedAnswerIsStillStoredAndReplayed() throws Exception {
        String key = UUID.randomUUID().toString();

        HttpResponse<byte[]> first = post(key, "bob:bob-pass");
        HttpResponse<byte[]> again = post(key, "bob:bob-pass");

        assertThat(first.statusCode()).isEqualTo(200);
        assertThat(again.statusCode()).isEqualTo(200);
        assertThat(again.headers().firstValue("Idempotent-Replayed")).hasValue("true");
        assertThat(PaymentApi.text(again)).isEqualTo(PaymentApi.text(first));
        assertThat(notes(key)).isEqualTo(1);
        assertThat(records(key)).isEqualTo(1);
    }

    private HttpResponse<byte[]> post(String note, String credentials) throws Exception {
        return PaymentApi.onPort(port).postEmpty("/late-chain/owned-by-bob/" + note, note, credentials);
    }

    private long notes(String note) {
        return DB.queryLong("select count(*) from late_chain_notes where note = '" + note + "'");
    }

    private long records(String key) {
        return DB.queryLong("select count(*) from idempotency_keys where idempotency_key = '" + key + "'");
    }

    @TestConfiguration(proxyBeanMethods = false)
    @EnableMethodSecurity
    static class Guarded {

        @Bean
        LateChainController lateChainController(JdbcClient jdbc) {
            return new LateChainController(jdbc);
        }

        /** Answers a refusal itself, as JSON APIs do, rather than with the container's error page. */
        @Bean
        @Order(0)
        SecurityFilterChain lateChain(HttpSecurity http) throws Exception {
            return http.securityMatcher("/late-chain/**")
                    .csrf(csrf -> csrf.disable())
                    .authorizeHttpRequests(requests -> requests.anyRequest().authenticated())
                    .httpBasic(Customizer.withDefaults())
                    .exceptionHandling(exceptions -> exceptions.accessDeniedHandler((request, response, denied) -> {
                        response.setStatus(403);
                        response.setContentType("application/json");
                        response.getWriter().write("{\"error\":\"denied\"}");
                    }))
                    .build();
        }
    }

    @RestController
    static class LateChainController {

        private final JdbcClient jdbc;

        LateChainController(JdbcClient jdbc) {
            this.jdbc = jdbc;
            jdbc.sql("create table if not exists late_chain_notes (note text not null)").update();
        }

        @PostMapping("/late-chain/owned-by-bob/{note}")
        @Idempotent
        @PostAuthorize("returnObject == null or returnObject['owner'] == authentication.name")
        public Map<String, String> ownedByBob(@PathVariable String note) {
            jdbc.sql("insert into late_chain_notes (note) values (?)").param(note).update();
            return Map.of("note", note, "owner", "bob");
        }

        /** Leaves the refusal to the filter chain (the sample's catch-all exception handler would answer it 500). */
        @ExceptionHandler(AccessDeniedException.class)
        void refused(AccessDeniedException e) {
            throw e;
        }
    }
}
