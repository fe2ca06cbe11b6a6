package io.idempotency.spring.usertests;

import io.idempotency.testkit.TestPostgres;
import org.junit.jupiter.api.Test;
import org.springframework.beans.factory.annotation.Autowired;
import org.springframework.boot.test.context.SpringBootTest;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;

import static org.assertj.core.api.Assertions.assertThatThrownBy;

/**
 * A test without a web environment that calls an {@code @Idempotent} handler directly: no request, no key, so the call
 * is refused (it would otherwise run unprotected, and a test could take that for idempotency working). Test through
 * MockMvc or the server instead.
 */
@SpringBootTest(classes = PaymentsApplication.class, webEnvironment = SpringBootTest.WebEnvironment.NONE)
class NoWebEnvironmentTest {

    static final TestPostgres.Database DATABASE = TestPostgres.newDatabase();

    static {
        DATABASE.queryString(PaymentsApplication.PAYMENTS_TABLE);
    }

    @DynamicPropertySource
    static void database(DynamicPropertyRegistry registry) {
        DATABASE.springProperties().forEach((name, value) -> registry.add(name, () -> value));
    }

    @Autowired
    PaymentsApplication.PaymentController controller;

    @Test
    void aDirectCallOfAnIdempotentHandlerIsRefused() {
        assertThatThrownBy(() -> controller.create(new PaymentsApplication.PaymentRequest("direct", "1.00")))
                .isInstanceOf(IllegalStateException.class)
                .hasMessageContaining("PaymentController.create")
                .hasMessageContaining("called outside any HTTP request");
        org.assertj.core.api.Assertions.assertThat(DATABASE.queryString("select count(*) from payments"))
                .as("the handler did not run").isEqualTo("0");
    }
}
