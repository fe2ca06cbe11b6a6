package io.idempotency.jetty;

import io.idempotency.core.Idempotent;
import jakarta.servlet.http.HttpServletRequest;
import jakarta.servlet.http.HttpServletResponse;
import jakarta.servlet.http.HttpSession;
import org.springframework.boot.autoconfigure.SpringBootApplication;
import org.springframework.http.CacheControl;
import org.springframework.http.HttpStatus;
import org.springframework.http.HttpStatusCode;
import org.springframework.http.ProblemDetail;
import org.springframework.http.ResponseEntity;
import org.springframework.jdbc.core.simple.JdbcClient;
import org.springframework.web.bind.annotation.ExceptionHandler;
import org.springframework.web.bind.annotation.PathVariable;
import org.springframework.web.bind.annotation.PostMapping;
import org.springframework.web.bind.annotation.RequestBody;
import org.springframework.web.bind.annotation.RequestHeader;
import org.springframework.web.bind.annotation.RequestMapping;
import org.springframework.web.bind.annotation.RequestParam;
import org.springframework.web.bind.annotation.ResponseStatus;
import org.springframework.web.bind.annotation.RestController;
import org.springframework.web.bind.annotation.RestControllerAdvice;
import org.springframework.web.servlet.HandlerInterceptor;
import org.springframework.web.servlet.config.annotation.InterceptorRegistry;
import org.springframework.web.servlet.config.annotation.WebMvcConfigurer;

import java.io.IOException;
import java.io.InputStream;
import java.net.URI;
import java.nio.charset.StandardCharsets;
import java.util.Map;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.zip.GZIPInputStream;

/** An application served by Jetty, with idempotent endpoints that answer in the ways the container takes part in. */
@SpringBootApplication
public class JettyApplication implements WebMvcConfigurer {

    /** A default for every answer, which a handler may replace (as Spring's WebContentInterceptor does). */
    @Override
    public void addInterceptors(InterceptorRegistry registry) {
        registry.addInterceptor(new HandlerInterceptor() {
            @Override
            public boolean preHandle(HttpServletRequest request, HttpServletResponse response, Object handler) {
                if (request.getRequestURI().startsWith("/reports")) {
                    response.setHeader("Cache-Control", "max-age=60");
                    response.setHeader("X-Default", "kept");
                }
                return true;
            }
        });
    }

    public record OrderRequest(String note, String amount) {
    }

    public record Order(long id, String note, String amount) {
    }

    public static class OrderFailure extends RuntimeException {
        final int status;

        OrderFailure(int status) {
            super("failed with " + status);
            this.status = status;
        }
    }

    /** Lets a test hold a request inside its handler while another one comes with the same key. */
    public static final class Gate {
        public static volatile CountDownLatch entered = new CountDownLatch(1);
        public static volatile CountDownLatch release = new CountDownLatch(1);

        private Gate() {
        }
    }

    @RestController
    @RequestMapping("/orders")
    public static class OrderController {

        private final JdbcClient jdbc;

        public OrderController(JdbcClient jdbc) {
            this.jdbc = jdbc;
        }

        private long insert(String note) {
            return jdbc.sql("insert into orders (note) values (?) returning id").param(note).query(Long.class).single();
        }

        @PostMapping
        @Idempotent
        public ResponseEntity<Order> create(@RequestBody OrderRequest request) {
            long id = insert(request.note());
            return ResponseEntity.created(URI.create("/orders/" + id))
                    .eTag("\"v" + id + "\"")
                    .header("Set-Cookie", "session=secret-" + id)
                    .header("X-Not-Replayed", "only-first")
                    .body(new Order(id, request.note(), request.amount()));
        }

        /** Answers with a header value cut inside a character, as a substring may leave it. */
        @PostMapping("/cut-header")
        @Idempotent
        public ResponseEntity<Order> cutHeader(@RequestBody OrderRequest request) {
            long id = insert(request.note());
            String named = "order " + id + " \ud83d\udcb6";
            return ResponseEntity.created(URI.create("/orders/" + id))
                    .header("X-Note", named.substring(0, named.length() - 1))
                    .body(new Order(id, request.note(), request.amount()));
        }

        /** Answers with a header value holding control characters, as a value taken from elsewhere may. */
        @PostMapping("/control-characters")
        @Idempotent
        public ResponseEntity<Order> controlCharacters(@RequestBody OrderRequest request) {
            long id = insert(request.note());
            return ResponseEntity.created(URI.create("/orders/" + id))
                    .header("X-Note", "line one\r\nline two\u0000end\ttab\u007f")
                    .body(new Order(id, request.note(), request.amount()));
        }

