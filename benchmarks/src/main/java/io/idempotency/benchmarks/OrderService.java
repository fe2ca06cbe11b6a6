package io.idempotency.benchmarks;

import io.idempotency.benchmarks.instrument.BenchStats;
import org.springframework.http.ResponseEntity;
import org.springframework.jdbc.core.simple.JdbcClient;
import org.springframework.stereotype.Service;
import org.springframework.transaction.annotation.Transactional;

import java.net.URI;
import java.time.OffsetDateTime;

/** The business work both endpoints share: insert one row, answer 201 with it. */
@Service
public class OrderService {

    private final JdbcClient jdbc;
    private final BenchStats stats;

    public OrderService(JdbcClient jdbc, BenchStats stats) {
        this.jdbc = jdbc;
        this.stats = stats;
    }

    @Transactional
    public ResponseEntity<Order> create(OrderRequest request) {
        stats.handlerRan(request.reference()); // every execution, also one whose transaction is rolled back
        Order order = jdbc.sql("""
                        INSERT INTO bench_orders (reference, customer, amount, currency, description)
                        VALUES (?, ?, ?, ?, ?) RETURNING id, created_at""")
                .params(request.reference(), request.customer(), request.amount(), request.currency(),
                        request.description())
                .query((rs, row) -> {
                    long id = rs.getLong("id");
                    return new Order(id, request.reference(), request.customer(), request.amount(),
                            request.currency(), "ACCEPTED", request.description(),
                            rs.getObject("created_at", OffsetDateTime.class).toString(), "/orders/" + id);
                })
                .single();
        return ResponseEntity.created(URI.create(order.self())).body(order);
    }
}
