package io.idempotency.sample.payment;

import org.springframework.boot.SpringApplication;
import org.springframework.boot.autoconfigure.SpringBootApplication;
import org.springframework.boot.context.properties.ConfigurationPropertiesScan;

/**
 * A small payment API whose {@code POST /payments} is made idempotent by the starter.
 *
 * <p>Runs with no configuration at all (an embedded PostgreSQL keeps its data in {@code ./data/postgres}), or on
 * any PostgreSQL through the standard {@code spring.datasource.*} settings. With {@code --sample.chaos.enabled=true}
 * the {@code X-Chaos} request header injects failures and crashes, for demos and for the crash tests.
 */
@SpringBootApplication
@ConfigurationPropertiesScan
public class SamplePaymentApplication {

    /** Starts the application. */
    public static void main(String[] args) {
        SpringApplication.run(SamplePaymentApplication.class, args);
    }
}
