package io.idempotency.jpa;

import io.idempotency.jpa.twotm.TwoTransactionManagersApplication;
import io.idempotency.testkit.TestPostgres;
import org.junit.jupiter.api.Test;
import org.springframework.boot.test.context.SpringBootTest;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;

import java.net.http.HttpResponse;
import java.util.UUID;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * A JPA application with a second, JDBC transaction manager on the same DataSource: a handler naming JPA's keeps its
 * JDBC writes in the request's transaction, so a request rolled back keeps neither them nor the claim. (A handler
 * naming the JDBC one stops the start: {@link JpaTransactionManagerCheckTest}.)
 */
@SpringBootTest(classes = TwoTransactionManagersApplication.class,
        webEnvironment = SpringBootTest.WebEnvironment.RANDOM_PORT)
class TwoTransactionManagersIntegrationTest extends JpaHttpTest {

    static final TestPostgres.Database DATABASE = JpaContexts.withPurchases();

    @Override
    TestPostgres.Database database() {
        return DATABASE;
    }

    @DynamicPropertySource
    static void database(DynamicPropertyRegistry registry) {
        JpaContexts.register(registry, DATABASE);
    }

    @Test
    void aRequestRolledBackKeepsNeitherTheHandlersJdbcWritesNorTheClaim() throws Exception {
        String key = UUID.randomUUID().toString();
        String reference = "jdbc-" + key;
        String body = "{\"reference\":\"" + reference + "\"}";

        HttpResponse<String> answer = post("/purchases", key, body);

        assertThat(answer.statusCode()).isEqualTo(503);
        assertThat(record(key)).isNull();
        assertThat(purchases(reference)).isZero();
        assertThat(post("/purchases", key, body).statusCode()).isEqualTo(503); // runs again, as nothing was kept
        assertThat(purchases(reference)).isZero();
    }
}
