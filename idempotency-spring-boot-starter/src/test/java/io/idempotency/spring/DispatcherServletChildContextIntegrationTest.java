package io.idempotency.spring;

import io.idempotency.core.Idempotent;
import io.idempotency.testkit.TestPostgres;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.ExtendWith;
import org.springframework.boot.SpringBootConfiguration;
import org.springframework.boot.autoconfigure.EnableAutoConfiguration;
import org.springframework.boot.builder.SpringApplicationBuilder;
import org.springframework.boot.test.system.CapturedOutput;
import org.springframework.boot.test.system.OutputCaptureExtension;
import org.springframework.boot.web.server.context.WebServerApplicationContext;
import org.springframework.boot.web.servlet.ServletRegistrationBean;
import org.springframework.context.ConfigurableApplicationContext;
import org.springframework.context.annotation.Bean;
import org.springframework.context.annotation.Configuration;
import org.springframework.context.annotation.Import;
import org.springframework.web.bind.annotation.PostMapping;
import org.springframework.web.bind.annotation.PutMapping;
import org.springframework.web.bind.annotation.RestController;
import org.springframework.web.context.support.AnnotationConfigWebApplicationContext;
import org.springframework.web.servlet.DispatcherServlet;
import org.springframework.web.servlet.config.annotation.EnableWebMvc;

import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.util.UUID;
import java.util.concurrent.atomic.AtomicInteger;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * A second DispatcherServlet with a web application context of its own, a child of the application's (Spring's way
 * of serving a second API under its own path): its controllers are beans of the child context, which the application
 * context's post-processors do not reach.
 */
@Tag("container")
@ExtendWith(OutputCaptureExtension.class)
class DispatcherServletChildContextIntegrationTest {

    private static final TestPostgres.Database DATABASE = TestPostgres.newDatabase();
    private static final AtomicInteger PARTNER_RUNS = new AtomicInteger();

    @SpringBootConfiguration
    @EnableAutoConfiguration
    static class App {
        @Bean
        ServletRegistrationBean<DispatcherServlet> partnerApi() {
            return partnerServlet(PartnerApi.class);
        }
    }

    @SpringBootConfiguration
    @EnableAutoConfiguration
    static class AppWithAProxyingPartnerContext {
        @Bean
        ServletRegistrationBean<DispatcherServlet> partnerApi() {
            return partnerServlet(ProxyingPartnerApi.class);
        }
    }

    @SpringBootConfiguration
    @EnableAutoConfiguration
    static class AppWithPartnerRefunds {
        @Bean
        ServletRegistrationBean<DispatcherServlet> partnerApi() {
            return partnerServlet(ProxyingPartnerRefundsApi.class);
        }
    }

    @SpringBootConfiguration
    @EnableAutoConfiguration
    static class AppWithAPartnerEndpointTheAnnotationNeverApplies {
        @Bean
        ServletRegistrationBean<DispatcherServlet> partnerApi() {
            return partnerServlet(ProxyingPartnerPutApi.class);
        }
    }

    @SpringBootConfiguration
    @EnableAutoConfiguration
    static class AppWithATransactionsOnlyPartnerContext {
        @Bean
        ServletRegistrationBean<DispatcherServlet> partnerApi() {
            return partnerServlet(TransactionsOnlyPartnerApi.class);
        }
    }

    @SpringBootConfiguration
    @EnableAutoConfiguration
    static class AppWithAFinalPartnerMethod {
        @Bean
        ServletRegistrationBean<DispatcherServlet> partnerApi() {
            return partnerServlet(ProxyingFinalPartnerApi.class);
        }
    }

    private static ServletRegistrationBean<DispatcherServlet> partnerServlet(Class<?> configuration) {
        AnnotationConfigWebApplicationContext partnerContext = new AnnotationConfigWebApplicationContext();
        partnerContext.register(configuration);
        ServletRegistrationBean<DispatcherServlet> registration =
                new ServletRegistrationBean<>(new DispatcherServlet(partnerContext), "/partners/*");
        registration.setName("partners");
        return registration;
    }

    @Configuration
    @EnableWebMvc
    @Import(PartnerPaymentsController.class)
    static class PartnerApi {
    }

    @Configuration
    @EnableWebMvc
    @Import(PartnerPaymentsController.class)
    static class ProxyingPartnerApi {
        @Bean
        static org.springframework.aop.framework.autoproxy.DefaultAdvisorAutoProxyCreator partnerAutoProxyCreator() {
            return new org.springframework.aop.framework.autoproxy.DefaultAdvisorAutoProxyCreator();
        }
    }

