package io.idempotency.liquibase.app;

import io.idempotency.core.Idempotent;
import org.springframework.http.HttpStatus;
import org.springframework.http.ResponseEntity;
import org.springframework.jdbc.core.JdbcTemplate;
import org.springframework.transaction.annotation.Transactional;
import org.springframework.web.bind.annotation.PostMapping;
import org.springframework.web.bind.annotation.RequestBody;
import org.springframework.web.bind.annotation.RestController;

import java.util.Map;

/** Writes an order into the table the application's changelog made. */
@RestController
public class OrderController {

    public record OrderRequest(String reference) {
    }

    private final JdbcTemplate jdbc;

    public OrderController(JdbcTemplate jdbc) {
        this.jdbc = jdbc;
    }

    @PostMapping("/orders")
    @Idempotent
    @Transactional
    public ResponseEntity<Map<String, Object>> create(@RequestBody OrderRequest request) {
        Long id = jdbc.queryForObject("insert into orders (reference) values (?) returning id", Long.class,
                request.reference());
        return ResponseEntity.status(HttpStatus.CREATED).body(Map.of("id", id, "reference", request.reference()));
    }
}
