package io.idempotency.spring.aot;

import io.idempotency.core.Idempotent;
import org.springframework.boot.SpringApplication;
import org.springframework.boot.autoconfigure.SpringBootApplication;
import org.springframework.http.ResponseEntity;
import org.springframework.jdbc.core.simple.JdbcClient;
import org.springframework.web.bind.annotation.PostMapping;
import org.springframework.web.bind.annotation.RequestBody;
import org.springframework.web.bind.annotation.RestController;

import java.net.URI;
import java.util.Map;

/**
 * An application using the starter, run in a JVM of its own: after Spring's ahead-of-time processing
 * ({@link AotProcessedApplicationTest}), and as it is ({@link MockitoOnTheClassPathTest}).
 */
@SpringBootApplication
public class AotApplication {

    public static void main(String[] args) {
        SpringApplication.run(AotApplication.class, args);
    }

    @RestController
    static class OrderController {

        private final JdbcClient jdbc;

        OrderController(JdbcClient jdbc) {
            this.jdbc = jdbc;
        }

        @Idempotent
        @PostMapping("/aot/orders")
        ResponseEntity<Map<String, Object>> create(@RequestBody Map<String, Object> order) {
            long id = jdbc.sql("insert into aot_orders (note) values (?) returning id")
                    .param(String.valueOf(order.get("note"))).query(Long.class).single();
            return ResponseEntity.created(URI.create("/aot/orders/" + id)).body(Map.of("id", id));
        }
    }
}
