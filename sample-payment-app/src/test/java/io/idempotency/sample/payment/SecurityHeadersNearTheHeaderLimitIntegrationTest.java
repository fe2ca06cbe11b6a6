package io.idempotency.sample.payment;

import io.idempotency.core.Idempotent;
import io.idempotency.testkit.TestPostgres;
import org.junit.jupiter.api.Test;
import jakarta.servlet.FilterChain;
import jakarta.servlet.ServletException;
import jakarta.servlet.http.HttpServletRequest;
import jakarta.servlet.http.HttpServletResponse;
import org.springframework.boot.test.context.SpringBootTest;
import org.springframework.boot.web.servlet.FilterRegistrationBean;
import org.springframework.boot.test.context.TestConfiguration;
import org.springframework.boot.test.web.server.LocalServerPort;
import org.springframework.context.annotation.Bean;
import org.springframework.core.Ordered;
import org.springframework.http.HttpStatus;
import org.springframework.http.ResponseEntity;
import org.springframework.jdbc.core.simple.JdbcClient;
import org.springframework.security.web.util.OnCommittedResponseWrapper;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;
import org.springframework.web.bind.annotation.PathVariable;
import org.springframework.web.bind.annotation.PostMapping;
import org.springframework.web.bind.annotation.RequestParam;
import org.springframework.web.bind.annotation.RestController;
import org.springframework.web.filter.OncePerRequestFilter;

import java.io.IOException;
import java.net.http.HttpResponse;
import java.util.UUID;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * Spring Security writes its default headers ({@code X-Content-Type-Options}, {@code Cache-Control},
 * {@code X-Frame-Options}, …) as the answer is sent, after the library measured the answer's headers against the
 * server's limit (Tomcat's 8 KB): on the first answer and again on every replay, an anonymous request's (as here) too;
 * over HTTPS its HSTS header as well, which a filter outside both writes here the same way, over plain HTTP. Across the
 * sizes around the limit, every answer is either refused and keeps nothing, or sent, stored and replayed — never
 * stored and then unsendable, its effects kept while every retry got the container's bare 500.
 */
@SpringBootTest(webEnvironment = SpringBootTest.WebEnvironment.RANDOM_PORT)
class SecurityHeadersNearTheHeaderLimitIntegrationTest {

    private static final TestPostgres.Database DB = TestPostgres.newDatabase();
    /** What Spring Security sends over HTTPS by default. */
    private static final String HSTS = "max-age=31536000 ; includeSubDomains";

    @DynamicPropertySource
    static void database(DynamicPropertyRegistry registry) {
        DB.springProperties().forEach((name, value) -> registry.add(name, () -> value));
    }

    @LocalServerPort
    int port;

    @Test
    void anAnswerNearTheLimitIsStoredOnlyIfItAndItsReplaysCanBeSentWithTheSecurityHeaders() throws Exception {
        PaymentApi api = PaymentApi.onPort(port);
        int stored = 0;
        int refused = 0;
        for (int length = 7_000; length <= 7_900; length += 12) {
            String key = UUID.randomUUID().toString();
            String path = "/linked/" + key + "?length=" + length;

            HttpResponse<byte[]> first = api.postJson(path, null, key, "{}", null);

            if (first.statusCode() == 500) {
                assertThat(PaymentApi.text(first)).as("length %d", length).contains("idempotency-response-too-large");
                assertThat(notes(key)).as("length %d: nothing of it was kept", length).isZero();
                assertThat(records(key)).as("length %d: the key was released", length).isZero();
                refused++;
                continue;
            }
            assertThat(first.statusCode()).as("length %d", length).isEqualTo(201);
            assertThat(first.headers().firstValue("X-Content-Type-Options")).as("Spring Security's headers")
                    .hasValue("nosniff");
            assertThat(first.headers().firstValue("Strict-Transport-Security")).hasValue(HSTS);
            HttpResponse<byte[]> replay = api.postJson(path, null, key, "{}", null);
            assertThat(replay.statusCode()).as("length %d: the replay of a stored answer", length).isEqualTo(201);
            assertThat(replay.headers().firstValue(PaymentApi.REPLAYED_HEADER)).as("length %d", length)
                    .hasValue("true");
            assertThat(replay.headers().firstValue("X-Content-Type-Options")).hasValue("nosniff");
            assertThat(replay.headers().firstValue("Strict-Transport-Security")).hasValue(HSTS);
            assertThat(notes(key)).isOne();
            stored++;
        }
        assertThat(stored).as("answers stored below the limit").isPositive();
        assertThat(refused).as("answers refused near it").isPositive();
    }

    private long notes(String note) {
        return DB.queryLong("select count(*) from linked_notes where note = '" + note + "'");
    }

    private long records(String key) {
        return DB.queryLong("select count(*) from idempotency_keys where idempotency_key = '" + key + "'");
    }

    @TestConfiguration(proxyBeanMethods = false)
    static class Linked {

        @Bean
        LinkedController linkedController(JdbcClient jdbc) {
            return new LinkedController(jdbc);
        }

        /** Writes the HSTS header as the answer is committed, as Spring Security's header writer does over HTTPS. */
        @Bean
        FilterRegistrationBean<OncePerRequestFilter> hstsAsOverHttps() {
            FilterRegistrationBean<OncePerRequestFilter> registration = new FilterRegistrationBean<>(
                    new OncePerRequestFilter() {
                        @Override
                        protected void doFilterInternal(HttpServletRequest request, HttpServletResponse response,
                                                        FilterChain chain) throws ServletException, IOException {
                            chain.doFilter(request, new OnCommittedResponseWrapper(response) {
                                @Override
                                protected void onResponseCommitted() {
                                    if (!containsHeader("Strict-Transport-Security")) {
                                        setHeader("Strict-Transport-Security", HSTS);
                                    }
                                }
                            });
                        }
                    });
            registration.setOrder(Ordered.HIGHEST_PRECEDENCE);
            return registration;
        }
    }

    @RestController
    static class LinkedController {

        private final JdbcClient jdbc;

        LinkedController(JdbcClient jdbc) {
            this.jdbc = jdbc;
            jdbc.sql("create table if not exists linked_notes (note text not null)").update();
        }

        /** Writes a row, and answers 201 with one {@code Link} header whose target is {@code length} characters long. */
        @PostMapping("/linked/{note}")
        @Idempotent
        public ResponseEntity<String> linked(@PathVariable String note, @RequestParam int length) {
            jdbc.sql("insert into linked_notes (note) values (?)").param(note).update();
            return ResponseEntity.status(HttpStatus.CREATED).header("Link", "<" + "l".repeat(length) + ">; rel=\"item\"")
                    .body("linked");
        }
    }
}
