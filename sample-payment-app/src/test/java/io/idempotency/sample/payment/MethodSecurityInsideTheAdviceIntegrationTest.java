package io.idempotency.sample.payment;

import io.idempotency.core.DefiniteFailureException;
import io.idempotency.core.IdempotencyMode;
import io.idempotency.core.Idempotent;
import io.idempotency.spring.IdempotentAdvisor;
import io.idempotency.testkit.TestPostgres;
import jakarta.annotation.security.RolesAllowed;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;
import org.springframework.beans.factory.annotation.Autowired;
import org.springframework.boot.test.context.SpringBootTest;
import org.springframework.boot.test.context.TestConfiguration;
import org.springframework.boot.test.web.server.LocalServerPort;
import org.springframework.context.annotation.Bean;
import org.springframework.http.HttpStatus;
import org.springframework.http.ResponseEntity;
import org.springframework.jdbc.core.simple.JdbcClient;
import org.springframework.security.access.AccessDeniedException;
import org.springframework.security.access.annotation.Secured;
import org.springframework.security.access.prepost.PostAuthorize;
import org.springframework.security.access.prepost.PreAuthorize;
import org.springframework.security.config.annotation.method.configuration.EnableMethodSecurity;
import org.springframework.security.core.userdetails.User;
import org.springframework.security.provisioning.InMemoryUserDetailsManager;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;
import org.springframework.web.bind.annotation.ExceptionHandler;
import org.springframework.web.bind.annotation.PathVariable;
import org.springframework.web.bind.annotation.PostMapping;
import org.springframework.web.bind.annotation.RestController;

import java.net.http.HttpResponse;
import java.util.HashMap;
import java.util.Map;
import java.util.UUID;
import java.util.concurrent.atomic.AtomicBoolean;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * Spring Security's method security ordered inside the {@code @Idempotent} advice ({@code @EnableMethodSecurity}'s
 * {@code offset}, e.g. to authorize inside the handler's transaction): a {@code @PreAuthorize} refusal then comes after
 * the claim, but before the handler's body. In intent-first mode the claim is committed by then; nothing ran under it,
 * so it is released, and the caller's retry — once granted the role — runs at once instead of getting 409 for the
 * whole lease. A refusal by a secured bean that the handler's body called is not one: the body may have reached the
 * gateway first. {@code @Secured} and {@code @RolesAllowed} refuse through the same kind of interceptor, and are
 * recognized alike.
 */
@SpringBootTest(webEnvironment = SpringBootTest.WebEnvironment.RANDOM_PORT,
        properties = "idempotency.lease=5m")
class MethodSecurityInsideTheAdviceIntegrationTest {

    private static final TestPostgres.Database DB = TestPostgres.newDatabase();

    @DynamicPropertySource
    static void database(DynamicPropertyRegistry registry) {
        DB.springProperties().forEach((name, value) -> registry.add(name, () -> value));
    }

    @LocalServerPort
    int port;

    @Autowired
    InMemoryUserDetailsManager users;

    @ParameterizedTest(name = "{0}")
    @ValueSource(strings = {"charge", "secured-charge", "roles-allowed-charge"})
    void anIntentFirstRefusalBeforeTheBodyReleasesTheClaimSoTheRetryOfAGrantedCallerRuns(String endpoint)
            throws Exception {
        String key = UUID.randomUUID().toString();
        String name = newUser("PAYER");

        HttpResponse<byte[]> refused = post("/inner-guard/" + endpoint + "/" + key, key, name);
        changeRole(name, "ADMIN");
        HttpResponse<byte[]> granted = post("/inner-guard/" + endpoint + "/" + key, key, name);

        assertThat(refused.statusCode()).isEqualTo(403);
        assertThat(granted.statusCode()).as(PaymentApi.text(granted)).isEqualTo(200);
        assertThat(granted.headers().firstValue("Idempotent-Replayed")).isEmpty();
        assertThat(notes(key)).isEqualTo(1);
        assertThat(status(key)).isEqualTo("SUCCEEDED");
    }

