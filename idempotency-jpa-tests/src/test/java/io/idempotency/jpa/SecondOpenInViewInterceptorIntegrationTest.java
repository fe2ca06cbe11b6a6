package io.idempotency.jpa;

import io.idempotency.jpa.app.JpaTestApplication;
import io.idempotency.testkit.TestPostgres;
import org.junit.jupiter.api.Test;
import org.springframework.boot.test.context.SpringBootTest;
import org.springframework.context.annotation.Import;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;

import java.net.http.HttpResponse;
import java.util.UUID;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * Boot's open-in-view interceptor and a second one for the same EntityManagerFactory, which only takes part in the
 * EntityManager the first opened: the EntityManager must still outlive the transaction, so that the handler's own
 * answers that are not stored are rolled back and sent as it gave them.
 */
@SpringBootTest(classes = JpaTestApplication.class, webEnvironment = SpringBootTest.WebEnvironment.RANDOM_PORT)
@Import(OwnOpenInViewInterceptorIntegrationTest.OwnInterceptor.class) // the second, beside Boot's
class SecondOpenInViewInterceptorIntegrationTest extends JpaHttpTest {

    static final TestPostgres.Database DATABASE = JpaContexts.withPurchases();

    @Override
    TestPostgres.Database database() {
        return DATABASE;
    }

    @DynamicPropertySource
    static void database(DynamicPropertyRegistry registry) {
        JpaContexts.register(registry, DATABASE);
    }

    @Test
    void anAnswerThatIsNotStoredIsSentAsTheHandlerGaveItAndKeepsNothing() throws Exception {
        String key = UUID.randomUUID().toString();
        String reference = "unavailable-" + key;

        HttpResponse<String> answer = post("/purchases/unavailable", key, purchase(reference));

        assertThat(answer.statusCode()).isEqualTo(503);
        assertThat(answer.body()).isEqualTo("{\"error\":\"try-later\"}");
        assertThat(purchases(reference)).isZero();
        assertThat(record(key)).isNull();
    }

    @Test
    void aHandlerAnsweringTheFailureOfItsOwnWriteGetsItsAnswerSent() throws Exception {
        String reference = "taken-" + UUID.randomUUID();
        assertThat(post("/purchases", UUID.randomUUID().toString(), purchase(reference)).statusCode()).isEqualTo(201);
        String key = UUID.randomUUID().toString();

        HttpResponse<String> answer = post("/purchases/or-conflict", key, purchase(reference));

        assertThat(answer.statusCode()).isEqualTo(409);
        assertThat(answer.body()).isEqualTo("{\"error\":\"reference-taken\"}");
        assertThat(purchases(reference)).isEqualTo(1);
        assertThat(record(key)).isNull();
    }

    private static String purchase(String reference) {
        return "{\"reference\":\"" + reference + "\",\"note\":\"a note\"}";
    }
}
