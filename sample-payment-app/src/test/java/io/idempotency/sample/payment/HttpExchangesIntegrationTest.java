package io.idempotency.sample.payment;

import io.idempotency.testkit.TestPostgres;
import org.junit.jupiter.api.Test;
import org.springframework.beans.factory.annotation.Autowired;
import org.springframework.boot.actuate.web.exchanges.InMemoryHttpExchangeRepository;
import org.springframework.boot.test.context.SpringBootTest;
import org.springframework.boot.test.context.TestConfiguration;
import org.springframework.boot.test.web.server.LocalServerPort;
import org.springframework.context.annotation.Bean;
import org.springframework.context.annotation.Import;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;

import java.util.List;
import java.util.UUID;
import java.util.concurrent.TimeUnit;

import static io.idempotency.sample.payment.PaymentApi.body;
import static io.idempotency.sample.payment.PaymentApi.newOrderId;
import static org.assertj.core.api.Assertions.assertThat;

/**
 * Actuator's recording of HTTP exchanges, which Spring Boot turns on when the application declares an
 * {@code HttpExchangeRepository}: each exchange is recorded with the status its client got — a replay's, and the
 * idempotency filter's own answers — not with what the handler's chain had left before the filter answered.
 */
@SpringBootTest(webEnvironment = SpringBootTest.WebEnvironment.RANDOM_PORT)
@Import(HttpExchangesIntegrationTest.Recording.class)
class HttpExchangesIntegrationTest {

    private static final TestPostgres.Database DB = TestPostgres.newDatabase();

    @DynamicPropertySource
    static void database(DynamicPropertyRegistry registry) {
        DB.springProperties().forEach((name, value) -> registry.add(name, () -> value));
    }

    @TestConfiguration(proxyBeanMethods = false)
    static class Recording {

        @Bean
        InMemoryHttpExchangeRepository httpExchangeRepository() {
            return new InMemoryHttpExchangeRepository();
        }
    }

    @LocalServerPort
    int port;

    @Autowired
    InMemoryHttpExchangeRepository exchanges;

    @Test
    void eachExchangeIsRecordedWithTheStatusItsClientGot() throws Exception {
        PaymentApi api = PaymentApi.onPort(port);
        String key = UUID.randomUUID().toString();
        String body = body(newOrderId(), "12.50");

        int first = api.createPayment(key, body, null).statusCode();
        int replay = api.createPayment(key, body, null).statusCode();
        int reused = api.createPayment(key, body(newOrderId(), "3.00"), null).statusCode();

        assertThat(List.of(first, replay, reused)).containsExactly(201, 201, 422);
        // the filter records an exchange once its request has ended on the server, which may be just after the client
        // has read the answer
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
        while (recorded().size() < 3 && System.nanoTime() < deadline) {
            Thread.sleep(20);
        }
        assertThat(recorded()).containsExactlyInAnyOrder(201, 201, 422);
    }

    private List<Integer> recorded() {
        return exchanges.findAll().stream()
                .filter(exchange -> exchange.getRequest().getUri().getPath().equals("/payments"))
                .map(exchange -> exchange.getResponse().getStatus()).toList();
    }
}
