package io.idempotency.spring.war;

import io.idempotency.testkit.TestPostgres;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;

import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.util.LinkedHashMap;
import java.util.Map;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * The starter in a war deployed to a servlet container of its own (here a Tomcat started by the test, with Spring Boot
 * started by the container through {@code SpringBootServletInitializer}, which registers its {@code ErrorPageFilter}):
 * the filter and the advice work as on the embedded server, the library's own answers and a handler's failure pass
 * the error page filter as they are, and the starter reads no setting of a server it does not run.
 */
class WarDeploymentIntegrationTest {

    private StandaloneTomcat tomcat;

    @AfterEach
    void stop() throws Exception {
        if (tomcat != null) {
            tomcat.close();
        }
    }

    @Test
    void anIdempotentEndpointOfAWarRunsOnceAndReplaysItsAnswer() throws Exception {
        TestPostgres.Database database = withOrders();
        start(database);

        HttpResponse<String> first = post("/shop/payments", "war-1", "{\"note\":\"war-1\"}");
        HttpResponse<String> replayed = post("/shop/payments", "war-1", "{\"note\":\"war-1\"}");

        assertThat(first.statusCode()).isEqualTo(201);
        assertThat(first.headers().firstValue("Location")).hasValue("/payments/1");
        assertThat(first.headers().firstValue("Idempotent-Replayed")).isEmpty();
        assertThat(replayed.statusCode()).isEqualTo(201);
        assertThat(replayed.headers().firstValue("Idempotent-Replayed")).hasValue("true");
        assertThat(replayed.body()).isEqualTo(first.body());
        assertThat(database.queryLong("select count(*) from orders where note = 'war-1'")).isEqualTo(1);
        assertThat(database.queryString("select scope from idempotency_keys where idempotency_key = 'war-1'"))
                .as("the route template, without the context path").isEqualTo("POST /payments");
    }

    @Test
    void theLibrarysRefusalsPassTheErrorPageFilterAsProblemDetails() throws Exception {
        TestPostgres.Database database = withOrders();
        start(database);

        HttpResponse<String> missing = post("/shop/payments", null, "{\"note\":\"none\"}");
        post("/shop/payments", "war-2", "{\"note\":\"war-2\"}");
        HttpResponse<String> mismatch = post("/shop/payments", "war-2", "{\"note\":\"other\"}");

        assertThat(missing.statusCode()).isEqualTo(400);
        assertThat(missing.headers().firstValue("Content-Type")).hasValue("application/problem+json");
        assertThat(missing.body()).contains("idempotency-key-missing");
        assertThat(mismatch.statusCode()).isEqualTo(422);
        assertThat(mismatch.headers().firstValue("Content-Type")).hasValue("application/problem+json");
        assertThat(mismatch.body()).contains("idempotency-key-mismatch");
        assertThat(database.queryLong("select count(*) from orders")).isEqualTo(1);
    }

    @Test
    void aHandlerThatThrowsIsRolledBackAndAnsweredByTheErrorPageAndItsRetryRunsAgain() throws Exception {
        TestPostgres.Database database = withOrders();
        start(database);

        HttpResponse<String> failed = post("/shop/payments/failing", "war-3", "{\"note\":\"war-3\"}");
        HttpResponse<String> retried = post("/shop/payments/failing", "war-3", "{\"note\":\"war-3\"}");

        assertThat(failed.statusCode()).isEqualTo(500);
        assertThat(failed.body()).as("Spring Boot's error answer, rendered through the ErrorPageFilter")
                .contains("\"status\":500");
        assertThat(retried.statusCode()).isEqualTo(500);
        assertThat(retried.headers().firstValue("Idempotent-Replayed")).isEmpty();
        assertThat(database.queryLong("select count(*) from orders")).as("rolled back").isZero();
        assertThat(database.queryLong("select count(*) from idempotency_keys")).as("the key released").isZero();
    }

    @Test
    void aSendErrorOfTheHandlerIsRolledBackAndRenderedByTheErrorPage() throws Exception {
        TestPostgres.Database database = withOrders();
        start(database);

        HttpResponse<String> first = post("/shop/payments/refused", "war-4", "{\"note\":\"war-4\"}");
        HttpResponse<String> retried = post("/shop/payments/refused", "war-4", "{\"note\":\"war-4\"}");

        assertThat(first.statusCode()).isEqualTo(402);
        assertThat(first.body()).as("Spring Boot's error answer, rendered through the ErrorPageFilter")
                .contains("\"status\":402").contains("\"path\":\"/shop/payments/refused\"");
        assertThat(retried.statusCode()).isEqualTo(402);
        assertThat(retried.headers().firstValue("Idempotent-Replayed")).as("ran again").isEmpty();
        assertThat(database.queryLong("select count(*) from orders")).as("rolled back").isZero();
        assertThat(database.queryLong("select count(*) from idempotency_keys")).as("the key released").isZero();
    }

