package io.idempotency.spring.usertests;

import io.idempotency.spring.IdempotentAdvisor;
import org.junit.jupiter.api.Test;
import org.springframework.beans.factory.annotation.Autowired;
import org.springframework.boot.webmvc.test.autoconfigure.WebMvcTest;
import org.springframework.context.ApplicationContext;
import org.springframework.http.MediaType;
import org.springframework.test.context.bean.override.mockito.MockitoBean;
import org.springframework.test.web.servlet.MockMvc;

import static org.assertj.core.api.Assertions.assertThat;
import static org.mockito.ArgumentMatchers.any;
import static org.mockito.Mockito.times;
import static org.mockito.Mockito.verify;
import static org.mockito.Mockito.when;
import static org.springframework.test.web.servlet.request.MockMvcRequestBuilders.post;
import static org.springframework.test.web.servlet.result.MockMvcResultMatchers.header;
import static org.springframework.test.web.servlet.result.MockMvcResultMatchers.status;

/**
 * A {@code @WebMvcTest} slice of an {@code @Idempotent} controller, as docs/testing.md describes it: the slice leaves
 * the starter out, as it leaves out the DataSource and the transactions the starter needs, so the context starts and
 * the controller is tested as Spring MVC maps it, with {@code @Idempotent} having no effect: no key is asked for and
 * every request runs the handler.
 */
@WebMvcTest(PaymentsApplication.PaymentController.class)
class WebMvcSliceTest {

    @MockitoBean
    PaymentsApplication.PaymentService payments;

    @Autowired
    MockMvc mvc;

    @Autowired
    ApplicationContext context;

    @Test
    void theSliceLeavesTheStarterOutAndEveryRequestRunsTheHandler() throws Exception {
        when(payments.book(any())).thenReturn(new PaymentsApplication.Payment(7, "o-1", "1.00"));
        assertThat(context.getBeanNamesForType(IdempotentAdvisor.class)).isEmpty();

        mvc.perform(post("/payments").contentType(MediaType.APPLICATION_JSON)
                        .content("{\"orderId\":\"o-1\",\"amount\":\"1.00\"}"))
                .andExpect(status().isCreated()); // no key, no 400
        mvc.perform(post("/payments").contentType(MediaType.APPLICATION_JSON).header("Idempotency-Key", "k")
                        .content("{\"orderId\":\"o-1\",\"amount\":\"1.00\"}"))
                .andExpect(status().isCreated())
                .andExpect(header().doesNotExist("Idempotent-Replayed"));
        mvc.perform(post("/payments").contentType(MediaType.APPLICATION_JSON).header("Idempotency-Key", "k")
                        .content("{\"orderId\":\"o-1\",\"amount\":\"1.00\"}"))
                .andExpect(status().isCreated())
                .andExpect(header().doesNotExist("Idempotent-Replayed"));
        verify(payments, times(3)).book(any());
    }
}
