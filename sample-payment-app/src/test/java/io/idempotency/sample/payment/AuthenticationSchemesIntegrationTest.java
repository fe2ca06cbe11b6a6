package io.idempotency.sample.payment;

import io.idempotency.core.Idempotent;
import io.idempotency.testkit.TestPostgres;
import org.junit.jupiter.api.Test;
import org.springframework.beans.factory.annotation.Autowired;
import org.springframework.boot.test.context.SpringBootTest;
import org.springframework.boot.test.context.TestConfiguration;
import org.springframework.boot.test.web.server.LocalServerPort;
import org.springframework.context.annotation.Bean;
import org.springframework.context.annotation.Import;
import org.springframework.core.annotation.Order;
import org.springframework.http.ResponseEntity;
import org.springframework.jdbc.core.simple.JdbcClient;
import org.springframework.security.config.Customizer;
import org.springframework.security.config.annotation.web.builders.HttpSecurity;
import org.springframework.security.core.userdetails.User;
import org.springframework.security.provisioning.InMemoryUserDetailsManager;
import org.springframework.security.web.SecurityFilterChain;
import org.springframework.security.web.csrf.CsrfToken;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;
import org.springframework.web.bind.annotation.GetMapping;
import org.springframework.web.bind.annotation.PathVariable;
import org.springframework.web.bind.annotation.PostMapping;
import org.springframework.web.bind.annotation.RestController;

import java.net.CookieManager;
import java.net.HttpCookie;
import java.net.URI;
import java.net.URLEncoder;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.security.Principal;
import java.time.Duration;
import java.util.Map;
import java.util.UUID;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * One user reaching an {@code @Idempotent} endpoint through several of Spring Security's authentication schemes —
 * HTTP Basic, and a session opened by form login (with CSRF protection) — is one caller: the principal's name, as the
 * user store gives it (not as typed at login). The chain's refusals (401 without credentials, 403 from a URL rule or
 * for a missing CSRF token) are never stored as the answer, and the checks made before the advice are made again for
 * every replay. The subclass runs the same with the chain ordered after the {@code IdempotencyFilter}.
 */
@SpringBootTest(webEnvironment = SpringBootTest.WebEnvironment.RANDOM_PORT)
@Import(AuthenticationSchemesIntegrationTest.Schemes.class)
class AuthenticationSchemesIntegrationTest {

    static final TestPostgres.Database DB = TestPostgres.newDatabase();

    @DynamicPropertySource
    static void database(DynamicPropertyRegistry registry) {
        DB.springProperties().forEach((name, value) -> registry.add(name, () -> value));
    }

    @LocalServerPort
    int port;

    @Autowired
    InMemoryUserDetailsManager users;

    @Test
    void oneUserIsOneCallerOverBasicAndOverALoginSessionAndTwoUsersAreTwo() throws Exception {
        String key = UUID.randomUUID().toString();
        String alice = newPayer();
        String bob = newPayer();
        Browser aliceBrowser = new Browser();
        aliceBrowser.logIn(alice);
        Browser bobBrowser = new Browser();
        bobBrowser.logIn(bob);

        HttpResponse<String> overBasic = basic(key, alice);
        HttpResponse<String> overSession = aliceBrowser.post(key, true);
        HttpResponse<String> typedInCapitals = basic(key, alice.toUpperCase(java.util.Locale.ROOT));
        HttpResponse<String> bobsOverSession = bobBrowser.post(key, true);
        HttpResponse<String> bobsOverBasic = basic(key, bob);

        assertThat(overBasic.statusCode()).isEqualTo(201);
        assertThat(overSession.statusCode()).isEqualTo(201);
        assertThat(overSession.headers().firstValue(PaymentApi.REPLAYED_HEADER)).hasValue("true");
        assertThat(overSession.body()).isEqualTo(overBasic.body());
        assertThat(typedInCapitals.headers().firstValue(PaymentApi.REPLAYED_HEADER)).hasValue("true");
        assertThat(typedInCapitals.body()).isEqualTo(overBasic.body());
        assertThat(bobsOverSession.statusCode()).isEqualTo(201);
        assertThat(bobsOverSession.headers().firstValue(PaymentApi.REPLAYED_HEADER)).isEmpty();
        assertThat(bobsOverSession.body()).contains("\"caller\":\"" + bob + "\"").doesNotContain(alice);
        assertThat(bobsOverBasic.headers().firstValue(PaymentApi.REPLAYED_HEADER)).hasValue("true");
        assertThat(bobsOverBasic.body()).isEqualTo(bobsOverSession.body());
        assertThat(runs(key)).isEqualTo(2);
        assertThat(records(key)).isEqualTo(2);
    }

