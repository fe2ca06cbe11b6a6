package io.idempotency.benchmarks;

import io.idempotency.core.Idempotent;
import org.springframework.http.ResponseEntity;
import org.springframework.web.bind.annotation.PostMapping;
import org.springframework.web.bind.annotation.RequestBody;
import org.springframework.web.bind.annotation.RestController;

/** The same handler as {@link PlainOrderController}, with {@code @Idempotent}: its transaction joins the claim's. */
@RestController
public class IdempotentOrderController {

    private final OrderService orders;

    public IdempotentOrderController(OrderService orders) {
        this.orders = orders;
    }

    @PostMapping("/idempotent")
    @Idempotent
    public ResponseEntity<Order> create(@RequestBody OrderRequest request) {
        return orders.create(request);
    }
}
