package io.idempotency.spring;

import io.idempotency.core.Idempotent;
import io.idempotency.testkit.TestPostgres;
import org.junit.jupiter.api.Test;
import org.springframework.boot.autoconfigure.AutoConfigurations;
import org.springframework.boot.diagnostics.FailureAnalysis;
import io.awspring.cloud.sqs.annotation.SqsListener;
import org.springframework.amqp.rabbit.annotation.RabbitHandler;
import org.springframework.amqp.rabbit.annotation.RabbitListener;
import org.springframework.messaging.handler.annotation.MessageMapping;
import org.springframework.messaging.rsocket.annotation.ConnectMapping;
import org.springframework.messaging.simp.annotation.SubscribeMapping;
import org.springframework.kafka.annotation.DltHandler;
import org.springframework.pulsar.annotation.PulsarReader;
import org.springframework.stereotype.Controller;
import org.springframework.stereotype.Service;

import static io.idempotency.spring.StartupFailures.assertStartFailsWithDescription;
import static org.assertj.core.api.Assertions.assertThat;

/**
 * {@code @Idempotent} on a method a message broker's listener container calls: it runs on the container's thread,
 * never inside a request, so there is no key to take and the advice fails every delivery (the broker redelivers it
 * for ever, or drops it). Spring AMQP names such a method two ways: {@code @RabbitListener} on the method, or
 * {@code @RabbitListener} on the class with {@code @RabbitHandler} on each method it calls (Spring for Apache Kafka's
 * {@code @KafkaListener} and {@code @KafkaHandler} alike). Both must stop the start. So must a message-handling method
 * of Spring's messaging support ({@code @MessageMapping}, {@code @SubscribeMapping}, {@code @ConnectMapping}): STOMP
 * over WebSocket and RSocket call it for each message on a thread of their own, outside any HTTP request.
 */
class ListenerIdempotentMethodsTest {

    private static final TestPostgres.Database DATABASE = TestPostgres.newDatabase();

    @Test
    void anIdempotentListenerMethodStopsTheStart() {
        assertStartFailsWithDescription(TestDatabases.contextRunner(DATABASE)
                .withUserConfiguration(MethodListener.class))
                .contains("ListenerIdempotentMethodsTest$MethodListener.onPayment(java.lang.String)", "@RabbitListener",
                        "IdempotencyTemplate");
    }

    @Test
    void anIdempotentHandlerOfAClassLevelListenerStopsTheStart() {
        assertStartFailsWithDescription(TestDatabases.contextRunner(DATABASE)
                .withUserConfiguration(ClassListener.class))
                .contains("ListenerIdempotentMethodsTest$ClassListener.onPayment(java.lang.String)", "@RabbitHandler",
                        "IdempotencyTemplate");
    }

    @Test
    void anIdempotentMessageMappingMethodStopsTheStart() {
        assertStartFailsWithDescription(TestDatabases.contextRunner(DATABASE)
                .withUserConfiguration(StompController.class))
                .contains("ListenerIdempotentMethodsTest$StompController.pay(java.lang.String)", "@MessageMapping",
                        "ListenerIdempotentMethodsTest$StompController.subscribe()", "@SubscribeMapping",
                        "ListenerIdempotentMethodsTest$StompController.connect(java.lang.String)", "@ConnectMapping",
                        "IdempotencyTemplate");
    }

    /**
     * Listeners of other brokers' Spring support, which the tests do not depend on (stand-ins under the annotations'
     * real names): a Pulsar reader, an SQS listener, and the method to which a Kafka listener with retry topics hands
     * the records that exhausted their retries.
     */
    @Test
    void anIdempotentListenerOfAnotherBrokerStopsTheStart() {
        assertStartFailsWithDescription(TestDatabases.contextRunner(DATABASE)
                .withUserConfiguration(OtherBrokersListener.class))
                .contains("ListenerIdempotentMethodsTest$OtherBrokersListener.read(java.lang.String)", "@PulsarReader",
                        "ListenerIdempotentMethodsTest$OtherBrokersListener.receive(java.lang.String)", "@SqsListener",
                        "ListenerIdempotentMethodsTest$OtherBrokersListener.exhausted(java.lang.String)",
                        "@DltHandler");
    }

    /**
     * A worker that serves no requests (its listeners are all it does): there the listener has no key to take either,
     * and every delivery would be refused, so the start stops, as in a web application. A method no broker calls
     * starts with the warning (a worker sharing a web application's classes; its calls are refused), and switched off
     * on purpose the start goes on.
     */
    @Test
    void anIdempotentListenerOfAnApplicationThatServesNoRequestsStopsTheStart() {
        FailureAnalysis analysis = new IdempotencyFailureAnalyzer().analyze(StartupFailures.startupFailure(
                TestDatabases.nonWebRunner(DATABASE)
                        .withConfiguration(AutoConfigurations.of(IdempotencyInactiveAutoConfiguration.class))
                        .withUserConfiguration(MethodListener.class, ClassListener.class)));
        assertThat(analysis.getDescription())
                .contains("ListenerIdempotentMethodsTest$MethodListener.onPayment(java.lang.String)", "@RabbitListener",
                        "ListenerIdempotentMethodsTest$ClassListener.onPayment(java.lang.String)", "@RabbitHandler",
                        "every delivery of a message to them, or run of a task, would be refused");
        assertThat(analysis.getAction()).contains("IdempotencyTemplate");
        TestDatabases.nonWebRunner(DATABASE)
                .withConfiguration(AutoConfigurations.of(IdempotencyInactiveAutoConfiguration.class))
                .withUserConfiguration(ClassListenerWithHelper.class)
                .run(context -> assertThat(context).hasNotFailed());
        TestDatabases.nonWebRunner(DATABASE)
                .withConfiguration(AutoConfigurations.of(IdempotencyInactiveAutoConfiguration.class))
                .withPropertyValues("idempotency.enabled=false")
                .withUserConfiguration(MethodListener.class)
                .run(context -> assertThat(context).hasNotFailed());
    }

    /** A class-level listener whose idempotent work is not one of its handlers is no concern of the starter's. */
    @Test
    void anIdempotentMethodOfAListenerClassThatIsNotAHandlerStarts() {
        TestDatabases.contextRunner(DATABASE).withUserConfiguration(ClassListenerWithHelper.class)
                .run(context -> assertThat(context).hasNotFailed());
    }

    @Service
    static class MethodListener {
        @RabbitListener(queues = "payments")
        @Idempotent
        public void onPayment(String message) {
        }
    }

    @Service
    @RabbitListener(queues = "payments")
    static class ClassListener {
        @RabbitHandler
        @Idempotent
        public void onPayment(String message) {
        }
    }

    @Service
    @RabbitListener(queues = "payments")
    static class ClassListenerWithHelper {
        @RabbitHandler
        public void onPayment(String message) {
        }

        @Idempotent
        public void settle(String message) {
        }
    }

    @Controller
    static class StompController {
        @MessageMapping("/payments")
        @Idempotent
        public String pay(String message) {
            return message;
        }

        @SubscribeMapping("/payments")
        @Idempotent
        public String subscribe() {
            return "subscribed";
        }

        @ConnectMapping
        @Idempotent
        public void connect(String setup) {
        }
    }

    @Service
    static class OtherBrokersListener {
        @PulsarReader
        @Idempotent
        public void read(String message) {
        }

        @SqsListener
        @Idempotent
        public void receive(String message) {
        }

        @DltHandler
        @Idempotent
        public void exhausted(String message) {
        }
    }
}