        /** Passes on the headers of an upstream answer that came over HTTP/2, its {@code :status} among them. */
        @PostMapping("/pseudo-header")
        @Idempotent
        public ResponseEntity<Order> pseudoHeader(@RequestBody OrderRequest request) {
            long id = insert(request.note());
            return ResponseEntity.created(URI.create("/orders/" + id))
                    .header(":status", "201")
                    .body(new Order(id, request.note(), request.amount()));
        }

        @PostMapping("/status/{status}")
        @Idempotent
        public ResponseEntity<Map<String, Object>> withStatus(@PathVariable int status,
                                                              @RequestBody OrderRequest request) {
            long id = insert(request.note());
            return ResponseEntity.status(status).body(Map.of("id", id, "status", status));
        }

        @PostMapping("/fail/{status}")
        @Idempotent
        public Order failing(@PathVariable int status, @RequestBody OrderRequest request) {
            insert(request.note());
            throw new OrderFailure(status);
        }

        /** Writes a row, then ends with {@code sendError} instead of throwing. */
        @PostMapping("/send-error/{status}")
        @Idempotent
        public void sendError(@PathVariable int status, @RequestBody OrderRequest request,
                              HttpServletResponse response) throws IOException {
            insert(request.note());
            response.sendError(status, "refused by the handler");
        }

        @PostMapping(path = "/form", consumes = "application/x-www-form-urlencoded")
        @Idempotent
        @ResponseStatus(HttpStatus.CREATED)
        public Map<String, Object> form(HttpServletRequest request) {
            long id = insert(request.getParameter("note"));
            return Map.of("id", id, "amount", String.valueOf(request.getParameter("amount")));
        }

        /** A form post whose handler takes the form as its body, as Spring MVC's form converter reads it. */
        @PostMapping(path = "/form-body", consumes = "application/x-www-form-urlencoded")
        @Idempotent
        @ResponseStatus(HttpStatus.CREATED)
        public Map<String, Object> formBody(@RequestBody org.springframework.util.MultiValueMap<String, String> form) {
            long id = insert(form.getFirst("note"));
            return Map.of("id", id, "amount", String.valueOf(form.getFirst("amount")));
        }

        /** Reads its own body from an {@code InputStream} argument and writes its answer to an {@code OutputStream}. */
        @PostMapping("/streams")
        @Idempotent
        public void streams(InputStream in, java.io.OutputStream out, HttpServletResponse response)
                throws IOException {
            String note = new String(in.readAllBytes(), StandardCharsets.UTF_8);
            long id = insert(note);
            response.setStatus(HttpStatus.CREATED.value());
            response.setContentType("text/plain");
            out.write(("order " + id + " for " + note).getBytes(StandardCharsets.UTF_8));
            out.flush();
        }

        /** Decompresses its body itself. */
        @PostMapping("/compressed")
        @Idempotent
        @ResponseStatus(HttpStatus.CREATED)
        public Map<String, Object> compressed(InputStream body,
                                              @RequestHeader(name = "Content-Encoding", required = false) String coding)
                throws IOException {
            InputStream in = "gzip".equalsIgnoreCase(coding) ? new GZIPInputStream(body) : body;
            return Map.of("id", insert(new String(in.readAllBytes(), StandardCharsets.UTF_8)));
        }

        @PostMapping("/large")
        @Idempotent
        public ResponseEntity<String> large(@RequestParam int size, @RequestBody OrderRequest request) {
            insert(request.note());
            return ResponseEntity.ok("x".repeat(size));
        }

        /** Text through the servlet's writer: encoding set as a Charset, then the type and a locale. */
        @PostMapping("/text")
        @Idempotent
        public void text(@RequestBody OrderRequest request, HttpServletResponse response) throws IOException {
            long id = insert(request.note());
            response.setStatus(HttpStatus.CREATED.value());
            response.setCharacterEncoding(StandardCharsets.UTF_8);
            response.setContentType("text/plain");
            response.setLocale(java.util.Locale.GERMANY);
            response.getWriter().write("Bestellung " + id + ": caf\u00e9 \u20ac");
        }

        /** Keyed and fingerprinted by expressions, which are offered the request's parameters. */
        @PostMapping("/callbacks")
        @Idempotent(key = "#body.transactionId", fingerprint = {"#body.amount", "#body.currency"})
        public Map<String, Object> callback(@RequestBody Map<String, Object> callback) {
            return Map.of("id", insert("callback-" + callback.get("transactionId")));
        }

