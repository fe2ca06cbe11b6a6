package io.idempotency.benchmarks;

import org.springframework.boot.SpringApplication;
import org.springframework.boot.autoconfigure.SpringBootApplication;

/**
 * The application under test: one business endpoint twice, {@code POST /plain} ({@code @Transactional}) and
 * {@code POST /idempotent} (the same handler body with {@code @Idempotent}), plus the instruments of
 * {@code io.idempotency.benchmarks.instrument}. Started by the harness as a JVM of its own; see
 * {@code benchmarks/run}.
 */
@SpringBootApplication
public class BenchApplication {

    public static void main(String[] args) {
        SpringApplication.run(BenchApplication.class, args);
    }
}
