package io.idempotency.spring;

import io.idempotency.core.Idempotent;
import io.idempotency.testkit.TestPostgres;
import org.junit.jupiter.api.Test;
import org.springframework.stereotype.Service;

import java.util.concurrent.CompletableFuture;
import java.util.concurrent.atomic.AtomicInteger;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.catchThrowable;

/**
 * {@code @Idempotent} on a service method, not a handler, called by a message listener (or a scheduled task) of a web
 * application: nothing at startup can see the call, and every call, made on a thread outside any HTTP request, is
 * refused. A listener's broker redelivers the message for ever, so the refusal must say what to do instead.
 */
class IdempotentServiceOutsideRequestsTest {

    private static final TestPostgres.Database DATABASE = TestPostgres.newDatabase();

    static final AtomicInteger PLACED = new AtomicInteger();

    @Test
    void aCallOutsideAnyRequestIsRefusedWithWhatToDo() {
        TestDatabases.contextRunner(DATABASE).withUserConfiguration(OrderService.class).run(context -> {
            assertThat(context).hasNotFailed();
            OrderService orders = context.getBean(OrderService.class);
            // as a listener container would: a thread of its own, no request bound to it
            Throwable refusal = CompletableFuture.supplyAsync(() -> catchThrowable(() -> orders.place("o-1"))).get();

            assertThat(refusal).isInstanceOf(IllegalStateException.class)
                    .hasMessageContaining("IdempotentServiceOutsideRequestsTest$OrderService.place(java.lang.String)")
                    .hasMessageContaining("not a handler reached by an HTTP request")
                    .hasMessageContaining("listener")
                    .hasMessageContaining("IdempotencyTemplate")
                    .hasMessageContaining("key of its own");
            assertThat(PLACED).hasValue(0);
        });
    }

    @Service
    static class OrderService {
        @Idempotent
        public String place(String order) {
            PLACED.incrementAndGet();
            return order;
        }
    }
}
