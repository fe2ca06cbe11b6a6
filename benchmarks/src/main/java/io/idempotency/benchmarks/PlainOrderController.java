package io.idempotency.benchmarks;

import org.springframework.http.ResponseEntity;
import org.springframework.web.bind.annotation.PostMapping;
import org.springframework.web.bind.annotation.RequestBody;
import org.springframework.web.bind.annotation.RestController;

/** The baseline: the business work in its own {@code @Transactional}. */
@RestController
public class PlainOrderController {

    private final OrderService orders;

    public PlainOrderController(OrderService orders) {
        this.orders = orders;
    }

    @PostMapping("/plain")
    public ResponseEntity<Order> create(@RequestBody OrderRequest request) {
        return orders.create(request);
    }
}
