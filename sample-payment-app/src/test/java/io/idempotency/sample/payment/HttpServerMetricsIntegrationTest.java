package io.idempotency.sample.payment;

import io.idempotency.testkit.TestPostgres;
import io.micrometer.core.instrument.MeterRegistry;
import io.micrometer.core.instrument.Timer;
import org.junit.jupiter.api.Test;
import org.springframework.beans.factory.annotation.Autowired;
import org.springframework.boot.test.context.SpringBootTest;
import org.springframework.boot.test.web.server.LocalServerPort;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;

import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.UUID;
import java.util.concurrent.TimeUnit;

import static io.idempotency.sample.payment.PaymentApi.body;
import static io.idempotency.sample.payment.PaymentApi.newOrderId;
import static org.assertj.core.api.Assertions.assertThat;

/**
 * Spring Boot Actuator's metrics in an application with the starter: {@code http.server.requests} counts each request
 * with the status its client got — a replay's, and the idempotency filter's own answers — under the route template,
 * not the path a request names; and the library's two counters are in the registry Actuator made, with their fixed
 * tags only.
 */
@SpringBootTest(webEnvironment = SpringBootTest.WebEnvironment.RANDOM_PORT)
class HttpServerMetricsIntegrationTest {

    private static final TestPostgres.Database DB = TestPostgres.newDatabase();

    @DynamicPropertySource
    static void database(DynamicPropertyRegistry registry) {
        DB.springProperties().forEach((name, value) -> registry.add(name, () -> value));
    }

    @LocalServerPort
    int port;

    @Autowired
    MeterRegistry meters;

    @Test
    void eachRequestIsTimedWithTheStatusItsClientGot() throws Exception {
        PaymentApi api = PaymentApi.onPort(port);
        String key = UUID.randomUUID().toString();
        String body = body(newOrderId(), "12.50");

        int first = api.createPayment(key, body, null).statusCode();
        int replay = api.createPayment(key, body, null).statusCode();
        int reused = api.createPayment(key, body(newOrderId(), "3.00"), null).statusCode();
        int malformed = api.createPayment("malformed " + key, body, null).statusCode();

        assertThat(List.of(first, replay, reused, malformed)).containsExactly(201, 201, 422, 400);
        Map<String, Long> expected = Map.of("201", 2L, "422", 1L, "400", 1L);
        // a request is timed once it has ended on the server, which may be just after the client has read the answer
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
        while (!timedByStatus().equals(expected) && System.nanoTime() < deadline) {
            Thread.sleep(20);
        }
        assertThat(timedByStatus()).isEqualTo(expected);

        assertThat(meters.find("idempotency.cleanup.removed").counters()).extracting(counter -> counter.getId()
                .getTags().toString()).containsExactlyInAnyOrder("[tag(unit=records)]", "[tag(unit=partitions)]");
        assertThat(meters.find("idempotency.sweeper.resolved").counters()).extracting(counter -> counter.getId()
                .getTags().toString()).containsExactlyInAnyOrder("[tag(outcome=completed)]", "[tag(outcome=failed)]");
    }

    /** The requests to {@code POST /payments} timed so far, by the status they were answered with. */
    private Map<String, Long> timedByStatus() {
        Map<String, Long> byStatus = new TreeMap<>();
        for (Timer timer : meters.find("http.server.requests").tag("method", "POST").tag("uri", "/payments").timers()) {
            byStatus.merge(timer.getId().getTag("status"), timer.count(), Long::sum);
        }
        return byStatus;
    }
}
