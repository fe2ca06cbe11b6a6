package io.idempotency.spring.usertests;

import io.idempotency.spring.IdempotencyAutoConfiguration;
import io.idempotency.testkit.TestPostgres;
import org.junit.jupiter.api.Test;
import org.springframework.beans.factory.annotation.Autowired;
import org.springframework.boot.autoconfigure.ImportAutoConfiguration;
import org.springframework.boot.jdbc.autoconfigure.DataSourceAutoConfiguration;
import org.springframework.boot.jdbc.autoconfigure.DataSourceTransactionManagerAutoConfiguration;
import org.springframework.boot.transaction.autoconfigure.TransactionAutoConfiguration;
import org.springframework.boot.webmvc.test.autoconfigure.WebMvcTest;
import org.springframework.http.MediaType;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;
import org.springframework.test.context.bean.override.mockito.MockitoBean;
import org.springframework.test.web.servlet.MockMvc;

import static org.assertj.core.api.Assertions.assertThat;
import static org.mockito.ArgumentMatchers.any;
import static org.mockito.Mockito.times;
import static org.mockito.Mockito.verify;
import static org.mockito.Mockito.when;
import static org.springframework.test.web.servlet.request.MockMvcRequestBuilders.post;
import static org.springframework.test.web.servlet.result.MockMvcResultMatchers.header;
import static org.springframework.test.web.servlet.result.MockMvcResultMatchers.jsonPath;
import static org.springframework.test.web.servlet.result.MockMvcResultMatchers.status;

/**
 * docs/testing.md, "A @WebMvcTest slice with idempotency": a slice that imports the starter with the DataSource and
 * transactions it needs, on a real PostgreSQL, tests the controller's idempotency with its services mocked. The key is
 * asked for, a retry is replayed without calling the service again, and the records are in the database.
 */
@WebMvcTest(PaymentsApplication.PaymentController.class)
@ImportAutoConfiguration({DataSourceAutoConfiguration.class, DataSourceTransactionManagerAutoConfiguration.class,
        TransactionAutoConfiguration.class, IdempotencyAutoConfiguration.class})
class WebMvcSliceWithIdempotencyTest {

    static final TestPostgres.Database DATABASE = TestPostgres.newDatabase();

    @DynamicPropertySource
    static void database(DynamicPropertyRegistry registry) {
        DATABASE.springProperties().forEach((name, value) -> registry.add(name, () -> value));
    }

    @MockitoBean
    PaymentsApplication.PaymentService payments;

    @Autowired
    MockMvc mvc;

    @Test
    void theKeyIsAskedForAndARetryIsReplayedWithoutCallingTheService() throws Exception {
        when(payments.book(any())).thenReturn(new PaymentsApplication.Payment(7, "o-1", "1.00"));
        String body = "{\"orderId\":\"o-1\",\"amount\":\"1.00\"}";

        mvc.perform(post("/payments").contentType(MediaType.APPLICATION_JSON).content(body))
                .andExpect(status().isBadRequest())
                .andExpect(jsonPath("$.type").value(
                        "https://idempotency-starter.github.io/problems/idempotency-key-missing"));
        mvc.perform(post("/payments").contentType(MediaType.APPLICATION_JSON)
                        .header("Idempotency-Key", "key-1").content(body))
                .andExpect(status().isCreated())
                .andExpect(header().string("Location", "/payments/7"));
        mvc.perform(post("/payments").contentType(MediaType.APPLICATION_JSON)
                        .header("Idempotency-Key", "key-1").content(body))
                .andExpect(status().isCreated())
                .andExpect(header().string("Idempotent-Replayed", "true"))
                .andExpect(header().string("Location", "/payments/7"));

        verify(payments, times(1)).book(any());
        assertThat(DATABASE.queryLong("select count(*) from idempotency_keys where idempotency_key = 'key-1'"))
                .isEqualTo(1);
    }
}
