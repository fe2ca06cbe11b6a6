package io.idempotency.spring.usertests;

import io.idempotency.testkit.TestPostgres;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.Test;
import org.springframework.beans.factory.annotation.Autowired;
import org.springframework.boot.test.context.SpringBootTest;
import org.springframework.boot.webmvc.test.autoconfigure.AutoConfigureMockMvc;
import org.springframework.http.MediaType;
import org.springframework.jdbc.core.JdbcTemplate;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;
import org.springframework.test.web.servlet.MockMvc;
import org.springframework.transaction.annotation.Propagation;
import org.springframework.transaction.annotation.Transactional;

import javax.sql.DataSource;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;
import static org.springframework.test.web.servlet.request.MockMvcRequestBuilders.post;
import static org.springframework.test.web.servlet.result.MockMvcResultMatchers.header;
import static org.springframework.test.web.servlet.result.MockMvcResultMatchers.status;

/**
 * A {@code @Transactional} test method (Spring's test-managed transaction, rolled back after the test) sends its
 * request through MockMvc on its own thread, so the request meets the test's transaction. The claim and the answer
 * cannot commit in it (the test would see no replay as a client does, and the rollback would remove them), so the
 * request is refused before anything is written, saying why and what to do instead; a test that opts out of the
 * transaction for its method works as without {@code @Transactional}.
 */
@SpringBootTest(classes = PaymentsApplication.class)
@AutoConfigureMockMvc
@Transactional
class TransactionalTestMethodTest {

    static final TestPostgres.Database DATABASE = TestPostgres.newDatabase();

    static {
        DATABASE.queryString(PaymentsApplication.PAYMENTS_TABLE);
    }

    @DynamicPropertySource
    static void database(DynamicPropertyRegistry registry) {
        DATABASE.springProperties().forEach((name, value) -> registry.add(name, () -> value));
    }

    @Autowired
    MockMvc mvc;

    @Autowired
    DataSource dataSource;

    @Test
    void anIdempotentRequestInsideTheTestsTransactionIsRefusedSayingWhy() {
        String body = "{\"orderId\":\"in-tx\",\"amount\":\"1.00\"}";
        for (int attempt = 0; attempt < 2; attempt++) { // the second neither hangs nor is answered otherwise
            assertThatThrownBy(() -> mvc.perform(post("/payments").contentType(MediaType.APPLICATION_JSON)
                    .header("Idempotency-Key", "key-in-tx").content(body)))
                    .rootCause()
                    .isInstanceOf(IllegalStateException.class)
                    .hasMessageContaining("PaymentController.create")
                    .hasMessageContaining("@Transactional test")
                    .hasMessageContaining("Propagation.NOT_SUPPORTED");
        }
        // read on the test's own transaction, before its rollback could hide what the request wrote in it
        JdbcTemplate inTheTestsTransaction = new JdbcTemplate(dataSource);
        assertThat(inTheTestsTransaction.queryForObject(
                "select count(*) from idempotency_keys where idempotency_key = 'key-in-tx'", Long.class))
                .as("claims written in the test's transaction").isZero();
        assertThat(inTheTestsTransaction.queryForObject(
                "select count(*) from payments where order_id = 'in-tx'", Long.class))
                .as("payments written in the test's transaction").isZero();
    }

    @Test
    void aRequestWithoutItsKeyIsStillAnsweredWithoutTheDatabase() throws Exception {
        mvc.perform(post("/payments").contentType(MediaType.APPLICATION_JSON)
                        .content("{\"orderId\":\"in-tx-2\",\"amount\":\"1.00\"}"))
                .andExpect(status().isBadRequest());
    }

    // docs/testing.md: "A @Transactional test class"
    @Test
    @Transactional(propagation = Propagation.NOT_SUPPORTED)
    void aTestMethodOutsideTheTransactionIsServedAsAClientIs() throws Exception {
        String body = "{\"orderId\":\"no-tx\",\"amount\":\"1.00\"}";
        mvc.perform(post("/payments").contentType(MediaType.APPLICATION_JSON)
                        .header("Idempotency-Key", "key-no-tx").content(body))
                .andExpect(status().isCreated());
        mvc.perform(post("/payments").contentType(MediaType.APPLICATION_JSON)
                        .header("Idempotency-Key", "key-no-tx").content(body))
                .andExpect(status().isCreated())
                .andExpect(header().string("Idempotent-Replayed", "true"));
        assertThat(DATABASE.queryLong("select count(*) from payments where order_id = 'no-tx'")).isEqualTo(1);
    }

    @AfterAll
    static void nothingWasWrittenInsideTheTransaction() {
        assertThat(DATABASE.queryLong("select count(*) from idempotency_keys where idempotency_key = 'key-in-tx'"))
                .isZero();
        assertThat(DATABASE.queryLong("select count(*) from payments where order_id like 'in-tx%'")).isZero();
    }
}