    /**
     * Ordered inside the advice, {@code @PreAuthorize} guards only what the advice proceeds to: a replay does not
     * proceed, so it is not checked again, unlike with method security in its default place.
     */
    @ParameterizedTest(name = "{0}")
    @ValueSource(strings = {"charge", "note"})
    void aReplayIsNotCheckedAgainByMethodSecurityInsideTheAdvice(String endpoint) throws Exception {
        String key = UUID.randomUUID().toString();
        String name = newUser("ADMIN");

        HttpResponse<byte[]> first = post("/inner-guard/" + endpoint + "/" + key, key, name);
        changeRole(name, "PAYER");
        HttpResponse<byte[]> revoked = post("/inner-guard/" + endpoint + "/" + key, key, name);
        HttpResponse<byte[]> otherRequest = post("/inner-guard/" + endpoint + "/" + key + "-other", key, name);

        assertThat(first.statusCode()).isEqualTo(200);
        assertThat(revoked.statusCode()).isEqualTo(200);
        assertThat(revoked.headers().firstValue("Idempotent-Replayed")).hasValue("true");
        assertThat(PaymentApi.text(revoked)).isEqualTo(PaymentApi.text(first));
        assertThat(otherRequest.statusCode()).isEqualTo(422);
        assertThat(notes(key)).isEqualTo(1);
    }

    @Test
    void anIntentFirstRefusalBeforeTheBodyLeavesNoRecord() throws Exception {
        String key = UUID.randomUUID().toString();

        HttpResponse<byte[]> refused = post("/inner-guard/charge/" + key, key, newUser("PAYER"));

        assertThat(refused.statusCode()).isEqualTo(403);
        assertThat(notes(key)).isZero();
        assertThat(records(key)).isZero();
    }

    @Test
    void aRefusalBeforeTheBodyOfARequestRunAgainAfterADefiniteFailureLeavesItsClaimFailed() throws Exception {
        String key = UUID.randomUUID().toString();
        String name = newUser("ADMIN");

        InnerGuardController.DECLINE_NEXT.set(true);
        HttpResponse<byte[]> declined = post("/inner-guard/charge/" + key, key, name);
        changeRole(name, "PAYER");
        HttpResponse<byte[]> refused = post("/inner-guard/charge/" + key, key, name);
        String afterRefusal = status(key);
        changeRole(name, "ADMIN");
        HttpResponse<byte[]> granted = post("/inner-guard/charge/" + key, key, name);

        assertThat(declined.statusCode()).isEqualTo(402);
        assertThat(refused.statusCode()).isEqualTo(403);
        // the declined attempt may have told the gateway about the key: the claim stays with its request
        assertThat(afterRefusal).isEqualTo("FAILED");
        assertThat(granted.statusCode()).as(PaymentApi.text(granted)).isEqualTo(200);
        assertThat(notes(key)).isEqualTo(1);
        assertThat(status(key)).isEqualTo("SUCCEEDED");
    }

    @Test
    void aRefusalOfACallTheBodyMadeIsAnUnknownOutcome() throws Exception {
        aRefusalAfterTheBodyRanHoldsTheClaim("charge-then-audit");
    }

    @Test
    void aRefusalOfTheReturnedAnswerIsAnUnknownOutcome() throws Exception {
        aRefusalAfterTheBodyRanHoldsTheClaim("charge-owned-by-bob");
    }

    @Test
    void aOneTransactionRefusalBeforeTheBodyKeepsNothingAndTheRetryIsJudgedAfresh() throws Exception {
        String key = UUID.randomUUID().toString();
        String name = newUser("PAYER");

        HttpResponse<byte[]> refused = post("/inner-guard/note/" + key, key, name);
        long recordsAfterRefusal = records(key);
        changeRole(name, "ADMIN");
        HttpResponse<byte[]> granted = post("/inner-guard/note/" + key, key, name);

        assertThat(refused.statusCode()).isEqualTo(403);
        assertThat(recordsAfterRefusal).isZero();
        assertThat(granted.statusCode()).isEqualTo(200);
        assertThat(granted.headers().firstValue("Idempotent-Replayed")).isEmpty();
        assertThat(notes(key)).isEqualTo(1);
    }

    /**
     * A refusal that comes after the body ran, which may have reached the gateway, is an unknown outcome: the claim is
     * held for the lease, and the retry gets 409 instead of running the body again.
     */
    private void aRefusalAfterTheBodyRanHoldsTheClaim(String endpoint) throws Exception {
        String key = UUID.randomUUID().toString();
        String name = newUser("PAYER");

        HttpResponse<byte[]> refused = post("/inner-guard/" + endpoint + "/" + key, key, name);
        HttpResponse<byte[]> retry = post("/inner-guard/" + endpoint + "/" + key, key, name);

        assertThat(refused.statusCode()).isEqualTo(403);
        assertThat(retry.statusCode()).isEqualTo(409);
        assertThat(status(key)).isEqualTo("PROCESSING");
    }

    private String newUser(String role) {
        String name = "user-" + UUID.randomUUID();
        users.createUser(User.withUsername(name).password("{noop}pass").roles(role).build());
        return name;
    }

