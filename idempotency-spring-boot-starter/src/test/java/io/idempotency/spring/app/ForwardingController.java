package io.idempotency.spring.app;

import org.springframework.stereotype.Controller;
import org.springframework.web.bind.annotation.PostMapping;

/** An old route that forwards to the idempotent endpoint: the container would end the response inside the forward. */
@Controller
public class ForwardingController {

    @PostMapping("/legacy/orders")
    public String legacyOrders() {
        return "forward:/orders";
    }
}
