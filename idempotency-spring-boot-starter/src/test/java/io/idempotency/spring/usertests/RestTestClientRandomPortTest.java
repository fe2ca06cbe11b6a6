package io.idempotency.spring.usertests;

import io.idempotency.testkit.TestPostgres;
import org.junit.jupiter.api.Test;
import org.springframework.beans.factory.annotation.Autowired;
import org.springframework.boot.resttestclient.autoconfigure.AutoConfigureRestTestClient;
import org.springframework.boot.test.context.SpringBootTest;
import org.springframework.http.MediaType;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;
import org.springframework.test.web.servlet.client.RestTestClient;
import org.springframework.transaction.annotation.Transactional;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * docs/testing.md, "Over HTTP": the application on its embedded server on a random port, with the RestTestClient
 * Spring Boot configures for it, on a real PostgreSQL: the first answer, its replay and a different body under the key.
 */
@SpringBootTest(classes = PaymentsApplication.class, webEnvironment = SpringBootTest.WebEnvironment.RANDOM_PORT)
@AutoConfigureRestTestClient
class RestTestClientRandomPortTest {

    static final TestPostgres.Database DATABASE = TestPostgres.newDatabase();

    static {
        DATABASE.queryString(PaymentsApplication.PAYMENTS_TABLE);
    }

    @DynamicPropertySource
    static void database(DynamicPropertyRegistry registry) {
        DATABASE.springProperties().forEach((name, value) -> registry.add(name, () -> value));
    }

    @Autowired
    RestTestClient client;

    @Test
    void aRetryOverHttpIsReplayed() {
        String body = "{\"orderId\":\"o-1\",\"amount\":\"3.00\"}";
        byte[] first = client.post().uri("/payments").contentType(MediaType.APPLICATION_JSON)
                .header("Idempotency-Key", "key-1").body(body)
                .exchange()
                .expectStatus().isCreated()
                .expectHeader().doesNotExist("Idempotent-Replayed")
                .expectBody().returnResult().getResponseBody();
        byte[] replayed = client.post().uri("/payments").contentType(MediaType.APPLICATION_JSON)
                .header("Idempotency-Key", "key-1").body(body)
                .exchange()
                .expectStatus().isCreated()
                .expectHeader().valueEquals("Idempotent-Replayed", "true")
                .expectBody().returnResult().getResponseBody();
        assertThat(replayed).isEqualTo(first);
        client.post().uri("/payments").contentType(MediaType.APPLICATION_JSON)
                .header("Idempotency-Key", "key-1").body("{\"orderId\":\"o-1\",\"amount\":\"4.00\"}")
                .exchange()
                .expectStatus().isEqualTo(422)
                .expectHeader().contentType(MediaType.APPLICATION_PROBLEM_JSON);
        assertThat(DATABASE.queryLong("select count(*) from payments where order_id = 'o-1'")).isEqualTo(1);
    }

    // docs/testing.md: "A @Transactional on such a test does not reach the server's request threads"
    @Test
    @Transactional
    void aTransactionalTestDoesNotReachTheServersRequests() {
        String body = "{\"orderId\":\"o-tx\",\"amount\":\"5.00\"}";
        client.post().uri("/payments").contentType(MediaType.APPLICATION_JSON)
                .header("Idempotency-Key", "key-tx").body(body)
                .exchange()
                .expectStatus().isCreated();
        client.post().uri("/payments").contentType(MediaType.APPLICATION_JSON)
                .header("Idempotency-Key", "key-tx").body(body)
                .exchange()
                .expectStatus().isCreated()
                .expectHeader().valueEquals("Idempotent-Replayed", "true");
        // committed by the server's own transactions, seen from a connection of its own while the test's is still
        // open: the test's rollback cannot remove them
        assertThat(DATABASE.queryLong("select count(*) from payments where order_id = 'o-tx'")).isEqualTo(1);
        assertThat(DATABASE.queryString("select status from idempotency_keys where idempotency_key = 'key-tx'"))
                .isEqualTo("SUCCEEDED");
    }
}
