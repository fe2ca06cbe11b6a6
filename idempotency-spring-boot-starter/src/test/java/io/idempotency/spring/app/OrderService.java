package io.idempotency.spring.app;

import io.idempotency.core.Idempotent;
import org.springframework.jdbc.core.simple.JdbcClient;
import org.springframework.stereotype.Service;

/** A misplaced {@code @Idempotent}: on a service method the controller calls, not on the controller method. */
@Service
public class OrderService {

    private final JdbcClient jdbc;

    public OrderService(JdbcClient jdbc) {
        this.jdbc = jdbc;
    }

    @Idempotent
    public Long insert(String note) {
        return jdbc.sql("insert into orders (note) values (?) returning id").param(note).query(Long.class).single();
    }
}
