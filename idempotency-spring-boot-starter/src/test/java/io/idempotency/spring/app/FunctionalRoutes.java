package io.idempotency.spring.app;

import org.springframework.context.annotation.Bean;
import org.springframework.context.annotation.Configuration;
import org.springframework.web.servlet.function.RouterFunction;
import org.springframework.web.servlet.function.RouterFunctions;
import org.springframework.web.servlet.function.ServerResponse;

import java.util.Map;

/**
 * A functional endpoint, which has no controller method: the {@code @Idempotent} service method it calls first is
 * taken as its handler, and a second one it calls runs inside that request.
 */
@Configuration(proxyBeanMethods = false)
public class FunctionalRoutes {

    @Bean
    RouterFunction<ServerResponse> functionalOrders(OrderService service) {
        return RouterFunctions.route()
                .POST("/functional/two-orders", request -> {
                    String note = request.body(OrderController.OrderRequest.class).note();
                    Long first = service.insert(note);
                    Long second = service.insertOptionally(note);
                    return ServerResponse.status(201).body(Map.of("first", String.valueOf(first),
                            "second", String.valueOf(second)));
                })
                .build();
    }
}