    @Test
    void theChainsRefusalsAreNotStoredAndTheAuthorizedRetryRunsTheHandler() throws Exception {
        String key = UUID.randomUUID().toString();
        String payer = newPayer();
        String viewer = "viewer-" + UUID.randomUUID();
        users.createUser(User.withUsername(viewer).password("{noop}pass").roles("VIEWER").build());
        Browser browser = new Browser();
        browser.logIn(payer);

        HttpResponse<String> anonymous = new Browser().post(key, true);
        HttpResponse<String> wrongPassword = post(key, "Basic " + base64(payer + ":wrong"));
        HttpResponse<String> notAPayer = basic(key, viewer);
        HttpResponse<String> noCsrfToken = browser.post(key, false);
        long recordsAfterTheRefusals = records(key);
        HttpResponse<String> authorized = browser.post(key, true);

        assertThat(anonymous.statusCode()).isEqualTo(401);
        assertThat(wrongPassword.statusCode()).isEqualTo(401);
        assertThat(notAPayer.statusCode()).isEqualTo(403);
        assertThat(noCsrfToken.statusCode()).isEqualTo(403);
        assertThat(recordsAfterTheRefusals).isZero();
        assertThat(authorized.statusCode()).isEqualTo(201);
        assertThat(authorized.headers().firstValue(PaymentApi.REPLAYED_HEADER)).isEmpty();
        assertThat(runs(key)).isEqualTo(1);
        assertThat(records(key)).isEqualTo(1);
    }

    @Test
    void aNewSessionOfTheSameUserAfterLogoutAndLoginIsTheSameCaller() throws Exception {
        String key = UUID.randomUUID().toString();
        String payer = newPayer();
        Browser browser = new Browser();
        String anonymousSession = browser.csrfToken() != null ? browser.sessionId() : null;
        browser.logIn(payer);
        String firstSession = browser.sessionId();

        HttpResponse<String> first = browser.post(key, true);
        browser.logOut();
        HttpResponse<String> loggedOut = browser.post(key, true);
        browser.logIn(payer);
        String secondSession = browser.sessionId();
        HttpResponse<String> retry = browser.post(key, true);

        assertThat(firstSession).isNotNull().isNotEqualTo(anonymousSession);
        assertThat(secondSession).isNotNull().isNotEqualTo(firstSession);
        assertThat(first.statusCode()).isEqualTo(201);
        assertThat(loggedOut.statusCode()).isEqualTo(401);
        assertThat(retry.statusCode()).isEqualTo(201);
        assertThat(retry.headers().firstValue(PaymentApi.REPLAYED_HEADER)).hasValue("true");
        assertThat(retry.body()).isEqualTo(first.body());
        assertThat(runs(key)).isEqualTo(1);
    }

    @Test
    void aReplayIsRefusedToACallerWhoseRightTheChainChecksWasRevoked() throws Exception {
        String key = UUID.randomUUID().toString();
        String payer = newPayer();

        HttpResponse<String> first = basic(key, payer);
        users.updateUser(User.withUsername(payer).password("{noop}pass").roles("VIEWER").build());
        HttpResponse<String> revoked = basic(key, payer);
        users.updateUser(User.withUsername(payer).password("{noop}pass").roles("PAYER").build());
        HttpResponse<String> restored = basic(key, payer);

        assertThat(first.statusCode()).isEqualTo(201);
        assertThat(revoked.statusCode()).isEqualTo(403);
        assertThat(revoked.headers().firstValue(PaymentApi.REPLAYED_HEADER)).isEmpty();
        assertThat(revoked.body()).doesNotContain("\"run\"");
        assertThat(restored.statusCode()).isEqualTo(201);
        assertThat(restored.headers().firstValue(PaymentApi.REPLAYED_HEADER)).hasValue("true");
        assertThat(restored.body()).isEqualTo(first.body());
        assertThat(runs(key)).isEqualTo(1);
        assertThat(records(key)).isEqualTo(1);
    }

    private String newPayer() {
        String name = "payer-" + UUID.randomUUID();
        users.createUser(User.withUsername(name).password("{noop}pass").roles("PAYER").build());
        return name;
    }

    private HttpResponse<String> basic(String key, String user) throws Exception {
        return post(key, "Basic " + base64(user + ":pass"));
    }

    private HttpResponse<String> post(String key, String authorization) throws Exception {
        return HttpClient.newBuilder().version(HttpClient.Version.HTTP_1_1).build().send(
                note(key).header("Authorization", authorization).build(), HttpResponse.BodyHandlers.ofString());
    }

    /** The idempotent POST of the note {@code key} under the key {@code key}, without credentials. */
    private HttpRequest.Builder note(String key) {
        return HttpRequest.newBuilder(uri("/schemes/notes/" + key))
                .timeout(Duration.ofSeconds(30))
                .header(PaymentApi.KEY_HEADER, key)
                .POST(HttpRequest.BodyPublishers.noBody());
    }

