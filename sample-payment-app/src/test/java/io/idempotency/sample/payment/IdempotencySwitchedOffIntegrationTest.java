package io.idempotency.sample.payment;

import io.idempotency.testkit.TestPostgres;
import org.junit.jupiter.api.Test;
import org.springframework.boot.test.context.SpringBootTest;
import org.springframework.boot.test.web.server.LocalServerPort;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;

import java.net.http.HttpResponse;
import java.util.UUID;

import static io.idempotency.sample.payment.PaymentApi.body;
import static io.idempotency.sample.payment.PaymentApi.newOrderId;
import static io.idempotency.sample.payment.PaymentApi.text;
import static org.assertj.core.api.Assertions.assertThat;

/**
 * The app with the starter's off switch ({@code idempotency.enabled=false}), as its README says it behaves: it
 * starts, and its two endpoints, which read the caller (and the gateway key) from the idempotent request in progress,
 * find none and refuse every valid request with 500, writing no payment, no charge and nothing at the gateway; an
 * invalid body is still refused with 400 first.
 */
@SpringBootTest(webEnvironment = SpringBootTest.WebEnvironment.RANDOM_PORT, properties = "idempotency.enabled=false")
class IdempotencySwitchedOffIntegrationTest {

    private static final TestPostgres.Database DB = TestPostgres.newDatabase();

    @DynamicPropertySource
    static void database(DynamicPropertyRegistry registry) {
        DB.springProperties().forEach((name, value) -> registry.add(name, () -> value));
    }

    @LocalServerPort
    int port;

    @Test
    void paymentsAndChargesFailAndWriteNothing() throws Exception {
        String orderId = newOrderId();

        HttpResponse<byte[]> payment = PaymentApi.onPort(port)
                .createPayment(UUID.randomUUID().toString(), body(orderId, "12.50"), null);
        assertThat(payment.statusCode()).as(text(payment)).isEqualTo(500);

        HttpResponse<byte[]> charge = ChargeApi.onPort(port)
                .charge(UUID.randomUUID().toString(), body(orderId, "12.50"), null);
        assertThat(charge.statusCode()).as(text(charge)).isEqualTo(500);

        HttpResponse<byte[]> invalid = PaymentApi.onPort(port)
                .createPayment(UUID.randomUUID().toString(), body(orderId, "-1"), null);
        assertThat(invalid.statusCode()).as("validated before the context is asked for").isEqualTo(400);

        assertThat(DB.queryLong("select count(*) from payments")).isZero();
        assertThat(DB.queryLong("select count(*) from charges")).isZero();
        assertThat(DB.queryLong("select count(*) from charge_intents")).isZero();
        assertThat(DB.queryLong("select count(*) from gateway_ledger")).isZero();
    }
}
