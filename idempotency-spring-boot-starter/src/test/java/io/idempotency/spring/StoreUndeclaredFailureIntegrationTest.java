package io.idempotency.spring;

import io.idempotency.core.DefiniteFailureException;
import io.idempotency.core.Idempotent;
import io.idempotency.core.IdempotencyMode;
import io.idempotency.core.ScopedKey;
import io.idempotency.jdbc.PostgresIdempotencyStore;
import io.idempotency.testkit.TestPostgres;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.springframework.boot.SpringBootConfiguration;
import org.springframework.boot.autoconfigure.EnableAutoConfiguration;
import org.springframework.boot.test.context.SpringBootTest;
import org.springframework.boot.test.web.server.LocalServerPort;
import org.springframework.context.annotation.Bean;
import org.springframework.context.annotation.Import;
import org.springframework.http.ResponseEntity;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;
import org.springframework.web.bind.annotation.ExceptionHandler;
import org.springframework.web.bind.annotation.PostMapping;
import org.springframework.web.bind.annotation.RequestBody;
import org.springframework.web.bind.annotation.RestController;

import javax.sql.DataSource;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.sql.SQLException;
import java.util.UUID;
import java.util.concurrent.atomic.AtomicInteger;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * A store written in a language without checked exceptions (Kotlin) passes its driver's {@code SQLException} on as it
 * is, undeclared. When marking an intent-first claim FAILED after the handler's definite failure fails so, the
 * application's exception handlers still get the handler's exception — its answer is theirs, not a 500 — and the mark
 * is tried again, so that the request sent again runs.
 */
@SpringBootTest(classes = StoreUndeclaredFailureIntegrationTest.App.class,
        webEnvironment = SpringBootTest.WebEnvironment.RANDOM_PORT)
@Tag("container")
class StoreUndeclaredFailureIntegrationTest {

    private static final TestPostgres.Database DATABASE = TestPostgres.newDatabase();
    private static final AtomicInteger MARKS = new AtomicInteger();
    private static final AtomicInteger DECLINES = new AtomicInteger(1);

    @DynamicPropertySource
    static void database(DynamicPropertyRegistry registry) {
        TestDatabases.register(registry, DATABASE);
    }

    @SpringBootConfiguration
    @EnableAutoConfiguration
    @Import(ChargesController.class)
    static class App {

        /** The first FAILED mark fails as a Kotlin store passes on a lost connection. */
        @Bean
        PostgresIdempotencyStore idempotencyStore(DataSource dataSource) {
            return new PostgresIdempotencyStore(dataSource, "idempotency_keys") {
                @Override
                public boolean fail(ScopedKey key, String fencingToken) {
                    if (MARKS.incrementAndGet() == 1) {
                        StoreUndeclaredFailureIntegrationTest.<RuntimeException>throwUndeclared(
                                new SQLException("connection reset", "08006"));
                    }
                    return super.fail(key, fencingToken);
                }
            };
        }
    }

    /** Charges, the first time declined by the gateway before anything was charged. */
    @RestController
    public static class ChargesController {

        @PostMapping("/charges")
        @Idempotent(mode = IdempotencyMode.INTENT_FIRST, lease = "5m")
        public String charge(@RequestBody String order) {
            if (DECLINES.getAndDecrement() > 0) {
                throw new DefiniteFailureException("declined before charging");
            }
            return "charged " + order;
        }

        @ExceptionHandler(DefiniteFailureException.class)
        ResponseEntity<String> declined(DefiniteFailureException e) {
            return ResponseEntity.status(402).body("declined");
        }
    }

    @LocalServerPort
    int port;

    @Test
    void aDefiniteFailureIsAnsweredByTheApplicationAndMarkedAlsoWhenTheMarkFailedUndeclared() throws Exception {
        String key = UUID.randomUUID().toString();

        String declined = post(key);
        String again = post(key);

        assertThat(declined).as("the application's answer to the definite failure").startsWith("HTTP/1.1 402 ")
                .endsWith("declined");
        assertThat(again).as("the request sent again runs once the mark is made").startsWith("HTTP/1.1 200 ")
                .endsWith("charged o-1");
        assertThat(MARKS).hasValueGreaterThan(1);
    }

    private String post(String key) throws IOException {
        byte[] body = "o-1".getBytes(StandardCharsets.UTF_8);
        String request = "POST /charges HTTP/1.1\r\nHost: localhost\r\nContent-Type: text/plain\r\nContent-Length: "
                + body.length + "\r\nIdempotency-Key: " + key + "\r\nConnection: close\r\n\r\no-1";
        return OrdersApplicationTest.raw(port, request);
    }

    @SuppressWarnings("unchecked")
    private static <T extends Throwable> void throwUndeclared(Throwable failure) throws T {
        throw (T) failure;
    }
}
