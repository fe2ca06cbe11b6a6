package io.idempotency.spring.messaging;

import io.idempotency.core.IdempotencyTemplate;
import io.idempotency.core.ScopedKey;
import io.idempotency.spring.TestDatabases;
import io.idempotency.testkit.TestPostgres;
import org.junit.jupiter.api.Test;
import org.springframework.amqp.core.Message;
import org.springframework.amqp.core.MessageProperties;
import org.springframework.amqp.support.converter.RemoteInvocationResult;
import org.springframework.amqp.support.converter.SimpleMessageConverter;

import java.nio.charset.StandardCharsets;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.catchThrowable;

/**
 * What the template throws to a listener can travel back to whoever sent the message: a Spring AMQP listener with
 * {@code returnExceptions} answers its caller with the exception, written with Java serialization (Spring AMQP's
 * {@link SimpleMessageConverter}, as the listener container does). "In progress" and "key reused" are the answers such
 * a caller most needs, so they must be written like any other exception; their key stays on this side.
 */
class ReturnedListenerExceptionsIntegrationTest {

    private static final byte[] MESSAGE = "{\"payment\":\"p-1\",\"amount\":\"12.50\"}".getBytes(StandardCharsets.UTF_8);

    @Test
    void inProgressAndKeyReusedReachTheCallerOfAListenerThatReturnsItsExceptions() throws Exception {
        TestPostgres.Database database = TestPostgres.newDatabase();
        TestDatabases.nonWebRunner(database)
                .withPropertyValues("idempotency.in-flight-wait=100ms")
                .run(context -> {
                    assertThat(context).hasNotFailed();
                    IdempotencyTemplate template = context.getBean(IdempotencyTemplate.class);

                    ScopedKey used = new ScopedKey("", "payment-listener", "msg-1");
                    template.execute(used, MESSAGE, () -> "booked".getBytes(StandardCharsets.UTF_8));
                    Throwable reused = catchThrowable(() -> template.execute(used,
                            "{\"payment\":\"p-2\"}".getBytes(StandardCharsets.UTF_8), () -> new byte[0]));
                    assertThat(reused).isInstanceOf(IdempotencyTemplate.KeyReusedException.class);

                    ScopedKey running = new ScopedKey("", "payment-listener", "msg-2");
                    CountDownLatch working = new CountDownLatch(1);
                    CountDownLatch finish = new CountDownLatch(1);
                    CompletableFuture<IdempotencyTemplate.Result> first = CompletableFuture.supplyAsync(() -> {
                        try {
                            return template.execute(running, MESSAGE, () -> {
                                working.countDown();
                                assertThat(finish.await(10, TimeUnit.SECONDS)).isTrue();
                                return "booked".getBytes(StandardCharsets.UTF_8);
                            });
                        } catch (Exception e) {
                            throw new IllegalStateException(e);
                        }
                    });
                    assertThat(working.await(10, TimeUnit.SECONDS)).isTrue();
                    Throwable inProgress = catchThrowable(() -> template.execute(running, MESSAGE,
                            () -> new byte[0]));
                    finish.countDown();
                    assertThat(first.get(10, TimeUnit.SECONDS).replayed()).isFalse();
                    assertThat(inProgress).isInstanceOf(IdempotencyTemplate.InProgressException.class);

                    for (Throwable thrown : new Throwable[] {reused, inProgress}) {
                        Throwable received = returnedToTheCaller(thrown);
                        assertThat(received).as("%s as the caller receives it", thrown.getClass().getSimpleName())
                                .isInstanceOf(thrown.getClass()).hasMessage(thrown.getMessage());
                    }
                });
    }

    /** {@code thrown} sent back to the caller as Spring AMQP's listener adapter does, and read there. */
    private static Throwable returnedToTheCaller(Throwable thrown) {
        SimpleMessageConverter converter = new SimpleMessageConverter();
        converter.setAllowedListPatterns(List.of("*"));
        Message reply = converter.toMessage(new RemoteInvocationResult(thrown), new MessageProperties());
        return ((RemoteInvocationResult) converter.fromMessage(reply)).getException();
    }
}