    @Configuration
    @EnableWebMvc
    @Import(PartnerRefundsController.class)
    static class ProxyingPartnerRefundsApi {
        @Bean
        static org.springframework.aop.framework.autoproxy.DefaultAdvisorAutoProxyCreator partnerAutoProxyCreator() {
            return new org.springframework.aop.framework.autoproxy.DefaultAdvisorAutoProxyCreator();
        }
    }

    @Configuration
    @EnableWebMvc
    @Import(PartnerPutController.class)
    static class ProxyingPartnerPutApi {
        @Bean
        static org.springframework.aop.framework.autoproxy.DefaultAdvisorAutoProxyCreator partnerAutoProxyCreator() {
            return new org.springframework.aop.framework.autoproxy.DefaultAdvisorAutoProxyCreator();
        }
    }

    @Configuration
    @EnableWebMvc
    @org.springframework.transaction.annotation.EnableTransactionManagement
    @Import(RequestScopedPartnerController.class)
    static class TransactionsOnlyPartnerApi {
    }

    @Configuration
    @EnableWebMvc
    @Import(FinalPartnerController.class)
    static class ProxyingFinalPartnerApi {
        @Bean
        static org.springframework.aop.framework.autoproxy.DefaultAdvisorAutoProxyCreator partnerAutoProxyCreator() {
            return new org.springframework.aop.framework.autoproxy.DefaultAdvisorAutoProxyCreator();
        }
    }

    @RestController
    @org.springframework.web.context.annotation.RequestScope
    static class RequestScopedPartnerController {
        @Idempotent
        @PostMapping("/scoped-payments")
        public String pay() {
            return "payment " + PARTNER_RUNS.incrementAndGet();
        }
    }

    @RestController
    static class FinalPartnerController {
        @Idempotent
        @PostMapping("/final-payments")
        public final String pay() {
            return "payment " + PARTNER_RUNS.incrementAndGet();
        }
    }

    /** Idempotent for PUT, which no endpoint of the application's own context is. */
    @RestController
    static class PartnerRefundsController {
        @Idempotent(methods = "PUT")
        @PutMapping("/refunds")
        public String refund() {
            return "refund " + PARTNER_RUNS.incrementAndGet();
        }
    }

    /** A PUT endpoint with the default methods (POST and PATCH): the annotation never applies to it. */
    @RestController
    static class PartnerPutController {
        @Idempotent
        @PutMapping("/orders")
        public String putOrderNeverIdempotent() {
            return "order " + PARTNER_RUNS.incrementAndGet();
        }
    }

    @RestController
    static class PartnerPaymentsController {
        @Idempotent
        @PostMapping("/payments")
        public String pay() {
            return "payment " + PARTNER_RUNS.incrementAndGet();
        }
    }

    @Test
    void aRetryToAControllerOfASecondDispatcherServletsOwnContextDoesNotRunItAgain() throws Exception {
        PARTNER_RUNS.set(0);
        ConfigurableApplicationContext started;
        try {
            started = start(App.class);
        } catch (RuntimeException e) {
            // a container that starts the servlet with the server (Jetty) refreshes its context then: the start fails
            assertThat(causes(e)).anySatisfy(cause -> assertThat(cause)
                    .isInstanceOf(IdempotencyConfigurationException.class)
                    .hasMessageContaining("PartnerPaymentsController.pay()"));
            return;
        }
        try (ConfigurableApplicationContext context = started) {
            HttpResponse<String>[] answers = postTwice(context);

            assertThat(PARTNER_RUNS.get()).as("runs of the handler for one key (first answered %s %s, the retry %s %s)",
                    answers[0].statusCode(), answers[0].body(), answers[1].statusCode(), answers[1].body())
                    .isLessThanOrEqualTo(1);
        }
    }

    @Test
    void aChildContextThatProxiesItsBeansTakesTheAdvice() throws Exception {
        PARTNER_RUNS.set(0);
        try (ConfigurableApplicationContext context = start(AppWithAProxyingPartnerContext.class)) {
            HttpResponse<String>[] answers = postTwice(context);

            assertThat(answers[0].statusCode()).isEqualTo(200);
            assertThat(answers[1].statusCode()).isEqualTo(200);
            assertThat(answers[1].body()).isEqualTo(answers[0].body()).isEqualTo("payment 1");
            assertThat(PARTNER_RUNS.get()).isEqualTo(1);
        }
    }

