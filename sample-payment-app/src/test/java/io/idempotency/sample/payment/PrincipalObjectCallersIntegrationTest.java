package io.idempotency.sample.payment;

import io.idempotency.core.Idempotent;
import io.idempotency.testkit.TestPostgres;
import jakarta.servlet.Filter;
import jakarta.servlet.http.HttpServletRequest;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.ExtendWith;
import org.springframework.boot.test.context.SpringBootTest;
import org.springframework.boot.test.context.TestConfiguration;
import org.springframework.boot.test.system.CapturedOutput;
import org.springframework.boot.test.system.OutputCaptureExtension;
import org.springframework.boot.test.web.server.LocalServerPort;
import org.springframework.context.annotation.Bean;
import org.springframework.context.annotation.Import;
import org.springframework.core.annotation.Order;
import org.springframework.http.ResponseEntity;
import org.springframework.jdbc.core.simple.JdbcClient;
import org.springframework.security.authentication.UsernamePasswordAuthenticationToken;
import org.springframework.security.config.annotation.web.builders.HttpSecurity;
import org.springframework.security.core.context.SecurityContext;
import org.springframework.security.core.context.SecurityContextHolder;
import org.springframework.security.web.SecurityFilterChain;
import org.springframework.security.web.access.intercept.AuthorizationFilter;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;
import org.springframework.web.bind.annotation.PathVariable;
import org.springframework.web.bind.annotation.PostMapping;
import org.springframework.web.bind.annotation.RestController;

import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.security.Principal;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.UUID;

import static io.idempotency.sample.payment.PaymentApi.REPLAYED_HEADER;
import static org.assertj.core.api.Assertions.assertThat;

/**
 * Callers authenticated by an application's own filter with a principal object of its own (an API client it loads for
 * the request) that is none of the kinds Spring Security takes a name from ({@code UserDetails},
 * {@code AuthenticatedPrincipal}, {@code Principal}): the authentication is then named by the object's
 * {@code toString()}. Without one of its own, that is {@code Object}'s — the class and the hash code — which names the
 * same client anew for every request it loads (its retries would all run), or two clients alike when their hash codes
 * agree (each would be replayed the other's answers). Such a name cannot scope a key; a {@code toString} that names
 * the client can.
 */
@SpringBootTest(webEnvironment = SpringBootTest.WebEnvironment.RANDOM_PORT)
@ExtendWith(OutputCaptureExtension.class)
@Import(PrincipalObjectCallersIntegrationTest.ApiClients.class)
class PrincipalObjectCallersIntegrationTest {

    private static final TestPostgres.Database DB = TestPostgres.newDatabase();

    @DynamicPropertySource
    static void database(DynamicPropertyRegistry registry) {
        DB.springProperties().forEach((name, value) -> registry.add(name, () -> value));
    }

    @LocalServerPort
    int port;

    @Test
    void aClientNamedByItsObjectsIdentityIsRefusedRatherThanRunAgainOnItsRetry(CapturedOutput output)
            throws Exception {
        String key = UUID.randomUUID().toString();

        HttpResponse<String> first = post("identity:client-1", key);
        HttpResponse<String> retry = post("identity:client-1", key);

        for (HttpResponse<String> response : List.of(first, retry)) {
            assertThat(response.statusCode()).isEqualTo(500);
            assertThat(response.headers().firstValue(REPLAYED_HEADER)).isEmpty();
        }
        assertThat(runs(key)).as("the retry must not run again").isZero();
        assertThat(records(key)).isZero();
        assertThat(output.getAll()).contains(ApiClient.class.getName()).contains("CallerResolver");
    }

    @Test
    void twoClientsNamedByOneHashCodeAreRefusedRatherThanReplayedEachOthersAnswers() throws Exception {
        String key = UUID.randomUUID().toString();
        assertThat("Aa".hashCode()).isEqualTo("BB".hashCode());

        HttpResponse<String> aa = post("hash:Aa", key);
        HttpResponse<String> bb = post("hash:BB", key);

        for (HttpResponse<String> response : List.of(aa, bb)) {
            assertThat(response.statusCode()).isEqualTo(500);
            assertThat(response.headers().firstValue(REPLAYED_HEADER)).as("not the other client's answer").isEmpty();
        }
        assertThat(runs(key)).isZero();
        assertThat(records(key)).isZero();
    }

