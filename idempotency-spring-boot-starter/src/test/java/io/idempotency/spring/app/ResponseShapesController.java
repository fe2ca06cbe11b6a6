package io.idempotency.spring.app;

import io.idempotency.core.Idempotent;
import jakarta.servlet.http.HttpServletRequest;
import jakarta.servlet.http.HttpServletResponse;
import org.springframework.core.io.ByteArrayResource;
import org.springframework.core.io.Resource;
import org.springframework.http.HttpEntity;
import org.springframework.http.HttpHeaders;
import org.springframework.http.HttpStatus;
import org.springframework.http.ResponseEntity;
import org.springframework.jdbc.core.simple.JdbcClient;
import org.springframework.web.bind.annotation.PostMapping;
import org.springframework.web.bind.annotation.RequestBody;
import org.springframework.web.bind.annotation.RequestMapping;
import org.springframework.web.bind.annotation.RequestParam;
import org.springframework.web.bind.annotation.ResponseStatus;
import org.springframework.web.bind.annotation.RestController;

import java.io.IOException;
import java.net.URI;
import java.nio.charset.StandardCharsets;
import java.util.Collections;
import java.util.Locale;

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

    /** Thrown after the handler wrote; Spring MVC answers it with the status it names, through the error page. */
    @ResponseStatus(HttpStatus.UNPROCESSABLE_CONTENT)
    public static class NoteRejected extends RuntimeException {
        NoteRejected() {
            super("note rejected");
        }
    }

    @PostMapping(path = "/resource", produces = "application/octet-stream")
    @Idempotent
    public Resource resource(@RequestBody OrderController.OrderRequest request) {
        return new ByteArrayResource(("receipt of order " + insert(request.note()) + " ").repeat(20)
                .getBytes(StandardCharsets.US_ASCII));
    }

    /** The same without {@code @Idempotent}. */
    @PostMapping(path = "/resource/unguarded", produces = "application/octet-stream")
    public Resource resourceUnguarded(@RequestBody OrderController.OrderRequest request) {
        return resource(request);
    }

    /**
     * Answers with what its body sees of the headers asking for a part of the answer, through each way the request
     * offers them: a handler that answered a part itself would store that part for every retry. (An argument is
     * resolved before the answer is held, and sees them: docs/how-it-works.md.)
     */
    @PostMapping("/range-seen")
    @Idempotent
    public String rangeSeen(@RequestBody OrderController.OrderRequest request, HttpServletRequest servletRequest) {
        insert(request.note());
        return "header=" + servletRequest.getHeader("Range")
                + " if-range=" + servletRequest.getHeader("If-Range")
                + " headers=" + Collections.list(servletRequest.getHeaders("Range"))
                + Collections.list(servletRequest.getHeaders("If-Range"))
                + " names=" + Collections.list(servletRequest.getHeaderNames()).stream()
                        .filter(name -> name.toLowerCase(Locale.ROOT).contains("range")).toList();
    }

    /**
     * A text body under a status whose answer has none (204, 205): Spring MVC's converter sets its length as a header,
     * then writes it.
     */
    @PostMapping("/no-content-text")
    @Idempotent
    public ResponseEntity<String> noContentText(@RequestBody OrderController.OrderRequest request,
                                                @RequestParam int status) {
        return ResponseEntity.status(status).body("order " + insert(request.note()));
    }

    /** Bytes in the content type given, which names their charset, written through the output stream. */
    @PostMapping("/typed")
    @Idempotent
    public void typed(@RequestBody OrderController.OrderRequest request, @RequestParam String type,
                      HttpServletResponse response) throws IOException {
        long id = insert(request.note());
        response.setContentType(type);
        response.getOutputStream().write(("order " + id).getBytes(StandardCharsets.UTF_16));
    }

    /** {@link #typed} on an endpoint that is not idempotent: what the container sends alone. */
    @PostMapping("/typed/unguarded")
    public void typedUnguarded(@RequestBody OrderController.OrderRequest request, @RequestParam String type,
                               HttpServletResponse response) throws IOException {
        typed(request, type, response);
    }

    @PostMapping(path = "/bytes", produces = "application/pdf")
    @Idempotent
    public byte[] bytes(@RequestBody OrderController.OrderRequest request) {
        return ("%PDF order " + insert(request.note())).getBytes(StandardCharsets.US_ASCII);
    }

    @PostMapping(path = "/text", produces = "text/plain;charset=UTF-8")
    @Idempotent
    public String text(@RequestBody OrderController.OrderRequest request) {
        return "order " + insert(request.note()) + " \u20ac";
    }

    @PostMapping("/created")
    @Idempotent
    public ResponseEntity<Void> created(@RequestBody OrderController.OrderRequest request) {
        return ResponseEntity.created(URI.create("/orders/" + insert(request.note()))).build();
    }

    @PostMapping("/entity")
    @Idempotent
    public HttpEntity<String> entity(@RequestBody OrderController.OrderRequest request) {
        HttpHeaders headers = new HttpHeaders();
        headers.setContentType(org.springframework.http.MediaType.TEXT_PLAIN);
        return new HttpEntity<>("order " + insert(request.note()), headers);
    }

    /** Answers 201 with {@code count} {@code Link} headers, as a handler listing what a request created would. */
    @PostMapping("/links")
    @Idempotent
    public ResponseEntity<String> links(@RequestBody OrderController.OrderRequest request, @RequestParam int count) {
        long id = insert(request.note());
        ResponseEntity.BodyBuilder answer = ResponseEntity.status(HttpStatus.CREATED);
        for (int i = 0; i < count; i++) {
            answer.header("Link", "</orders/" + id + "/items/" + i + ">; rel=\"item\"");
        }
        return answer.body("order " + id);
    }

    /** Answers 201 with one {@code Link} header whose target is {@code length} characters long. */
    @PostMapping("/link")
    @Idempotent
    public ResponseEntity<String> link(@RequestBody OrderController.OrderRequest request, @RequestParam int length) {
        long id = insert(request.note());
        return ResponseEntity.status(HttpStatus.CREATED).header("Link", "<" + "l".repeat(length) + ">; rel=\"item\"")
                .body("order " + id);
    }

    /** Answers with headers alone, which Spring MVC sends with status 200 and no body. */
    @PostMapping("/headers")
    @Idempotent
    public HttpHeaders headers(@RequestBody OrderController.OrderRequest request) {
        HttpHeaders headers = new HttpHeaders();
        headers.setLocation(URI.create("/orders/" + insert(request.note())));
        return headers;
    }

    /**
     * Writes a row and part of its answer, which it flushes with {@code ?flushFirst=true}, then throws: an exception
     * carrying {@code @ResponseStatus}, with {@code ?unresolved=true} one that no exception handler resolves, or with
     * {@code ?problem=true} one an {@code @ExceptionHandler} answers with a problem detail.
     */
    @PostMapping("/rejected")
    @Idempotent
    public void rejected(@RequestBody OrderController.OrderRequest request,
                         @RequestParam(defaultValue = "false") boolean flushFirst,
                         @RequestParam(defaultValue = "false") boolean unresolved,
                         @RequestParam(defaultValue = "false") boolean problem, HttpServletResponse response)
            throws IOException {
        long id = insert(request.note());
        if (flushFirst) {
            response.setStatus(201);
            response.setContentType("text/plain");
            response.getOutputStream().write(("order " + id).getBytes(StandardCharsets.US_ASCII));
            response.flushBuffer();
        }
        if (problem) {
            throw new OrderController.OrderFailure(409);
        }
        if (unresolved) {
            throw new IllegalStateException("order " + id + " cannot be placed");
        }
        throw new NoteRejected();
    }
}
