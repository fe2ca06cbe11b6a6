package io.idempotency.sample.payment;

import io.idempotency.spring.CallerResolver;
import io.idempotency.testkit.TestPostgres;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.springframework.boot.test.context.SpringBootTest;
import org.springframework.boot.test.context.TestConfiguration;
import org.springframework.boot.test.web.server.LocalServerPort;
import org.springframework.context.annotation.Bean;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;

import java.net.http.HttpResponse;
import java.util.UUID;

import static io.idempotency.sample.payment.PaymentApi.REPLAYED_HEADER;
import static io.idempotency.sample.payment.PaymentApi.body;
import static io.idempotency.sample.payment.PaymentApi.newOrderId;
import static io.idempotency.sample.payment.PaymentApi.text;
import static org.assertj.core.api.Assertions.assertThat;

/**
 * The payer recorded with a payment or a charge is the caller the starter scopes the key by, whatever names it: here
 * a {@link CallerResolver} that puts alice and bob into one tenant. A charge recorded by the stale-claim resolver knows
 * only that caller, so a handler that recorded the principal's name instead would record the same payer two ways,
 * depending on whether its request crashed.
 */
@SpringBootTest(webEnvironment = SpringBootTest.WebEnvironment.RANDOM_PORT, properties = {
        "sample.chaos.enabled=true",
        "idempotency.lease=2s",
        "idempotency.in-flight-wait=500ms",
        "idempotency.sweeper.enabled=false"})
class TenantPayerIntegrationTest {

    private static final String TENANT = "tenant-a";

    private static final TestPostgres.Database DB = TestPostgres.newDatabase();

    @DynamicPropertySource
    static void database(DynamicPropertyRegistry registry) {
        DB.springProperties().forEach((name, value) -> registry.add(name, () -> value));
    }

    @LocalServerPort
    int port;

    ChargeApi charges;
    PaymentApi payments;

    @BeforeEach
    void client() {
        charges = ChargeApi.onPort(port);
        payments = PaymentApi.onPort(port);
    }

    @Test
    void aChargeRecordsTheSamePayerWhetherTheHandlerOrTheResolverRecordedIt() throws Exception {
        String answered = newOrderId();
        HttpResponse<byte[]> charged = charges.chargeAs("alice", "alice-pass", UUID.randomUUID().toString(),
                body(answered, "4.00"), null);
        assertThat(charged.statusCode()).as(text(charged)).isEqualTo(201);

        // The gateway books the charge, the handler fails; after the lease the retry gets it from the resolver.
        String resolved = newOrderId();
        String key = UUID.randomUUID().toString();
        HttpResponse<byte[]> failed = charges.chargeAs("alice", "alice-pass", key, body(resolved, "4.00"),
                "fail-after-charge");
        assertThat(failed.statusCode()).as(text(failed)).isEqualTo(500);
        ChargeApiIntegrationTest.awaitLeaseExpired(DB, key);
        HttpResponse<byte[]> retry = charges.chargeAs("alice", "alice-pass", key, body(resolved, "4.00"), null);
        assertThat(retry.statusCode()).as(text(retry)).isEqualTo(201);
        assertThat(retry.headers().firstValue(REPLAYED_HEADER)).as("the resolver's answer").hasValue("true");

        assertThat(payerOfCharge(answered)).as("recorded by the handler").isEqualTo(payerOfCharge(resolved));
        assertThat(payerOfCharge(answered)).isEqualTo(TENANT);
    }

    @Test
    void theSecondWallIsPerCallerAsTheKeysAre() throws Exception {
        String orderId = newOrderId();
        String body = body(orderId, "6.00");

        HttpResponse<byte[]> alice = payments.createPaymentAs("alice", "alice-pass", UUID.randomUUID().toString(),
                body, null);
        assertThat(alice.statusCode()).as(text(alice)).isEqualTo(201);
        assertThat(DB.queryString("select payer from payments where order_id = '" + orderId + "'")).isEqualTo(TENANT);

        // Bob pays for the same tenant: its key namespace is alice's, and so is its order. The order is paid.
        HttpResponse<byte[]> bob = payments.createPaymentAs("bob", "bob-pass", UUID.randomUUID().toString(), body,
                null);
        assertThat(bob.statusCode()).as(text(bob)).isEqualTo(200);
        assertThat(bob.body()).isEqualTo(alice.body());
        assertThat(DB.queryLong("select count(*) from payments where order_id = '" + orderId + "'")).isEqualTo(1);

        // The reads name the payer through the same resolver: the tenant's payment is bob's to read, not anonymous's.
        long id = ChargeApi.numberField(text(alice), "id");
        HttpResponse<String> read = payments.getAs("bob", "bob-pass", "/payments/" + id);
        assertThat(read.statusCode()).as(read.body()).isEqualTo(200);
        assertThat(read.body()).isEqualTo(text(alice));
        assertThat(payments.getAs("bob", "bob-pass", "/payments?orderId=" + orderId).body())
                .isEqualTo("[" + text(alice) + "]");
        assertThat(payments.get("/payments/" + id).statusCode()).isEqualTo(404);
    }

    private static String payerOfCharge(String orderId) {
        return DB.queryString("select payer from charges where order_id = '" + orderId + "'");
    }

    @TestConfiguration(proxyBeanMethods = false)
    static class Tenants {

        /** Anonymous callers are "", alice and bob pay for one tenant. */
        @Bean
        CallerResolver tenantCaller() {
            return request -> request.getUserPrincipal() == null ? "" : TENANT;
        }
    }
}
