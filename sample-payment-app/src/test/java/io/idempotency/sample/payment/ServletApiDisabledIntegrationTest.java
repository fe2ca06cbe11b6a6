package io.idempotency.sample.payment;

import io.idempotency.core.Idempotent;
import io.idempotency.core.IdempotencyContext;
import io.idempotency.spring.CallerResolver;
import io.idempotency.testkit.TestPostgres;
import org.junit.jupiter.api.Test;
import org.springframework.boot.test.context.SpringBootTest;
import org.springframework.boot.test.context.TestConfiguration;
import org.springframework.boot.test.web.server.LocalServerPort;
import org.springframework.context.annotation.Bean;
import org.springframework.core.annotation.Order;
import org.springframework.security.config.Customizer;
import org.springframework.security.config.annotation.web.builders.HttpSecurity;
import org.springframework.security.core.Authentication;
import org.springframework.security.core.context.SecurityContextHolder;
import org.springframework.security.web.SecurityFilterChain;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;
import org.springframework.web.bind.annotation.PathVariable;
import org.springframework.web.bind.annotation.PostMapping;
import org.springframework.web.bind.annotation.RestController;

import java.net.http.HttpResponse;
import java.util.Map;
import java.util.UUID;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * The README's warning under "With Spring Security": the starter names callers by
 * {@code HttpServletRequest.getUserPrincipal()}, which Spring Security fills in through its servlet API integration.
 * A chain that disables it ({@code http.servletApi(…)}) leaves every request anonymous to the library: two users
 * sending one key share one namespace, and the second is replayed the first one's answer. A {@code CallerResolver}
 * that reads the {@code SecurityContextHolder} keeps them apart again.
 */
@SpringBootTest(webEnvironment = SpringBootTest.WebEnvironment.RANDOM_PORT)
class ServletApiDisabledIntegrationTest {

    private static final TestPostgres.Database DB = TestPostgres.newDatabase();

    @DynamicPropertySource
    static void database(DynamicPropertyRegistry registry) {
        DB.springProperties().forEach((name, value) -> registry.add(name, () -> value));
    }

    @LocalServerPort
    int port;

    @Test
    void withoutTheServletApiIntegrationTwoUsersShareOneNamespace() throws Exception {
        String key = UUID.randomUUID().toString();

        HttpResponse<byte[]> alice = post("/no-servlet-api/principal/notes", key, "alice:alice-pass");
        HttpResponse<byte[]> bob = post("/no-servlet-api/principal/notes", key, "bob:bob-pass");

        assertThat(alice.statusCode()).isEqualTo(200);
        assertThat(PaymentApi.text(alice)).contains("\"user\":\"alice\"", "\"caller\":\"\"");
        assertThat(bob.headers().firstValue("Idempotent-Replayed")).as("bob is replayed alice's answer")
                .hasValue("true");
        assertThat(PaymentApi.text(bob)).isEqualTo(PaymentApi.text(alice));
        assertThat(records(key)).as("one record, of the anonymous caller").isEqualTo(1);
    }

    @Test
    void aResolverReadingTheSecurityContextKeepsThemApart() throws Exception {
        String key = UUID.randomUUID().toString();

        HttpResponse<byte[]> alice = post("/no-servlet-api/security-context/notes", key, "alice:alice-pass");
        HttpResponse<byte[]> bob = post("/no-servlet-api/security-context/notes", key, "bob:bob-pass");

        assertThat(PaymentApi.text(alice)).contains("\"user\":\"alice\"", "\"caller\":\"alice\"");
        assertThat(bob.headers().firstValue("Idempotent-Replayed")).isEmpty();
        assertThat(PaymentApi.text(bob)).contains("\"user\":\"bob\"", "\"caller\":\"bob\"");
        assertThat(records(key)).isEqualTo(2);
    }

    private HttpResponse<byte[]> post(String path, String key, String credentials) throws Exception {
        return PaymentApi.onPort(port).postEmpty(path + "/" + key, key, credentials);
    }

    private long records(String key) {
        return DB.queryLong("select count(*) from idempotency_keys where idempotency_key = '" + key + "'");
    }

    @TestConfiguration(proxyBeanMethods = false)
    static class WithoutServletApi {

        @Bean
        NotesController notesController() {
            return new NotesController();
        }

        @Bean
        @Order(0)
        SecurityFilterChain withoutServletApi(HttpSecurity http) throws Exception {
            return http.securityMatcher("/no-servlet-api/**")
                    .csrf(csrf -> csrf.disable())
                    .authorizeHttpRequests(requests -> requests.anyRequest().authenticated())
                    .httpBasic(Customizer.withDefaults())
                    .servletApi(servletApi -> servletApi.disable())
                    .build();
        }

        /** The README's remedy, on the paths that ask for it; the starter's own resolver everywhere else. */
        @Bean
        CallerResolver callers() {
            return request -> {
                Authentication authentication = SecurityContextHolder.getContext().getAuthentication();
                if (request.getRequestURI().startsWith("/no-servlet-api/security-context/")
                        && authentication != null) {
                    return authentication.getName();
                }
                return CallerResolver.PRINCIPAL.resolve(request);
            };
        }
    }

    @RestController
    static class NotesController {

        @PostMapping({"/no-servlet-api/principal/notes/{note}", "/no-servlet-api/security-context/notes/{note}"})
        @Idempotent
        public Map<String, String> note(@PathVariable String note) {
            return Map.of("note", note, "caller", IdempotencyContext.require().key().caller(),
                    "user", SecurityContextHolder.getContext().getAuthentication().getName());
        }
    }
}
