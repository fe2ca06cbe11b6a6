package io.idempotency.spring.app;

import io.idempotency.core.Idempotent;
import jakarta.servlet.http.HttpServletResponse;
import org.springframework.http.ResponseEntity;
import org.springframework.jdbc.core.simple.JdbcClient;
import org.springframework.web.bind.annotation.PostMapping;
import org.springframework.web.bind.annotation.RequestBody;
import org.springframework.web.bind.annotation.RequestMapping;
import org.springframework.web.bind.annotation.RequestParam;
import org.springframework.web.bind.annotation.RestController;

import java.io.IOException;
import java.io.OutputStream;
import java.io.PrintWriter;
import java.nio.charset.StandardCharsets;
import java.util.Map;

/** Handlers that drive the servlet response the way low-level code does. */
@RestController
@RequestMapping("/capture")
public class CaptureController {

    private final JdbcClient jdbc;

    public CaptureController(JdbcClient jdbc) {
        this.jdbc = jdbc;
    }

    private long insert(String note, boolean failAtCommit) {
        long id = jdbc.sql("insert into orders (note) values (?) returning id").param(note).query(Long.class).single();
        if (failAtCommit) {
            jdbc.sql("insert into order_audit (order_id) values (?)").param(-id).update();
        }
        return id;
    }

    @PostMapping("/early-hints")
    @Idempotent
    public void earlyHints(@RequestBody OrderController.OrderRequest request, HttpServletResponse response)
            throws IOException {
        response.setHeader("Link", "</style.css>; rel=preload; as=style");
        response.sendError(103); // Tomcat sends 103 Early Hints this way
        long id = insert(request.note(), false);
        response.setStatus(201);
        response.setContentType("text/plain;charset=UTF-8");
        response.getWriter().write("order " + id);
    }

    /**
     * Passes on an answer that an upstream service sent chunked, with the upstream's {@code Transfer-Encoding}, as a
     * handler copying the upstream's headers does; the body it gives is the decoded one.
     */
    @PostMapping("/upstream-chunked")
    @Idempotent
    public ResponseEntity<String> upstreamChunked(@RequestBody OrderController.OrderRequest request) {
        long id = insert(request.note(), false);
        return ResponseEntity.status(201).header("Transfer-Encoding", "chunked").header("Content-Type", "text/plain")
                .body("order " + id);
    }

    @PostMapping("/flushing")
    @Idempotent
    public void flushing(@RequestBody OrderController.OrderRequest request, @RequestParam int size,
                         @RequestParam(defaultValue = "false") boolean failAtCommit,
                         @RequestParam(defaultValue = "-1") long declared,
                         HttpServletResponse response) throws IOException {
        long id = insert(request.note(), failAtCommit);
        response.setStatus(201);
        response.setContentType("text/plain");
        if (declared >= 0) {
            response.setContentLengthLong(declared);
        }
        OutputStream out = response.getOutputStream();
        byte[] chunk = ("order " + id + " ").getBytes(StandardCharsets.UTF_8);
        int written = 0;
        while (written < size) {
            int n = Math.min(chunk.length, size - written);
            out.write(chunk, 0, n);
            written += n;
            if (written % 4096 < chunk.length) {
                out.flush();
                response.flushBuffer();
            }
        }
        out.close();
    }

    @PostMapping("/writer-closed")
    @Idempotent
    public void writerClosed(@RequestBody OrderController.OrderRequest request,
                             @RequestParam(defaultValue = "false") boolean failAtCommit,
                             HttpServletResponse response) throws IOException {
        long id = insert(request.note(), failAtCommit);
        response.setStatus(201);
        response.setContentType("text/plain;charset=UTF-8");
        try (PrintWriter out = response.getWriter()) {
            out.print("order " + id + " \u20ac");
        }
    }

    @PostMapping("/trailers")
    @Idempotent
    public void trailers(@RequestBody OrderController.OrderRequest request,
                         @RequestParam(defaultValue = "false") boolean failAtCommit,
                         HttpServletResponse response) throws IOException {
        long id = insert(request.note(), failAtCommit);
        response.setTrailerFields(() -> Map.of("x-checksum", "order-" + id));
        response.setStatus(201);
        response.setContentType("text/plain");
        response.getOutputStream().write(("order " + id).getBytes(StandardCharsets.UTF_8));
    }

    @PostMapping("/trailers-or-header")
    @Idempotent
    public void trailersOrHeader(@RequestBody OrderController.OrderRequest request, HttpServletResponse response)
            throws IOException {
        long id = insert(request.note(), false);
        try {
            response.setTrailerFields(() -> Map.of("x-checksum", "order-" + id));
        } catch (IllegalStateException e) {
            // the container cannot send trailer fields on this connection (an HTTP/1.0 request): a header instead
            response.setHeader("X-Checksum", "order-" + id);
        }
        response.setStatus(201);
        response.setContentType("text/plain");
        response.getOutputStream().write(("order " + id).getBytes(StandardCharsets.UTF_8));
    }
}
