package io.idempotency.spring.app;

import io.idempotency.core.Idempotent;
import org.springframework.core.io.ByteArrayResource;
import org.springframework.core.io.Resource;
import org.springframework.jdbc.core.simple.JdbcClient;
import org.springframework.web.bind.annotation.PostMapping;
import org.springframework.web.bind.annotation.RequestBody;
import org.springframework.web.bind.annotation.RequestMapping;
import org.springframework.web.bind.annotation.RestController;

import java.nio.charset.StandardCharsets;

/** Handlers answering in the many shapes a Spring MVC handler can give its answer. */
@RestController
@RequestMapping("/shapes")
public class ResponseShapesController {

    private final JdbcClient jdbc;

    public ResponseShapesController(JdbcClient jdbc) {
        this.jdbc = jdbc;
    }

    private long insert(String note) {
        return jdbc.sql("insert into orders (note) values (?) returning id").param(note).query(Long.class).single();
    }

    @PostMapping(path = "/resource", produces = "application/octet-stream")
    @Idempotent
    public Resource resource(@RequestBody OrderController.OrderRequest request) {
        return new ByteArrayResource(("receipt of order " + insert(request.note()) + " ").repeat(20)
                .getBytes(StandardCharsets.US_ASCII));
    }
}
