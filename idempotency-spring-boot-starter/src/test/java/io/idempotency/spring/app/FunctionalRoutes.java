package io.idempotency.spring.app;

import org.springframework.context.annotation.Bean;
import org.springframework.context.annotation.Configuration;
import org.springframework.jdbc.core.simple.JdbcClient;
import org.springframework.web.servlet.function.RouterFunction;
import org.springframework.web.servlet.function.RouterFunctions;
import org.springframework.web.servlet.function.ServerResponse;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;

/**
 * Functional endpoints, which have no controller method: the {@code @Idempotent} service method a handler function
 * calls first is taken as its handler, and what the function does after it (a second {@code @Idempotent} call, the
 * same method called again, a write of its own) runs inside that request.
 */
@Configuration(proxyBeanMethods = false)
public class FunctionalRoutes {

    /** A body of several notes. */
    public record Notes(List<String> notes) {
    }

    @Bean
    RouterFunction<ServerResponse> functionalOrders(OrderService service, JdbcClient jdbc) {
        return RouterFunctions.route()
                .POST("/functional/two-orders", request -> {
                    String note = request.body(OrderController.OrderRequest.class).note();
                    Long first = service.insert(note);
                    Long second = service.insertOptionally(note);
                    return ServerResponse.status(201).body(Map.of("first", String.valueOf(first),
                            "second", String.valueOf(second)));
                })
                .POST("/functional/each-order", request -> {
                    // the same @Idempotent method once per note: every call is part of the one request
                    List<Long> ids = new ArrayList<>();
                    for (String note : request.body(Notes.class).notes()) {
                        ids.add(service.insert(note));
                    }
                    return ServerResponse.status(201).body(Map.of("ids", ids));
                })
                .POST("/functional/order-with-audit", request -> {
                    // uses what the @Idempotent method returned, and writes after it
                    String note = request.body(OrderController.OrderRequest.class).note();
                    long id = service.insert(note);
                    jdbc.sql("insert into orders (note) values (?)").param(note + "-audit").update();
                    return ServerResponse.status(201).body(Map.of("id", id));
                })
                .DELETE("/functional/orders/{id}", request -> ServerResponse.ok().body(Map.of("cancelled",
                        service.cancel(Long.parseLong(request.pathVariable("id"))))))
                .POST("/functional/async-order", request -> {
                    // an answer Spring MVC writes on another thread, which no startup check can see in a function;
                    // it is not there yet when the function returns (a future done by then is written at once)
                    service.insert(request.body(OrderController.OrderRequest.class).note());
                    return ServerResponse.async(CompletableFuture.supplyAsync(() -> ServerResponse.ok().body("late"),
                            CompletableFuture.delayedExecutor(1, TimeUnit.SECONDS)));
                })
                .POST("/functional/completed-async-order", request -> {
                    // an async answer whose result is there when the function returns: Spring MVC writes it at once
                    service.insert(request.body(OrderController.OrderRequest.class).note());
                    return ServerResponse.async(CompletableFuture.completedFuture(ServerResponse.ok().body("late")));
                })
                .POST("/functional/refused-order", request -> {
                    // the function answers the refusal of the @Idempotent method itself: no exception reaches Spring
                    // MVC's exception handling, nor an error page
                    try {
                        return ServerResponse.status(201).body(Map.of("id",
                                service.insertAndRefuse(request.body(OrderController.OrderRequest.class).note())));
                    } catch (IllegalArgumentException e) {
                        return ServerResponse.badRequest().body(Map.of("refused", e.getMessage()));
                    }
                })
                .POST("/functional/by-reference/{reference}", request -> ServerResponse.status(201).body(Map.of(
                        "id", service.insertByReference(request.body(OrderController.OrderRequest.class).note()))))
                .path("/functional/groups/{group}", group -> group.POST("/by-reference/{reference}", request ->
                        ServerResponse.status(201).body(Map.of("id", service.insertByReference(
                                request.body(OrderController.OrderRequest.class).note())))))
                .POST("/functional/notes/{note}", request -> {
                    // the body is read only after the @Idempotent call: it was fingerprinted all the same
                    Long id = service.insert(request.pathVariable("note"));
                    return ServerResponse.status(201).body(Map.of("id", id, "body", request.body(String.class)));
                })
                .build();
    }
}
