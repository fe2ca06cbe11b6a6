package io.idempotency.sample.payment;

import io.idempotency.core.Idempotent;
import io.idempotency.testkit.TestPostgres;
import org.junit.jupiter.api.Test;
import org.springframework.beans.factory.annotation.Autowired;
import org.springframework.boot.test.context.SpringBootTest;
import org.springframework.boot.test.context.TestConfiguration;
import org.springframework.boot.test.web.server.LocalServerPort;
import org.springframework.context.annotation.Bean;
import org.springframework.jdbc.core.simple.JdbcClient;
import org.springframework.http.HttpStatus;
import org.springframework.http.ResponseEntity;
import org.springframework.security.access.AccessDeniedException;
import org.springframework.security.access.prepost.PostAuthorize;
import org.springframework.security.access.prepost.PreAuthorize;
import org.springframework.security.config.annotation.method.configuration.EnableMethodSecurity;
import org.springframework.security.core.userdetails.User;
import org.springframework.security.provisioning.InMemoryUserDetailsManager;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;
import org.springframework.transaction.annotation.Transactional;
import org.springframework.web.bind.annotation.ExceptionHandler;
import org.springframework.web.bind.annotation.PathVariable;
import org.springframework.web.bind.annotation.PostMapping;
import org.springframework.web.bind.annotation.RestController;

import java.net.http.HttpResponse;
import java.util.Map;
import java.util.UUID;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * Spring Security's method security around an {@code @Idempotent} handler. Its interceptors are ordered far outside
 * the {@code @Idempotent} advice: {@code @PreAuthorize} refuses before anything is claimed; {@code @PostAuthorize}
 * refuses after the handler returned through the advice, and its refusal must not leave the handler's writes, or a
 * record, behind the error the client gets.
 */
@SpringBootTest(webEnvironment = SpringBootTest.WebEnvironment.RANDOM_PORT)
class MethodSecurityIntegrationTest {

    /**
     * The controller answers a refusal 403 itself, a status the default storage policy keeps: nothing may be stored
     * all the same, because the answer is the exception handler's, not the handler's outcome.
     */
    private static final int REFUSED = 403;

    private static final TestPostgres.Database DB = TestPostgres.newDatabase();

    @DynamicPropertySource
    static void database(DynamicPropertyRegistry registry) {
        DB.springProperties().forEach((name, value) -> registry.add(name, () -> value));
    }

    @LocalServerPort
    int port;

    @Autowired
    InMemoryUserDetailsManager users;

    @Test
    void aReplayIsRefusedToACallerThatNoLongerPassesTheCheckBeforeTheHandler() throws Exception {
        String key = UUID.randomUUID().toString();
        String name = "admin-" + UUID.randomUUID();
        users.createUser(User.withUsername(name).password("{noop}pass").roles("ADMIN").build());

        HttpResponse<byte[]> first = post("/guarded/admins-only/" + key, key, name + ":pass");
        HttpResponse<byte[]> replay = post("/guarded/admins-only/" + key, key, name + ":pass");
        users.updateUser(User.withUsername(name).password("{noop}pass").roles("PAYER").build());
        HttpResponse<byte[]> revoked = post("/guarded/admins-only/" + key, key, name + ":pass");

        assertThat(first.statusCode()).isEqualTo(200);
        assertThat(replay.headers().firstValue("Idempotent-Replayed")).hasValue("true");
        assertThat(revoked.statusCode()).isEqualTo(REFUSED);
        assertThat(revoked.headers().firstValue("Idempotent-Replayed")).isEmpty();
        assertThat(notes(key)).isEqualTo(1);
    }

    @Test
    void aRefusalBeforeTheHandlerClaimsNothing() throws Exception {
        String key = UUID.randomUUID().toString();

        HttpResponse<byte[]> refused = post("/guarded/admins-only/" + key, key, "alice:alice-pass");

        assertThat(refused.statusCode()).isEqualTo(REFUSED);
        assertThat(notes(key)).isZero();
        assertThat(records(key)).isZero();
    }

    @Test
    void aRefusalOfTheReturnedAnswerRollsTheHandlerBackAndStoresNothing() throws Exception {
        String key = UUID.randomUUID().toString();

        HttpResponse<byte[]> refused = post("/guarded/owned-by-bob/" + key, key, "alice:alice-pass");
        HttpResponse<byte[]> again = post("/guarded/owned-by-bob/" + key, key, "alice:alice-pass");

        assertThat(refused.statusCode()).isEqualTo(REFUSED);
        assertThat(again.statusCode()).isEqualTo(REFUSED);
        assertThat(again.headers().firstValue("Idempotent-Replayed")).isEmpty();
        assertThat(notes(key)).isZero();
        assertThat(records(key)).isZero();
    }

    @Test
    void withoutIdempotentTheSameRefusalComesAfterTheHandlersTransactionCommitted() throws Exception {
        String key = UUID.randomUUID().toString();

        HttpResponse<byte[]> refused = post("/guarded/plain-owned-by-bob/" + key, key, "alice:alice-pass");

        assertThat(refused.statusCode()).isEqualTo(REFUSED);
        assertThat(notes(key)).isEqualTo(1);
    }

    private HttpResponse<byte[]> post(String path, String key, String credentials) throws Exception {
        return PaymentApi.onPort(port).postEmpty(path, key, credentials);
    }

    private long notes(String note) {
        return DB.queryLong("select count(*) from guarded_notes where note = '" + note + "'");
    }

    private long records(String key) {
        return DB.queryLong("select count(*) from idempotency_keys where idempotency_key = '" + key + "'");
    }

    @TestConfiguration(proxyBeanMethods = false)
    @EnableMethodSecurity
    static class Guarded {

        @Bean
        GuardedController guardedController(JdbcClient jdbc) {
            return new GuardedController(jdbc);
        }
    }

    @RestController
    static class GuardedController {

        private final JdbcClient jdbc;

        GuardedController(JdbcClient jdbc) {
            this.jdbc = jdbc;
            jdbc.sql("create table if not exists guarded_notes (note text not null)").update();
        }

        @PostMapping("/guarded/admins-only/{note}")
        @Idempotent
        @PreAuthorize("hasRole('ADMIN')")
        public Map<String, String> adminsOnly(@PathVariable String note) {
            return write(note);
        }

        @PostMapping("/guarded/owned-by-bob/{note}")
        @Idempotent
        @PostAuthorize("returnObject['owner'] == authentication.name")
        public Map<String, String> ownedByBob(@PathVariable String note) {
            return write(note);
        }

        @PostMapping("/guarded/plain-owned-by-bob/{note}")
        @Transactional
        @PostAuthorize("returnObject['owner'] == authentication.name")
        public Map<String, String> plainOwnedByBob(@PathVariable String note) {
            return write(note);
        }

        @ExceptionHandler(AccessDeniedException.class)
        ResponseEntity<Map<String, String>> refused(AccessDeniedException e) {
            return ResponseEntity.status(HttpStatus.FORBIDDEN).body(Map.of("error", "refused"));
        }

        private Map<String, String> write(String note) {
            jdbc.sql("insert into guarded_notes (note) values (?)").param(note).update();
            return Map.of("note", note, "owner", "bob");
        }
    }
}
