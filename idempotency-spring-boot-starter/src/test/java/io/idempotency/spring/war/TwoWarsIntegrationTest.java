package io.idempotency.spring.war;

import io.idempotency.testkit.TestPostgres;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;

import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * Two wars with the starter in one container, on one database: each is an application of its own (its own context,
 * engine and sweeper), and their default scopes, the route template without the context path, are alike for alike
 * routes. Sharing one table, a key one of them used is another request to the other (422), never the other's answer;
 * each with a table of its own, their keys are independent.
 */
class TwoWarsIntegrationTest {

    private StandaloneTomcat tomcat;

    @AfterEach
    void stop() throws Exception {
        if (tomcat != null) {
            tomcat.close();
        }
    }

    @Test
    void twoWarsSharingOneTableNeverReplayEachOthersAnswersAndRefuseEachOthersKeys() throws Exception {
        TestPostgres.Database database = WarDeploymentIntegrationTest.withOrders();
        tomcat = new StandaloneTomcat();
        tomcat.deploy("/shop", WarApplication.class, WarDeploymentIntegrationTest.parameters(database));
        tomcat.deploy("/billing", WarApplication.class, WarDeploymentIntegrationTest.parameters(database));
        tomcat.start();

        HttpResponse<String> shop = post("/shop/payments", "order-42");
        HttpResponse<String> billing = post("/billing/payments", "order-42");
        HttpResponse<String> shopAgain = post("/shop/payments", "order-42");
        HttpResponse<String> billingOwn = post("/billing/payments", "invoice-42");
        HttpResponse<String> billingOwnAgain = post("/billing/payments", "invoice-42");

        assertThat(shop.statusCode()).isEqualTo(201);
        assertThat(billing.statusCode()).as("the other war's key: another request under one scope").isEqualTo(422);
        assertThat(billing.body()).contains("idempotency-key-mismatch");
        assertThat(billing.headers().firstValue("Idempotent-Replayed")).isEmpty();
        assertThat(shopAgain.headers().firstValue("Idempotent-Replayed")).hasValue("true");
        assertThat(shopAgain.body()).isEqualTo(shop.body());
        assertThat(billingOwn.statusCode()).isEqualTo(201);
        assertThat(billingOwnAgain.headers().firstValue("Idempotent-Replayed")).hasValue("true");
        assertThat(billingOwnAgain.body()).isEqualTo(billingOwn.body());
        assertThat(database.queryLong("select count(*) from orders")).isEqualTo(2);
        assertThat(database.queryLong("select count(*) from idempotency_keys")).isEqualTo(2);
    }

    @Test
    void twoWarsWithATableEachUseTheSameKeyIndependently() throws Exception {
        TestPostgres.Database database = WarDeploymentIntegrationTest.withOrders();
        tomcat = new StandaloneTomcat();
        tomcat.deploy("/shop", WarApplication.class, WarDeploymentIntegrationTest.parameters(database));
        tomcat.deploy("/billing", WarApplication.class, WarDeploymentIntegrationTest.parameters(database,
                "idempotency.jdbc.table-name=billing_idempotency_keys"));
        tomcat.start();

        HttpResponse<String> shop = post("/shop/payments", "order-43");
        HttpResponse<String> billing = post("/billing/payments", "order-43");
        HttpResponse<String> billingAgain = post("/billing/payments", "order-43");

        assertThat(shop.statusCode()).isEqualTo(201);
        assertThat(billing.statusCode()).isEqualTo(201);
        assertThat(billing.headers().firstValue("Idempotent-Replayed")).isEmpty();
        assertThat(billingAgain.headers().firstValue("Idempotent-Replayed")).hasValue("true");
        assertThat(database.queryLong("select count(*) from orders")).isEqualTo(2);
        assertThat(database.queryLong("select count(*) from billing_idempotency_keys")).isEqualTo(1);
    }

    private HttpResponse<String> post(String path, String key) throws Exception {
        return HttpClient.newHttpClient().send(
                HttpRequest.newBuilder(URI.create("http://localhost:" + tomcat.port() + path))
                        .version(HttpClient.Version.HTTP_1_1).header("Content-Type", "application/json")
                        .header("Idempotency-Key", key)
                        .POST(HttpRequest.BodyPublishers.ofString("{\"note\":\"" + key + "\"}")).build(),
                HttpResponse.BodyHandlers.ofString());
    }
}
