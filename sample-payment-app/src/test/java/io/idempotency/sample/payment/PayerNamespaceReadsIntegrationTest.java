package io.idempotency.sample.payment;

import io.idempotency.core.RequestFingerprint;
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

import static io.idempotency.sample.payment.ChargeApi.numberField;
import static io.idempotency.sample.payment.PaymentApi.body;
import static io.idempotency.sample.payment.PaymentApi.newOrderId;
import static io.idempotency.sample.payment.PaymentApi.text;
import static org.assertj.core.api.Assertions.assertThat;

/**
 * The reads find a payer's rows under the name the starter stores for the caller, which is not always the name the
 * {@link CallerResolver} returns: a name longer than 255 characters, one a text column cannot hold (a NUL), and one
 * that itself begins with {@code sha256:} are stored as {@code sha256:} and a digest. A read that compared the
 * resolver's name with the stored payer would not find the first two callers' own rows, and would hand the rows of
 * the long-named caller to a caller named like their digest.
 */
@SpringBootTest(webEnvironment = SpringBootTest.WebEnvironment.RANDOM_PORT)
class PayerNamespaceReadsIntegrationTest {

    /** Alice's name here: longer than the starter stores as it is (a long token subject, say). */
    private static final String LONG_NAME = "subject-" + "x".repeat(300);

    /** The namespace the starter stores the long name as; bob's name here, so that bob tries to pass for alice. */
    private static final String LONG_NAME_AS_STORED = "sha256:" + RequestFingerprint.sha256Hex(LONG_NAME);

    /** The anonymous caller's name here: a text column cannot hold it as it is. */
    private static final String NAME_WITH_NUL = "anonymous\u0000caller";

    private static final TestPostgres.Database DB = TestPostgres.newDatabase();

    @DynamicPropertySource
    static void database(DynamicPropertyRegistry registry) {
        DB.springProperties().forEach((name, value) -> registry.add(name, () -> value));
    }

    @LocalServerPort
    int port;

    PaymentApi payments;
    ChargeApi charges;

    @BeforeEach
    void client() {
        payments = PaymentApi.onPort(port);
        charges = ChargeApi.onPort(port);
    }

    @Test
    void aCallerWhoseNameIsStoredAsADigestReadsItsOwnRowsAndNobodyElseDoes() throws Exception {
        String orderId = newOrderId();
        HttpResponse<byte[]> paid = payments.createPaymentAs("alice", "alice-pass", UUID.randomUUID().toString(),
                body(orderId, "2.30"), null);
        assertThat(paid.statusCode()).as(text(paid)).isEqualTo(201);
        assertThat(DB.queryString("select payer from payments where order_id = '" + orderId + "'"))
                .isEqualTo(LONG_NAME_AS_STORED);
        long paymentId = numberField(text(paid), "id");
        HttpResponse<byte[]> charged = charges.chargeAs("alice", "alice-pass", UUID.randomUUID().toString(),
                body(orderId, "2.30"), null);
        assertThat(charged.statusCode()).as(text(charged)).isEqualTo(201);
        long chargeId = numberField(text(charged), "id");

        assertThat(payments.getAs("alice", "alice-pass", "/payments/" + paymentId).body()).isEqualTo(text(paid));
        assertThat(payments.getAs("alice", "alice-pass", "/payments?orderId=" + orderId).body())
                .isEqualTo("[" + text(paid) + "]");
        assertThat(charges.getAs("alice", "alice-pass", "/charges/" + chargeId).body()).isEqualTo(text(charged));
        assertThat(charges.getAs("alice", "alice-pass", "/charges?orderId=" + orderId).body())
                .isEqualTo("[" + text(charged) + "]");

        // Bob's name is the text alice's rows are stored under; the starter digests it too, so he is not alice.
        assertThat(payments.getAs("bob", "bob-pass", "/payments/" + paymentId).statusCode()).isEqualTo(404);
        assertThat(payments.getAs("bob", "bob-pass", "/payments?orderId=" + orderId).body()).isEqualTo("[]");
        assertThat(charges.getAs("bob", "bob-pass", "/charges/" + chargeId).statusCode()).isEqualTo(404);
        assertThat(charges.getAs("bob", "bob-pass", "/charges?orderId=" + orderId).body()).isEqualTo("[]");
    }

    @Test
    void aCallerWhoseNameATextColumnCannotHoldReadsItsOwnRows() throws Exception {
        String orderId = newOrderId();
        HttpResponse<byte[]> paid = payments.createPayment(UUID.randomUUID().toString(), body(orderId, "2.40"), null);
        assertThat(paid.statusCode()).as(text(paid)).isEqualTo(201);
        long paymentId = numberField(text(paid), "id");

        HttpResponse<String> one = payments.get("/payments/" + paymentId);
        assertThat(one.statusCode()).as(one.body()).isEqualTo(200);
        assertThat(one.body()).isEqualTo(text(paid));
        assertThat(payments.get("/payments?orderId=" + orderId).body()).isEqualTo("[" + text(paid) + "]");
        assertThat(payments.getAs("alice", "alice-pass", "/payments/" + paymentId).statusCode()).isEqualTo(404);
    }

    @TestConfiguration(proxyBeanMethods = false)
    static class Names {

        @Bean
        CallerResolver namesTheStarterStoresAsDigests() {
            return request -> {
                if (request.getUserPrincipal() == null) {
                    return NAME_WITH_NUL;
                }
                return switch (request.getUserPrincipal().getName()) {
                    case "alice" -> LONG_NAME;
                    case "bob" -> LONG_NAME_AS_STORED;
                    default -> throw new IllegalStateException("no such demo user");
                };
            };
        }
    }
}
