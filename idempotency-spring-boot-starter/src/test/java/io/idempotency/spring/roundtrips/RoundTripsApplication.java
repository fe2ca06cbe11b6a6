package io.idempotency.spring.roundtrips;

import io.idempotency.core.Idempotent;
import org.springframework.boot.autoconfigure.SpringBootApplication;
import org.springframework.http.ResponseEntity;
import org.springframework.jdbc.core.simple.JdbcClient;
import org.springframework.transaction.annotation.Transactional;
import org.springframework.web.bind.annotation.PostMapping;
import org.springframework.web.bind.annotation.RequestBody;
import org.springframework.web.bind.annotation.RestController;

import java.util.Map;

/**
 * One business write behind two endpoints: a plain transactional one, and the same with {@code @Idempotent}, so that
 * what the library adds to a request can be told apart ({@code RoundTripsIntegrationTest}).
 */
@SpringBootApplication
public class RoundTripsApplication {

    record Item(String note) {
    }

    @RestController
    static class ItemController {

        private final JdbcClient jdbc;

        ItemController(JdbcClient jdbc) {
            this.jdbc = jdbc;
        }

        @PostMapping("/plain-items")
        @Transactional
        public ResponseEntity<Map<String, Object>> plain(@RequestBody Item item) {
            return ResponseEntity.status(201).body(Map.of("id", insert(item)));
        }

        @PostMapping("/items")
        @Idempotent
        public ResponseEntity<Map<String, Object>> idempotent(@RequestBody Item item) {
            return ResponseEntity.status(201).body(Map.of("id", insert(item)));
        }

        private long insert(Item item) {
            return jdbc.sql("insert into items (note) values (?) returning id").param(item.note()).query(Long.class)
                    .single();
        }
    }
}