    private void changeRole(String name, String role) {
        users.updateUser(User.withUsername(name).password("{noop}pass").roles(role).build());
    }

    private HttpResponse<byte[]> post(String path, String key, String name) throws Exception {
        return PaymentApi.onPort(port).postEmpty(path, key, name + ":pass");
    }

    private long notes(String note) {
        return DB.queryLong("select count(*) from inner_guard_notes where note = '" + note + "'");
    }

    private long records(String key) {
        return DB.queryLong("select count(*) from idempotency_keys where idempotency_key = '" + key + "'");
    }

    private String status(String key) {
        return DB.queryString("select status from idempotency_keys where idempotency_key = '" + key + "'");
    }

    /** Method security's interceptors inside the {@code @Idempotent} advice, still outside {@code @Transactional}. */
    @TestConfiguration(proxyBeanMethods = false)
    @EnableMethodSecurity(offset = IdempotentAdvisor.ORDER, securedEnabled = true, jsr250Enabled = true)
    static class InnerGuard {

        @Bean
        InnerGuardController innerGuardController(JdbcClient jdbc, Auditor auditor) {
            return new InnerGuardController(jdbc, auditor);
        }

        @Bean
        Auditor auditor() {
            return new Auditor();
        }
    }

    /** A secured bean the handler's body calls after its "gateway" call. */
    static class Auditor {

        @PreAuthorize("hasRole('AUDITOR')")
        public void audit(String note) {
        }
    }

    @RestController
    static class InnerGuardController {

        /** Whether the next charge is declined (a definite failure). */
        static final AtomicBoolean DECLINE_NEXT = new AtomicBoolean();

        private final JdbcClient jdbc;
        private final Auditor auditor;

        InnerGuardController(JdbcClient jdbc, Auditor auditor) {
            this.jdbc = jdbc;
            this.auditor = auditor;
            jdbc.sql("create table if not exists inner_guard_notes (note text not null)").update();
        }

        @PostMapping("/inner-guard/charge/{note}")
        @Idempotent(mode = IdempotencyMode.INTENT_FIRST)
        @PreAuthorize("hasRole('ADMIN')")
        public Map<String, String> charge(@PathVariable String note) {
            if (DECLINE_NEXT.getAndSet(false)) {
                throw new DefiniteFailureException("declined by the gateway");
            }
            return write(note);
        }

        @PostMapping("/inner-guard/secured-charge/{note}")
        @Idempotent(mode = IdempotencyMode.INTENT_FIRST)
        @Secured("ROLE_ADMIN")
        public Map<String, String> securedCharge(@PathVariable String note) {
            return write(note);
        }

        @PostMapping("/inner-guard/roles-allowed-charge/{note}")
        @Idempotent(mode = IdempotencyMode.INTENT_FIRST)
        @RolesAllowed("ADMIN")
        public Map<String, String> rolesAllowedCharge(@PathVariable String note) {
            return write(note);
        }

        @PostMapping("/inner-guard/charge-then-audit/{note}")
        @Idempotent(mode = IdempotencyMode.INTENT_FIRST)
        public Map<String, String> chargeThenAudit(@PathVariable String note) {
            Map<String, String> charged = write(note); // stands for the gateway's charge
            auditor.audit(note);
            return charged;
        }

        @PostMapping("/inner-guard/charge-owned-by-bob/{note}")
        @Idempotent(mode = IdempotencyMode.INTENT_FIRST)
        @PostAuthorize("returnObject['owner'] == authentication.name")
        public Map<String, String> chargeOwnedByBob(@PathVariable String note) {
            Map<String, String> charged = new HashMap<>(write(note));
            charged.put("owner", "bob");
            return charged;
        }

        @PostMapping("/inner-guard/note/{note}")
        @Idempotent
        @PreAuthorize("hasRole('ADMIN')")
        public Map<String, String> note(@PathVariable String note) {
            return write(note);
        }

        @ExceptionHandler(DefiniteFailureException.class)
        ResponseEntity<Map<String, String>> declined(DefiniteFailureException e) {
            return ResponseEntity.status(HttpStatus.PAYMENT_REQUIRED).body(Map.of("error", "declined"));
        }

        @ExceptionHandler(AccessDeniedException.class)
        ResponseEntity<Map<String, String>> refused(AccessDeniedException e) {
            return ResponseEntity.status(HttpStatus.FORBIDDEN).body(Map.of("error", "refused"));
        }

        private Map<String, String> write(String note) {
            jdbc.sql("insert into inner_guard_notes (note) values (?)").param(note).update();
            return Map.of("note", note);
        }
    }
}