    @Test
    void aClientWhoseObjectNamesItIsOneCallerAcrossRequestsAndAnotherIsAnother() throws Exception {
        String key = UUID.randomUUID().toString();

        HttpResponse<String> first = post("named:client-1", key);
        HttpResponse<String> retry = post("named:client-1", key);
        HttpResponse<String> other = post("named:client-2", key);

        assertThat(first.statusCode()).isEqualTo(201);
        assertThat(first.body()).contains("\"caller\":\"NamedApiClient[id=client-1]\"");
        assertThat(retry.headers().firstValue(REPLAYED_HEADER)).hasValue("true");
        assertThat(retry.body()).isEqualTo(first.body());
        assertThat(other.statusCode()).isEqualTo(201);
        assertThat(other.headers().firstValue(REPLAYED_HEADER)).isEmpty();
        assertThat(runs(key)).isEqualTo(2);
        assertThat(records(key)).isEqualTo(2);
    }

    private HttpResponse<String> post(String client, String key) throws Exception {
        return HttpClient.newBuilder().version(HttpClient.Version.HTTP_1_1).build().send(
                HttpRequest.newBuilder(URI.create("http://127.0.0.1:" + port + "/api-clients/notes/" + key))
                        .timeout(Duration.ofSeconds(30))
                        .header(PaymentApi.KEY_HEADER, key)
                        .header(ApiClients.HEADER, client)
                        .POST(HttpRequest.BodyPublishers.noBody()).build(),
                HttpResponse.BodyHandlers.ofString());
    }

    private long runs(String key) {
        return DB.queryLong("select count(*) from api_client_notes where note = '" + key + "'");
    }

    private long records(String key) {
        return DB.queryLong("select count(*) from idempotency_keys where idempotency_key = '" + key + "'");
    }

    /** An API client as the application loads it for each request: no {@code toString}, equality by identity. */
    static final class ApiClient {
        private final String id;

        ApiClient(String id) {
            this.id = id;
        }
    }

    /** An API client equal to another of its id (as an entity or value class often is), still without a toString. */
    static final class HashedApiClient {
        private final String id;

        HashedApiClient(String id) {
            this.id = id;
        }

        @Override
        public boolean equals(Object other) {
            return other instanceof HashedApiClient client && client.id.equals(id);
        }

        @Override
        public int hashCode() {
            return Objects.hashCode(id);
        }
    }

    /** An API client whose {@code toString} names it. */
    record NamedApiClient(String id) {
    }

    /**
     * Requests to {@code /api-clients/**} are authenticated by the client their {@code X-Api-Client} header names
     * ({@code identity:}, {@code hash:} or {@code named:} and its id), as the principal of an authentication made by
     * the application's own filter.
     */
    @TestConfiguration(proxyBeanMethods = false)
    static class ApiClients {

        static final String HEADER = "X-Api-Client";

        @Bean
        ApiClientNotes apiClientNotes(JdbcClient jdbc) {
            return new ApiClientNotes(jdbc);
        }

        @Bean
        @Order(0)
        SecurityFilterChain apiClientChain(HttpSecurity http) throws Exception {
            Filter apiClients = (request, response, chain) -> {
                String client = ((HttpServletRequest) request).getHeader(HEADER);
                if (client != null) {
                    String id = client.substring(client.indexOf(':') + 1);
                    Object principal = client.startsWith("identity:") ? new ApiClient(id)
                            : client.startsWith("hash:") ? new HashedApiClient(id) : new NamedApiClient(id);
                    SecurityContext context = SecurityContextHolder.createEmptyContext();
                    context.setAuthentication(UsernamePasswordAuthenticationToken.authenticated(principal, null,
                            List.of()));
                    SecurityContextHolder.setContext(context);
                }
                chain.doFilter(request, response);
            };
            return http.securityMatcher("/api-clients/**")
                    .csrf(csrf -> csrf.disable())
                    .addFilterBefore(apiClients, AuthorizationFilter.class)
                    .authorizeHttpRequests(requests -> requests.anyRequest().authenticated())
                    .build();
        }
    }

    @RestController
    static class ApiClientNotes {

        private final JdbcClient jdbc;

        ApiClientNotes(JdbcClient jdbc) {
            this.jdbc = jdbc;
            jdbc.sql("create table if not exists api_client_notes (note text not null, caller text not null)")
                    .update();
        }

        @PostMapping("/api-clients/notes/{note}")
        @Idempotent
        ResponseEntity<Map<String, String>> note(@PathVariable String note, Principal principal) {
            jdbc.sql("insert into api_client_notes (note, caller) values (?, ?)").param(note)
                    .param(principal.getName()).update();
            return ResponseEntity.status(201).body(Map.of("note", note, "caller", principal.getName(),
                    "run", UUID.randomUUID().toString()));
        }
    }
}
