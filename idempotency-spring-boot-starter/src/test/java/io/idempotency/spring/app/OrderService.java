package io.idempotency.spring.app;

import io.idempotency.core.Idempotent;
import org.springframework.jdbc.core.simple.JdbcClient;
import org.springframework.stereotype.Service;

/**
 * {@code @Idempotent} on service methods a controller calls: misplaced ({@link #insert}) unless the handler itself
 * is idempotent ({@link #insertOptionally}).
 */
@Service
public class OrderService {

    private final JdbcClient jdbc;

    public OrderService(JdbcClient jdbc) {
        this.jdbc = jdbc;
    }

    /** Nested in an optional-key handler that got no key, it runs as it is. */
    @Idempotent(keyRequired = false)
    public Long insertOptionally(String note) {
        return insert(note);
    }

    @Idempotent
    public Long insert(String note) {
        return jdbc.sql("insert into orders (note) values (?) returning id").param(note).query(Long.class).single();
    }
}