    /**
     * The child context's handlers are idempotent for a method none of the application's context is: the filter must
     * wrap those requests too, or every one fails (the advice finds no request that passed the filter).
     */
    @Test
    void aChildContextsHandlerIdempotentForAMethodOfItsOwnIsServed() throws Exception {
        PARTNER_RUNS.set(0);
        try (ConfigurableApplicationContext context = start(AppWithPartnerRefunds.class)) {
            HttpResponse<String>[] answers = sendTwice(context, "PUT", "/partners/refunds");

            assertThat(answers[0].statusCode()).as(answers[0].body()).isEqualTo(200);
            assertThat(answers[1].statusCode()).as(answers[1].body()).isEqualTo(200);
            assertThat(answers[1].body()).isEqualTo(answers[0].body()).isEqualTo("refund 1");
            assertThat(answers[1].headers().firstValue("Idempotent-Replayed")).hasValue("true");
            assertThat(PARTNER_RUNS.get()).isEqualTo(1);
        }
    }

    /** The child context's handlers are checked as the application's are: one the annotation never applies to. */
    @Test
    void aChildContextsHandlerTheAnnotationNeverAppliesToIsRefused(CapturedOutput output) throws Exception {
        assertTheChildIsRefused(AppWithAPartnerEndpointTheAnnotationNeverApplies.class, "PUT", "/partners/orders",
                output, "putOrderNeverIdempotent()");
    }

    /**
     * A child whose only auto-proxy creator is the one {@code @EnableTransactionManagement} brings, which applies only
     * the infrastructure advisors of its own context: a request-scoped controller there, made at each request, would
     * never get the {@code @Idempotent} advice.
     */
    @Test
    void aChildContextWhoseAutoProxyCreatorTakesOnlyItsOwnAdvisorsIsRefused(CapturedOutput output) throws Exception {
        assertTheChildIsRefused(AppWithATransactionsOnlyPartnerContext.class, "POST", "/partners/scoped-payments",
                output, "RequestScopedPartnerController.pay()", "has no effect");
    }

    /** The child's beans are checked as the application's: a final method its proxy cannot intercept. */
    @Test
    void aChildContextsFinalIdempotentMethodIsRefused(CapturedOutput output) throws Exception {
        assertTheChildIsRefused(AppWithAFinalPartnerMethod.class, "POST", "/partners/final-payments", output,
                "FinalPartnerController.pay()", "is final");
    }

    /**
     * The child context's refresh must be refused, naming {@code expected}: the start fails where the container starts
     * the servlet with the server (Jetty), else the servlet's first request does, and its handler never runs.
     */
    private static void assertTheChildIsRefused(Class<?> application, String method, String path,
                                                CapturedOutput output, String... expected) throws Exception {
        PARTNER_RUNS.set(0);
        ConfigurableApplicationContext started;
        try {
            started = start(application);
        } catch (RuntimeException e) {
            assertThat(causes(e)).anySatisfy(cause -> assertThat(cause)
                    .isInstanceOf(IdempotencyConfigurationException.class).hasMessageContainingAll(expected));
            return;
        }
        try (ConfigurableApplicationContext context = started) {
            HttpResponse<String>[] answers = sendTwice(context, method, path);

            assertThat(answers[0].statusCode()).as("the servlet failed to start").isGreaterThanOrEqualTo(500);
            assertThat(PARTNER_RUNS.get()).isZero();
            assertThat(output.getAll()).contains(IdempotencyConfigurationException.class.getName()).contains(expected);
        }
    }

    private static java.util.List<Throwable> causes(Throwable failure) {
        java.util.List<Throwable> causes = new java.util.ArrayList<>();
        for (Throwable cause = failure; cause != null && !causes.contains(cause); cause = cause.getCause()) {
            causes.add(cause);
        }
        return causes;
    }

    private static ConfigurableApplicationContext start(Class<?> application) {
        return new SpringApplicationBuilder(application)
                .properties(DATABASE.springPropertyValues().toArray(String[]::new))
                .properties("server.port=0")
                .run();
    }

    private static HttpResponse<String>[] postTwice(ConfigurableApplicationContext context) throws Exception {
        return sendTwice(context, "POST", "/partners/payments");
    }

    @SuppressWarnings("unchecked")
    private static HttpResponse<String>[] sendTwice(ConfigurableApplicationContext context, String method, String path)
            throws Exception {
        int port = ((WebServerApplicationContext) context).getWebServer().getPort();
        HttpClient client = HttpClient.newHttpClient();
        HttpRequest request = HttpRequest.newBuilder(URI.create("http://localhost:" + port + path))
                .header("Idempotency-Key", UUID.randomUUID().toString())
                .method(method, HttpRequest.BodyPublishers.noBody()).build();
        return new HttpResponse[] {client.send(request, HttpResponse.BodyHandlers.ofString()),
                client.send(request, HttpResponse.BodyHandlers.ofString())};
    }
}