        /** Thrown after the handler wrote; Spring MVC answers it with the status it names, through the error page. */
        @ResponseStatus(HttpStatus.UNPROCESSABLE_CONTENT)
        public static class NoteRejected extends RuntimeException {
            NoteRejected() {
                super("note rejected");
            }
        }

        /**
         * Writes a row and part of its answer, which it flushes with {@code ?flushFirst=true}, then throws: an
         * exception carrying {@code @ResponseStatus}, with {@code ?unresolved=true} one that no exception handler
         * resolves, or with {@code ?problem=true} one an {@code @ExceptionHandler} answers with a problem detail.
         */
        @PostMapping("/rejected")
        @Idempotent
        public void rejected(@RequestBody OrderRequest request,
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
                throw new OrderFailure(409);
            }
            if (unresolved) {
                throw new IllegalStateException("order " + id + " cannot be placed");
            }
            throw new NoteRejected();
        }

        /** Holds its request at the {@link Gate} once its row is written. */
        @PostMapping("/gated")
        @Idempotent
        @ResponseStatus(HttpStatus.CREATED)
        public Order gated(@RequestBody OrderRequest request) throws InterruptedException {
            long id = insert(request.note());
            Gate.entered.countDown();
            Gate.release.await(20, TimeUnit.SECONDS);
            return new Order(id, request.note(), request.amount());
        }

