package io.idempotency.spring;

import io.idempotency.core.Idempotent;
import io.idempotency.testkit.TestPostgres;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.springframework.boot.SpringBootConfiguration;
import org.springframework.boot.WebApplicationType;
import org.springframework.boot.autoconfigure.EnableAutoConfiguration;
import org.springframework.boot.builder.SpringApplicationBuilder;
import org.springframework.boot.web.server.context.WebServerApplicationContext;
import org.springframework.context.ConfigurableApplicationContext;
import org.springframework.context.annotation.Import;
import org.springframework.core.Ordered;
import org.springframework.jdbc.core.simple.JdbcClient;
import org.springframework.transaction.annotation.EnableTransactionManagement;
import org.springframework.transaction.annotation.Transactional;
import org.springframework.web.bind.annotation.PostMapping;
import org.springframework.web.bind.annotation.RequestBody;
import org.springframework.web.bind.annotation.RestController;

import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.util.UUID;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/**
 * The {@code @Idempotent} advice must run outside Spring's transaction advice, so that it opens the request's
 * transaction and a {@code @Transactional} handler joins it. These applications enable transaction management
 * themselves: its advisor is then registered before the starter's, so an advice of the same order as the transaction
 * advice ({@link Ordered#LOWEST_PRECEDENCE}) would be sorted inside it, and one ordered after it always is.
 */
@Tag("container")
class TransactionAdviceOrderIntegrationTest {

    private static final TestPostgres.Database DATABASE = TestDatabases.withOrders();

    @SpringBootConfiguration
    @EnableAutoConfiguration
    @EnableTransactionManagement
    @Import(TransfersController.class)
    static class EnablingTransactionsItself {
    }

    @SpringBootConfiguration
    @EnableAutoConfiguration
    @EnableTransactionManagement(order = 0)
    @Import(TransfersController.class)
    static class OrderingTransactionsFirst {
    }

    @SpringBootConfiguration
    @EnableAutoConfiguration
    @EnableTransactionManagement(order = 0)
    @Import(PlainTransfersController.class)
    static class OrderingTransactionsFirstWithoutTransactionalHandlers {
    }

    @RestController
    static class TransfersController {

        private final JdbcClient jdbc;

        TransfersController(JdbcClient jdbc) {
            this.jdbc = jdbc;
        }

        @PostMapping("/advice-order/transfers")
        @Idempotent
        @Transactional
        public String create(@RequestBody String note) {
            long id = jdbc.sql("insert into orders (note) values (?) returning id").param(note)
                    .query(Long.class).single();
            return "transfer " + id;
        }
    }

    /** Its writes join the request's transaction through the service-less JdbcClient, with no transaction advice. */
    @RestController
    static class PlainTransfersController {

        private final JdbcClient jdbc;

        PlainTransfersController(JdbcClient jdbc) {
            this.jdbc = jdbc;
        }

        @PostMapping("/advice-order/transfers")
        @Idempotent
        public String create(@RequestBody String note) {
            long id = jdbc.sql("insert into orders (note) values (?) returning id").param(note)
                    .query(Long.class).single();
            return "transfer " + id;
        }
    }

    @Test
    void aTransactionalHandlerJoinsTheTransactionTheAdviceOpenedWhenTheApplicationEnablesTransactionsItself()
            throws Exception {
        try (ConfigurableApplicationContext context = start(EnablingTransactionsItself.class)) {
            String key = UUID.randomUUID().toString();
            String note = "joined-" + key;

            HttpResponse<String> first = post(context, key, note);
            HttpResponse<String> retry = post(context, key, note);

            assertThat(first.statusCode()).as(first.body()).isEqualTo(200);
            assertThat(retry.statusCode()).isEqualTo(200);
            assertThat(retry.headers().firstValue("Idempotent-Replayed")).hasValue("true");
            assertThat(retry.body()).isEqualTo(first.body());
            assertThat(TestDatabases.rows(DATABASE, note)).isEqualTo(1);
            assertThat(DATABASE.queryString("select status from idempotency_keys where idempotency_key = '" + key
                    + "'")).isEqualTo("SUCCEEDED");
            // the claim, the stored answer and the handler's write: one transaction
            assertThat(DATABASE.queryLong("select count(distinct x) from (select xmin::text as x from orders where note"
                    + " = '" + note + "' union all select xmin::text from idempotency_keys where idempotency_key = '"
                    + key + "') as transactions")).isEqualTo(1);
        }
    }

    @Test
    void transactionAdviceOrderedOutsideTheAdviceOfATransactionalHandlerStopsTheStart() {
        assertThatThrownBy(() -> start(OrderingTransactionsFirst.class).close())
                .hasStackTraceContaining("TransfersController.create(java.lang.String)")
                .hasStackTraceContaining("transaction advice (order 0) runs outside the @Idempotent advice");
    }

    /** So with its controller made only at its first request ({@code spring.main.lazy-initialization}). */
    @Test
    void transactionAdviceOrderedOutsideTheAdviceOfALazyTransactionalHandlerStopsTheStart() {
        assertThatThrownBy(() -> start(OrderingTransactionsFirst.class, "spring.main.lazy-initialization=true").close())
                .hasStackTraceContaining("TransfersController.create(java.lang.String)")
                .hasStackTraceContaining("transaction advice (order 0) runs outside the @Idempotent advice");
    }

    @Test
    void transactionAdviceOrderedFirstIsNoConcernOfAHandlerWithoutTransactional() throws Exception {
        try (ConfigurableApplicationContext context = start(OrderingTransactionsFirstWithoutTransactionalHandlers.class)) {
            String key = UUID.randomUUID().toString();
            String note = "plain-" + key;

            HttpResponse<String> first = post(context, key, note);
            HttpResponse<String> retry = post(context, key, note);

            assertThat(first.statusCode()).as(first.body()).isEqualTo(200);
            assertThat(retry.headers().firstValue("Idempotent-Replayed")).hasValue("true");
            assertThat(TestDatabases.rows(DATABASE, note)).isEqualTo(1);
        }
    }

    private static ConfigurableApplicationContext start(Class<?> application, String... properties) {
        SpringApplicationBuilder builder = new SpringApplicationBuilder(application)
                .web(WebApplicationType.SERVLET).properties("server.port=0").properties(properties);
        DATABASE.springProperties().forEach((name, value) -> builder.properties(name + "=" + value));
        return builder.run();
    }

    private static HttpResponse<String> post(ConfigurableApplicationContext context, String key, String note)
            throws Exception {
        int port = ((WebServerApplicationContext) context).getWebServer().getPort();
        return HttpClient.newHttpClient().send(HttpRequest.newBuilder(
                        URI.create("http://localhost:" + port + "/advice-order/transfers"))
                .header("Content-Type", "text/plain").header("Idempotency-Key", key)
                .POST(HttpRequest.BodyPublishers.ofString(note)).build(), HttpResponse.BodyHandlers.ofString());
    }
}