    @Test
    void aHandlerThatStartsAsyncProcessingIsRolledBackThroughTheErrorPageFilter() throws Exception {
        TestPostgres.Database database = withOrders();
        start(database);

        HttpResponse<String> answer = post("/shop/payments/async", "war-7", "{\"note\":\"war-7\"}");

        assertThat(answer.statusCode()).isEqualTo(500);
        assertThat(answer.headers().firstValue("Content-Type")).hasValue("application/problem+json");
        assertThat(answer.body()).contains("idempotency-commit-failed");
        assertThat(answer.headers().firstValue("Connection")).hasValue("close");
        assertThat(database.queryLong("select count(*) from orders")).as("rolled back").isZero();
        assertThat(database.queryLong("select count(*) from idempotency_keys")).isZero();
        assertThat(post("/shop/payments", "war-8", "{\"note\":\"war-8\"}").statusCode())
                .as("the application serves on").isEqualTo(201);
    }

    /**
     * A container of its own sends no header section larger than its limit (8 KB by default on Tomcat and Jetty), and
     * its limit is not the application's {@code server.*} setting, which Spring Boot applies only to the server it
     * makes. An answer whose headers take more would be committed and never reach the client, nor would any replay.
     */
    @Test
    void anAnswerWhoseHeadersTheContainerWouldNotSendIsRolledBackNotStored() throws Exception {
        TestPostgres.Database database = withOrders();
        start(database, "server.tomcat.max-http-response-header-size=64KB"); // not this container's limit

        HttpResponse<String> first = post("/shop/payments", "war-5", "{\"note\":\"war-5\"}", 8100);
        HttpResponse<String> retried = post("/shop/payments", "war-5", "{\"note\":\"war-5\"}", 8100);

        assertThat(first.statusCode()).isEqualTo(500);
        assertThat(first.headers().firstValue("Content-Type")).hasValue("application/problem+json");
        assertThat(first.body()).contains("idempotency-response-too-large");
        assertThat(retried.body()).as("ran again, and refused again").contains("idempotency-response-too-large");
        assertThat(database.queryLong("select count(*) from orders")).as("rolled back").isZero();
        assertThat(database.queryLong("select count(*) from idempotency_keys")).isZero();
        HttpResponse<String> smaller = post("/shop/payments", "war-6", "{\"note\":\"war-6\"}", 7000);
        assertThat(smaller.statusCode()).isEqualTo(201);
        assertThat(post("/shop/payments", "war-6", "{\"note\":\"war-6\"}", 7000).headers()
                .firstValue("Idempotent-Replayed")).hasValue("true");
    }

    static TestPostgres.Database withOrders() {
        TestPostgres.Database database = TestPostgres.newDatabase();
        database.queryString("create table orders (id bigserial primary key, note text not null)");
        return database;
    }

    /** The context's parameters a deployment descriptor would give the application: its database, and more. */
    static Map<String, String> parameters(TestPostgres.Database database, String... more) {
        Map<String, String> parameters = new LinkedHashMap<>(database.springProperties());
        for (String setting : more) {
            int equals = setting.indexOf('=');
            parameters.put(setting.substring(0, equals), setting.substring(equals + 1));
        }
        return parameters;
    }

    private void start(TestPostgres.Database database, String... settings) throws Exception {
        tomcat = new StandaloneTomcat();
        tomcat.deploy("/shop", WarApplication.class, parameters(database, settings));
        tomcat.start();
    }

    private HttpResponse<String> post(String path, String key, String body) throws Exception {
        return post(path, key, body, 0);
    }

    /** With {@code pad} bytes of a header the handler answers. */
    private HttpResponse<String> post(String path, String key, String body, int pad) throws Exception {
        HttpRequest.Builder request = HttpRequest.newBuilder(URI.create("http://localhost:" + tomcat.port() + path))
                .version(HttpClient.Version.HTTP_1_1).header("Content-Type", "application/json")
                .POST(HttpRequest.BodyPublishers.ofString(body));
        if (key != null) {
            request.header("Idempotency-Key", key);
        }
        if (pad > 0) {
            request.header("X-Pad", Integer.toString(pad));
        }
        return HttpClient.newHttpClient().send(request.build(), HttpResponse.BodyHandlers.ofString());
    }
}