    private static String base64(String text) {
        return java.util.Base64.getEncoder().encodeToString(text.getBytes(StandardCharsets.UTF_8));
    }

    private URI uri(String path) {
        return URI.create("http://127.0.0.1:" + port + path);
    }

    private long runs(String key) {
        return DB.queryLong("select count(*) from scheme_notes where note = '" + key + "'");
    }

    private long records(String key) {
        return DB.queryLong("select count(*) from idempotency_keys where idempotency_key = '" + key + "'");
    }

    /** A browser: keeps the session cookie, logs in and out through forms, sends the CSRF token when asked to. */
    private final class Browser {

        private final CookieManager cookies = new CookieManager();
        private final HttpClient http = HttpClient.newBuilder().version(HttpClient.Version.HTTP_1_1)
                .cookieHandler(cookies).followRedirects(HttpClient.Redirect.NEVER).build();

        String csrfToken() throws Exception {
            HttpResponse<String> response = http.send(HttpRequest.newBuilder(uri("/schemes/csrf")).GET().build(),
                    HttpResponse.BodyHandlers.ofString());
            assertThat(response.statusCode()).isEqualTo(200);
            return response.body();
        }

        void logIn(String user) throws Exception {
            HttpResponse<String> response = form("/login", "username=" + encode(user) + "&password=pass&_csrf="
                    + encode(csrfToken()));
            assertThat(response.statusCode()).isEqualTo(302);
            assertThat(response.headers().firstValue("Location")).hasValueSatisfying(
                    location -> assertThat(location).doesNotContain("error"));
        }

        void logOut() throws Exception {
            assertThat(form("/logout", "_csrf=" + encode(csrfToken())).statusCode()).isIn(204, 302);
        }

        String sessionId() {
            return cookies.getCookieStore().getCookies().stream().filter(cookie -> cookie.getName().equals("JSESSIONID"))
                    .map(HttpCookie::getValue).findFirst().orElse(null);
        }

        HttpResponse<String> post(String key, boolean withCsrfToken) throws Exception {
            HttpRequest.Builder request = note(key);
            if (withCsrfToken) {
                request.header("X-CSRF-TOKEN", csrfToken());
            }
            return http.send(request.build(), HttpResponse.BodyHandlers.ofString());
        }

        private HttpResponse<String> form(String path, String form) throws Exception {
            return http.send(HttpRequest.newBuilder(uri(path))
                    .header("Content-Type", "application/x-www-form-urlencoded")
                    .POST(HttpRequest.BodyPublishers.ofString(form)).build(), HttpResponse.BodyHandlers.ofString());
        }

        private static String encode(String value) {
            return URLEncoder.encode(value, StandardCharsets.UTF_8);
        }
    }

    /**
     * HTTP Basic and form login on the same paths, CSRF protection for the session's requests (not for those that
     * carry their credentials), and a URL rule that only payers pass.
     */
    @TestConfiguration(proxyBeanMethods = false)
    static class Schemes {

        @Bean
        SchemesController schemesController(JdbcClient jdbc) {
            return new SchemesController(jdbc);
        }

        @Bean
        @Order(0)
        SecurityFilterChain schemesChain(HttpSecurity http) throws Exception {
            return http.securityMatcher("/schemes/**", "/login", "/logout")
                    .csrf(csrf -> csrf.ignoringRequestMatchers(request -> request.getHeader("Authorization") != null))
                    .authorizeHttpRequests(requests -> requests
                            .requestMatchers("/schemes/csrf").permitAll()
                            .requestMatchers("/schemes/notes/**").hasRole("PAYER")
                            .anyRequest().permitAll())
                    .httpBasic(Customizer.withDefaults())
                    .formLogin(Customizer.withDefaults())
                    .build();
        }
    }

    @RestController
    static class SchemesController {

        private final JdbcClient jdbc;

        SchemesController(JdbcClient jdbc) {
            this.jdbc = jdbc;
            jdbc.sql("create table if not exists scheme_notes (note text not null, caller text not null)").update();
        }

        @GetMapping("/schemes/csrf")
        String csrf(CsrfToken token) {
            return token.getToken();
        }

        @PostMapping("/schemes/notes/{note}")
        @Idempotent
        ResponseEntity<Map<String, String>> note(@PathVariable String note, Principal principal) {
            jdbc.sql("insert into scheme_notes (note, caller) values (?, ?)").param(note).param(principal.getName())
                    .update();
            return ResponseEntity.status(201).body(Map.of("note", note, "caller", principal.getName(),
                    "run", UUID.randomUUID().toString()));
        }
    }
}
