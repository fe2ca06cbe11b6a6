package io.idempotency.spring.aot;

import io.idempotency.core.Idempotent;
import io.idempotency.spring.AotProcessingTest.OnlyCreated;
import org.springframework.boot.SpringApplication;
import org.springframework.boot.autoconfigure.SpringBootApplication;
import org.springframework.context.annotation.Bean;
import org.springframework.http.ResponseEntity;
import org.springframework.jdbc.core.simple.JdbcClient;
import org.springframework.stereotype.Service;
import org.springframework.web.bind.annotation.PostMapping;
import org.springframework.web.bind.annotation.RequestBody;
import org.springframework.web.bind.annotation.RestController;
import org.springframework.web.servlet.function.RouterFunction;
import org.springframework.web.servlet.function.RouterFunctions;
import org.springframework.web.servlet.function.ServerResponse;

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

    /** A functional route, whose {@code @Idempotent} method is on a service bean, not on a controller. */
    @Bean
    RouterFunction<ServerResponse> refundRoutes(RefundService refunds) {
        return RouterFunctions.route().POST("/aot/refunds", request -> ServerResponse.status(201)
                .body(Map.of("id", refunds.refund(String.valueOf(request.body(Map.class).get("note")))))).build();
    }

    @Service
    static class RefundService {

        private final JdbcClient jdbc;

        RefundService(JdbcClient jdbc) {
            this.jdbc = jdbc;
        }

        @Idempotent(key = "#body.reference", storagePolicy = OnlyCreated.class)
        public long refund(String note) {
            return jdbc.sql("insert into aot_orders (note) values (?) returning id").param(note)
                    .query(Long.class).single();
        }
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
