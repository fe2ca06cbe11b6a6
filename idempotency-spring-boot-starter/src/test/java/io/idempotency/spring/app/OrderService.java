package io.idempotency.spring.app;

import io.idempotency.core.Idempotent;
import org.springframework.jdbc.core.simple.JdbcClient;
import org.springframework.stereotype.Service;
import org.springframework.transaction.annotation.Transactional;

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

    /** Keyed by a variable of the route of the handler function that calls it: a reference taken from the path. */
    @Idempotent(key = "#path.reference")
    public Long insertByReference(String note) {
        return insert(note);
    }

    /** Writes a row and refuses the request, for a handler function that answers the refusal itself. */
    @Idempotent
    public Long insertAndRefuse(String note) {
        jdbc.sql("insert into orders (note) values (?)").param(note).update();
        throw new IllegalArgumentException("refused: " + note);
    }

    /** Idempotent for DELETE only, which no controller method is: a functional route calls it. */
    @Idempotent(methods = "DELETE")
    public Long cancel(long id) {
        return jdbc.sql("insert into orders (note) values (?) returning id").param("cancel-" + id).query(Long.class)
                .single();
    }

    /** Writes a row and fails: joined to its caller's transaction, it leaves that transaction able only to roll back. */
    @Transactional
    public void insertAndFail(String note) {
        jdbc.sql("insert into orders (note) values (?)").param(note).update();
        throw new IllegalStateException("refused");
    }
}
