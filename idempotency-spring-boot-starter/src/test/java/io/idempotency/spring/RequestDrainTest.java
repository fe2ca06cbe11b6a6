package io.idempotency.spring;

import org.junit.jupiter.api.Test;
import org.springframework.mock.web.MockHttpServletRequest;
import org.springframework.mock.web.MockHttpServletResponse;
import org.springframework.web.context.support.GenericWebApplicationContext;

import java.time.Duration;
import java.util.HashSet;
import java.util.List;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * The wait of a context without an embedded server (a war) for the requests in the idempotency filter when it closes:
 * for those of other threads, never for the thread closing it.
 */
class RequestDrainTest {

    private final IdempotencyFilter filter = new IdempotencyFilter(new ProblemResponses("about:blank"), 1 << 20,
            1 << 20, new HashSet<>(), new IdempotentMethods());
    private final RequestDrain drain = new RequestDrain(new GenericWebApplicationContext(), () -> List.of(filter),
            Duration.ofSeconds(20));

    @Test
    void aRequestWhoseThreadClosesTheApplicationIsNotWaitedFor() throws Exception {
        CountDownLatch stopped = new CountDownLatch(1);
        AtomicLong waitedMillis = new AtomicLong(-1);

        filter.doFilter(post(), new MockHttpServletResponse(), (request, response) -> {
            long start = System.nanoTime();
            drain.stop(stopped::countDown); // as a handler that closes the application does, on its own thread
            assertThat(awaitQuietly(stopped)).as("stopped without waiting for itself").isTrue();
            waitedMillis.set(TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - start));
        });

        assertThat(waitedMillis.get()).isBetween(0L, 5_000L);
    }

    @Test
    void aRequestOfAnotherThreadIsWaitedForUntilItEnds() throws Exception {
        CountDownLatch inside = new CountDownLatch(1);
        CountDownLatch release = new CountDownLatch(1);
        Thread request = new Thread(() -> {
            try {
                filter.doFilter(post(), new MockHttpServletResponse(), (req, res) -> {
                    inside.countDown();
                    awaitQuietly(release);
                });
            } catch (Exception e) {
                throw new IllegalStateException(e);
            }
        });
        request.start();
        assertThat(inside.await(10, TimeUnit.SECONDS)).isTrue();

        CountDownLatch stopped = new CountDownLatch(1);
        drain.stop(stopped::countDown);

        assertThat(stopped.await(300, TimeUnit.MILLISECONDS)).as("waits while the request runs").isFalse();
        release.countDown();
        assertThat(stopped.await(10, TimeUnit.SECONDS)).as("stops once it has ended").isTrue();
        request.join(10_000);
    }

    private static MockHttpServletRequest post() {
        MockHttpServletRequest request = new MockHttpServletRequest("POST", "/payments");
        request.setContent("{}".getBytes());
        request.setContentType("application/json");
        return request;
    }

    private static boolean awaitQuietly(CountDownLatch latch) {
        try {
            return latch.await(10, TimeUnit.SECONDS);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            return false;
        }
    }
}
