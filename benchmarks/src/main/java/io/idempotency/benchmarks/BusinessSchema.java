package io.idempotency.benchmarks;

import org.springframework.beans.factory.InitializingBean;
import org.springframework.jdbc.core.simple.JdbcClient;
import org.springframework.stereotype.Component;

/** Creates the business table in the connection's default schema (the harness gives every run a fresh one). */
@Component
public class BusinessSchema implements InitializingBean {

    private final JdbcClient jdbc;

    public BusinessSchema(JdbcClient jdbc) {
        this.jdbc = jdbc;
    }

    @Override
    public void afterPropertiesSet() {
        jdbc.sql("""
                CREATE TABLE IF NOT EXISTS bench_orders (
                    id          bigserial     PRIMARY KEY,
                    reference   varchar(64)   NOT NULL,
                    customer    varchar(64)   NOT NULL,
                    amount      numeric(12,2) NOT NULL,
                    currency    char(3)       NOT NULL,
                    description varchar(200)  NOT NULL,
                    created_at  timestamptz   NOT NULL DEFAULT now()
                )""").update();
        jdbc.sql("CREATE INDEX IF NOT EXISTS bench_orders_reference_idx ON bench_orders (reference)").update();
    }
}