        /** Creates a session and redirects to the new order. */
        @PostMapping("/session")
        @Idempotent
        public void inSession(@RequestBody OrderRequest request, HttpSession session,
                              HttpServletResponse response) throws IOException {
            long id = insert(request.note());
            session.setAttribute("lastOrder", id);
            response.sendRedirect(response.encodeRedirectURL("/orders/" + id));
        }
    }

    /** Handlers that drive the servlet response the way low-level code does. */
    @RestController
    @RequestMapping("/capture")
    public static class CaptureController {

        private final JdbcClient jdbc;

        public CaptureController(JdbcClient jdbc) {
            this.jdbc = jdbc;
        }

        /** Writes a row; {@code failAtCommit} also breaks a deferred constraint, which fails the commit. */
        private long insert(String note, boolean failAtCommit) {
            long id = jdbc.sql("insert into orders (note) values (?) returning id").param(note).query(Long.class)
                    .single();
            if (failAtCommit) {
                jdbc.sql("insert into order_audit (order_id) values (?)").param(-id).update();
            }
            return id;
        }

        @PostMapping("/flushing")
        @Idempotent
        public void flushing(@RequestBody OrderRequest request, @RequestParam int size,
                             @RequestParam(defaultValue = "false") boolean failAtCommit,
                             @RequestParam(defaultValue = "-1") long declared,
                             HttpServletResponse response) throws IOException {
            long id = insert(request.note(), failAtCommit);
            response.setStatus(201);
            response.setContentType("text/plain");
            if (declared >= 0) {
                response.setContentLengthLong(declared);
            }
            java.io.OutputStream out = response.getOutputStream();
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
        public void writerClosed(@RequestBody OrderRequest request,
                                 @RequestParam(defaultValue = "false") boolean failAtCommit,
                                 HttpServletResponse response) throws IOException {
            long id = insert(request.note(), failAtCommit);
            response.setStatus(201);
            response.setContentType("text/plain;charset=UTF-8");
            try (java.io.PrintWriter out = response.getWriter()) {
                out.print("order " + id + " \u20ac");
            }
        }

        /** Passes on an upstream's {@code Transfer-Encoding} with the decoded body. */
        @PostMapping("/upstream-chunked")
        @Idempotent
        public ResponseEntity<String> upstreamChunked(@RequestBody OrderRequest request) {
            long id = insert(request.note(), false);
            return ResponseEntity.status(201).header("Transfer-Encoding", "chunked")
                    .header("Content-Type", "text/plain").body("order " + id);
        }

        /** Sets trailer fields, or a header where the container cannot send them (an HTTP/1.0 request). */
        @PostMapping("/trailers")
        @Idempotent
        public void trailers(@RequestBody OrderRequest request,
                             @RequestParam(defaultValue = "false") boolean failAtCommit,
                             HttpServletResponse response) throws IOException {
            long id = insert(request.note(), failAtCommit);
            try {
                response.setTrailerFields(() -> Map.of("x-checksum", "order-" + id));
            } catch (IllegalStateException e) {
                response.setHeader("X-Checksum", "order-" + id);
            }
            response.setStatus(201);
            response.setContentType("text/plain");
            response.getOutputStream().write(("order " + id).getBytes(StandardCharsets.UTF_8));
        }
    }

    /** Confirms by a link: a GET with an effect, made idempotent for GET, which Spring MVC also serves for HEAD. */
    @RestController
    public static class ConfirmationsController {

        private final JdbcClient jdbc;

        public ConfirmationsController(JdbcClient jdbc) {
            this.jdbc = jdbc;
        }

        @org.springframework.web.bind.annotation.GetMapping("/confirmations")
        @Idempotent(methods = "GET")
        public String confirm(@RequestParam String token) {
            long id = jdbc.sql("insert into orders (note) values (?) returning id").param(token).query(Long.class)
                    .single();
            return "confirmation " + id + " of " + token;
        }
    }

    /**
     * Text through the servlet's writer in whatever encoding the container gives it ({@code none}: no charset at all,
     * {@code english} or {@code german}: a locale instead of a charset), with and without the library.
     */
    @RestController
    public static class EncodingsController {

        private final JdbcClient jdbc;

        public EncodingsController(JdbcClient jdbc) {
            this.jdbc = jdbc;
        }

        @PostMapping("/encoded/{style}")
        @Idempotent
        public void encoded(@PathVariable String style, @RequestBody OrderRequest request,
                            HttpServletResponse response) throws IOException {
            write(style, request, response);
        }

        @PostMapping("/unguarded/encoded/{style}")
        public void unguarded(@PathVariable String style, @RequestBody OrderRequest request,
                              HttpServletResponse response) throws IOException {
            write(style, request, response);
        }

        private void write(String style, OrderRequest request, HttpServletResponse response) throws IOException {
            jdbc.sql("insert into orders (note) values (?)").param(request.note()).update();
            response.setStatus(HttpStatus.CREATED.value());
            response.setContentType("text/plain");
            if (style.equals("english")) {
                response.setLocale(java.util.Locale.ENGLISH);
            } else if (style.equals("german")) {
                response.setLocale(java.util.Locale.GERMANY);
            }
            response.getWriter().write("caf\u00e9 \u20ac");
        }

        /** Sends 103 Early Hints through {@code sendError(103)}, then answers. */
        @PostMapping("/early-hints")
        @Idempotent
        public void earlyHints(@RequestBody OrderRequest request, HttpServletResponse response) throws IOException {
            response.setHeader("Link", "</style.css>; rel=preload; as=style");
            response.sendError(103);
            long id = jdbc.sql("insert into orders (note) values (?) returning id").param(request.note())
                    .query(Long.class).single();
            response.setStatus(201);
            response.setContentType("text/plain;charset=UTF-8");
            response.getWriter().write("order " + id);
        }

        /** Answers with a redirect of a chosen status (Servlet 6.1's two-argument form). */
        @PostMapping("/redirect/{status}")
        @Idempotent
        public void redirect(@PathVariable int status, @RequestBody OrderRequest request,
                             HttpServletResponse response) throws IOException {
            long id = jdbc.sql("insert into orders (note) values (?) returning id").param(request.note())
                    .query(Long.class).single();
            response.sendRedirect("/orders/" + id, status);
        }
    }

    /** Creates a session and redirects to the new order, without the library: the container's own encoding. */
    @RestController
    public static class UnguardedController {
        @PostMapping(path = "/unguarded/form-body", consumes = "application/x-www-form-urlencoded")
        @ResponseStatus(HttpStatus.CREATED)
        public Map<String, Object> formBody(@RequestBody org.springframework.util.MultiValueMap<String, String> form) {
            return Map.of("note", String.valueOf(form.getFirst("note")), "amount",
                    String.valueOf(form.getFirst("amount")));
        }

        @PostMapping("/unguarded/large")
        public ResponseEntity<String> large(@RequestParam int size) {
            return ResponseEntity.ok("x".repeat(size));
        }

        @PostMapping("/unguarded/session")
        public void inSession(HttpSession session, HttpServletResponse response) throws IOException {
            session.setAttribute("lastOrder", 0L);
            response.sendRedirect(response.encodeRedirectURL("/orders/0"));
        }
    }

    @RestController
    public static class ReportsController {
        @PostMapping("/reports")
        @Idempotent
        public ResponseEntity<String> create() {
            return ResponseEntity.ok().cacheControl(CacheControl.noStore()).body("{}");
        }
    }

    /** Maps handler exceptions to answers, as applications do. */
    @RestControllerAdvice
    public static class FailureAdvice {
        @ExceptionHandler(OrderFailure.class)
        public ResponseEntity<ProblemDetail> failed(OrderFailure failure) {
            return ResponseEntity.status(failure.status).body(ProblemDetail.forStatusAndDetail(
                    HttpStatusCode.valueOf(failure.status), failure.getMessage()));
        }
    }
}
