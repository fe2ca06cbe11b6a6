package io.idempotency.benchmarks;

import org.springframework.beans.factory.InitializingBean;
import org.springframework.core.io.ClassPathResource;
import org.springframework.jdbc.core.simple.JdbcClient;
import org.springframework.stereotype.Component;

import java.io.IOException;
import java.nio.charset.StandardCharsets;

/**
 * Creates the business table ({@code bench-orders.sql}) in the connection's default schema (the harness gives every
 * run a fresh one).
 */
@Component
public class BusinessSchema implements InitializingBean {

    private final JdbcClient jdbc;

    public BusinessSchema(JdbcClient jdbc) {
        this.jdbc = jdbc;
    }

    @Override
    public void afterPropertiesSet() throws IOException {
        String script = new ClassPathResource("bench-orders.sql").getContentAsString(StandardCharsets.UTF_8);
        for (String statement : script.replaceAll("(?m)^--.*$", "").split(";")) {
            if (!statement.isBlank()) {
                jdbc.sql(statement).update();
            }
        }
    }
}
