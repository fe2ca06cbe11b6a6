package io.idempotency.spring;

import io.idempotency.core.Idempotent;
import io.idempotency.testkit.TestPostgres;
import org.junit.jupiter.api.Test;
import org.springframework.boot.SpringApplication;
import org.springframework.boot.SpringBootConfiguration;
import org.springframework.boot.autoconfigure.EnableAutoConfiguration;
import org.springframework.context.ConfigurableApplicationContext;
import org.springframework.context.annotation.Configuration;
import org.springframework.context.annotation.Import;
import org.springframework.scheduling.annotation.Async;
import org.springframework.scheduling.annotation.EnableAsync;
import org.springframework.stereotype.Service;
import org.springframework.web.bind.annotation.PostMapping;
import org.springframework.web.bind.annotation.RestController;

import java.util.concurrent.atomic.AtomicInteger;

import static io.idempotency.spring.StartupFailures.assertStartFailsWithDescription;
import static org.assertj.core.api.Assertions.assertThat;

/**
 * {@code @Async} on an {@code @Idempotent} method, with Spring's async processing enabled: the call returns at once and
 * the body runs on another thread, where there is no request, no key and no transaction. Spring MVC answers the client
 * (200, no body) before anything was done, and the advice, reached on the other thread, cannot run the body: every
 * request, retries included, is told it succeeded while its work is lost. The application must not start.
 */
class AsyncIdempotentMethodsTest {

    private static final TestPostgres.Database DATABASE = TestPostgres.newDatabase();

    static final AtomicInteger SHIPMENTS = new AtomicInteger();

    @Test
    void anAsyncIdempotentHandlerStopsTheStart() {
        assertStartFailsWithDescription(TestDatabases.contextRunner(DATABASE)
                .withUserConfiguration(AsyncEnabled.class, AsyncShipments.class))
                .contains("AsyncIdempotentMethodsTest$AsyncShipments.ship()", "@Async");
    }

    @Test
    void anIdempotentHandlerOfAnAsyncClassStopsTheStart() {
        assertStartFailsWithDescription(TestDatabases.contextRunner(DATABASE)
                .withUserConfiguration(AsyncEnabled.class, AsyncClassShipments.class))
                .contains("AsyncIdempotentMethodsTest$AsyncClassShipments.ship()", "@Async");
    }

    @Test
    void anAsyncIdempotentMethodOfAServiceStopsTheStartToo() {
        // as a functional route would call it
        assertStartFailsWithDescription(TestDatabases.contextRunner(DATABASE)
                .withUserConfiguration(AsyncEnabled.class, AsyncService.class))
                .contains("AsyncIdempotentMethodsTest$AsyncService.ship()", "@Async");
    }

    /** A bean made only when first asked for is advised then, after the start: it is refused all the same. */
    @Test
    void anAsyncIdempotentHandlerStopsTheStartUnderLazyInitialization() {
        assertStartFailsWithDescription(TestDatabases.contextRunner(DATABASE)
                .withInitializer(context -> context.addBeanFactoryPostProcessor(
                        new org.springframework.boot.LazyInitializationBeanFactoryPostProcessor()))
                .withUserConfiguration(AsyncEnabled.class, AsyncShipments.class))
                .contains("AsyncIdempotentMethodsTest$AsyncShipments.ship()", "@Async");
    }

    /** Without async processing enabled, {@code @Async} does nothing: the method runs on the request's thread. */
    @Test
    void anAsyncAnnotationThatNothingActsOnStarts() {
        TestDatabases.contextRunner(DATABASE).withUserConfiguration(AsyncShipments.class)
                .run(context -> assertThat(context).hasNotFailed());
        TestDatabases.contextRunner(DATABASE)
                .withInitializer(context -> context.addBeanFactoryPostProcessor(
                        new org.springframework.boot.LazyInitializationBeanFactoryPostProcessor()))
                .withUserConfiguration(AsyncShipments.class)
                .run(context -> assertThat(context).hasNotFailed());
    }

    /** An idempotent handler that hands work to an @Async service is the application's choice, and starts. */
    @Test
    void anIdempotentHandlerCallingAnAsyncServiceStarts() {
        TestDatabases.contextRunner(DATABASE)
                .withUserConfiguration(AsyncEnabled.class, Mailer.class, MailingShipments.class)
                .run(context -> assertThat(context).hasNotFailed());
    }

    /**
     * The whole application, as it would run: started, it would answer every request 200 and never do the work; it
     * is told at startup instead, in Spring Boot's failure report.
     */
    @Test
    void aSpringBootApplicationWithAnAsyncIdempotentHandlerReportsItAndDoesNotStart() {
        SpringApplication application = new SpringApplication(App.class);
        application.setDefaultProperties(new java.util.HashMap<>(DATABASE.springProperties()));
        Throwable failure = null;
        try (ConfigurableApplicationContext context = application.run("--server.port=0")) {
            assertThat(context).as("the application started").isNull();
        } catch (RuntimeException e) {
            failure = e;
        }
        assertThat(failure).isNotNull();
        assertThat(new IdempotencyFailureAnalyzer().analyze(failure)).isNotNull()
                .satisfies(analysis -> assertThat(analysis.getDescription())
                        .contains("AsyncIdempotentMethodsTest$AsyncShipments.ship()", "@Async"));
        assertThat(SHIPMENTS).hasValue(0);
    }

    @SpringBootConfiguration
    @EnableAutoConfiguration
    @EnableAsync
    @Import(AsyncShipments.class)
    static class App {
    }

    @Configuration(proxyBeanMethods = false)
    @EnableAsync
    static class AsyncEnabled {
    }

    @RestController
    static class AsyncShipments {
        @PostMapping("/shipments")
        @Idempotent
        @Async
        public void ship() {
            SHIPMENTS.incrementAndGet();
        }
    }

    @RestController
    @Async
    static class AsyncClassShipments {
        @PostMapping("/shipments")
        @Idempotent
        public void ship() {
            SHIPMENTS.incrementAndGet();
        }
    }

    @Service
    static class AsyncService {
        @Idempotent
        @Async
        public void ship() {
            SHIPMENTS.incrementAndGet();
        }
    }

    @Service
    static class Mailer {
        @Async
        public void send() {
        }
    }

    @RestController
    static class MailingShipments {
        private final Mailer mailer;

        MailingShipments(Mailer mailer) {
            this.mailer = mailer;
        }

        @PostMapping("/shipments")
        @Idempotent
        public void ship() {
            SHIPMENTS.incrementAndGet();
            mailer.send();
        }
    }
}
