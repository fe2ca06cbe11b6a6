package io.idempotency.spring.app;

import io.idempotency.core.Idempotent;
import jakarta.servlet.http.HttpServletRequest;
import jakarta.servlet.http.HttpServletResponse;
import org.springframework.http.HttpStatus;
import org.springframework.http.MediaType;
import org.springframework.http.ResponseEntity;
import org.springframework.jdbc.core.simple.JdbcClient;
import org.springframework.transaction.annotation.Transactional;
import org.springframework.web.bind.annotation.PatchMapping;
import org.springframework.web.bind.annotation.PathVariable;
import org.springframework.web.bind.annotation.PostMapping;
import org.springframework.web.bind.annotation.PutMapping;
import org.springframework.web.bind.annotation.RequestParam;
import org.springframework.web.bind.annotation.RequestBody;
import org.springframework.web.bind.annotation.RequestHeader;
import org.springframework.web.bind.annotation.RequestMapping;
import org.springframework.web.bind.annotation.RequestMethod;
import org.springframework.web.bind.annotation.ResponseStatus;
import org.springframework.web.bind.annotation.RestController;

import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.io.Writer;
import java.net.URI;
import java.nio.charset.StandardCharsets;
import java.util.Map;

/** Endpoints that write a row into {@code orders} and answer in different ways. */
@RestController
@RequestMapping("/orders")
public class OrderController {

    public record OrderRequest(String note, String amount) {
    }

    public record Order(long id, String note, String amount) {
    }

    private final JdbcClient jdbc;
    private final OrderService service;

    public OrderController(JdbcClient jdbc, OrderService service) {
        this.jdbc = jdbc;
        this.service = service;
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
                .header("Authentication-Info", "nextnonce=\"secret-" + id + "\"")
                .header("X-Not-Replayed", "only-first")
                .body(new Order(id, request.note(), request.amount()));
    }

    /**
     * Writes its row, then checks the request's precondition as a handler checking its entity's version does: 428
     * without {@code If-Match}, 412 when it names another version than {@code "v2"}, the current one.
     */
    @PatchMapping("/conditional")
    @Idempotent
    public ResponseEntity<Order> conditional(@RequestBody OrderRequest request,
                                             @RequestHeader(value = "If-Match", required = false) String ifMatch) {
        long id = insert(request.note());
        if (ifMatch == null) {
            return ResponseEntity.status(HttpStatus.PRECONDITION_REQUIRED).build();
        }
        if (!ifMatch.equals("\"v2\"")) {
            return ResponseEntity.status(HttpStatus.PRECONDITION_FAILED).build();
        }
        return ResponseEntity.ok().eTag("\"v3\"").body(new Order(id, request.note(), request.amount()));
    }

    /** Hands out a token for the order in its answer's Authorization header, as some token-issuing APIs do. */
    @PostMapping("/with-token")
    @Idempotent
    public ResponseEntity<Order> withToken(@RequestBody OrderRequest request) {
        long id = insert(request.note());
        return ResponseEntity.created(URI.create("/orders/" + id)).header("Authorization", "Bearer secret-" + id)
                .body(new Order(id, request.note(), request.amount()));
    }

    /** Sets headers about the connection it is sent on, not about the answer: they mean nothing on another one. */
    @PostMapping("/hop-by-hop")
    @Idempotent
    public ResponseEntity<Order> hopByHop(@RequestBody OrderRequest request) {
        long id = insert(request.note());
        return ResponseEntity.created(URI.create("/orders/" + id))
                .header("Keep-Alive", "timeout=5")
                .header("Proxy-Connection", "keep-alive")
                .header("Upgrade", "h2c")
                .header("Trailer", "X-Checksum")
                .header("TE", "trailers")
                .body(new Order(id, request.note(), request.amount()));
    }

    /**
     * Answers as a handler passing on what an upstream service answered does: with the upstream's framing and
     * message headers (its {@code Content-Length}, its {@code Date} and {@code Age}), and a field its
     * {@code Connection} header names as one of the connection's options (RFC 9110, section 7.6.1).
     */
    @PostMapping("/upstream")
    @Idempotent
    public ResponseEntity<String> upstream(@RequestBody OrderRequest request) {
        long id = insert(request.note());
        String body = "{\"id\":" + id + "}";
        return ResponseEntity.created(URI.create("/orders/" + id))
                .header("Content-Type", "application/json")
                .header("Content-Length", Integer.toString(body.length()))
                .header("Date", "Sun, 06 Nov 1994 08:49:37 GMT")
                .header("Age", "30")
                .header("Connection", "keep-alive, , x-UPSTREAM-trace")
                .header("X-Upstream-Trace", "trace-" + id)
                .header("X-Upstream-Region", "eu-1")
                .body(body);
    }

    /**
     * Passes on the headers of an upstream answer that came over HTTP/2, its {@code :status} pseudo-header among them,
     * as a handler copying what the JDK's HTTP client read does.
     */
    @PostMapping("/pseudo-header")
    @Idempotent
    public ResponseEntity<Order> pseudoHeader(@RequestBody OrderRequest request) {
        long id = insert(request.note());
        return ResponseEntity.created(URI.create("/orders/" + id))
                .header(":status", "201")
                .body(new Order(id, request.note(), request.amount()));
    }

    /** Answers with a header value cut inside a character: half of a surrogate pair, as a substring may leave it. */
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

    /**
     * Asks for stronger authentication before it creates the order, as a payment above a limit may (RFC 9470): a 401
     * with its challenge until the request carries the token the challenge asks for.
     */
    @PostMapping("/step-up")
    @Idempotent
    public ResponseEntity<Order> stepUp(@RequestHeader(name = "Authorization", required = false) String authorization,
                                        @RequestBody OrderRequest request) {
        if (!"Bearer stepped-up".equals(authorization)) {
            return ResponseEntity.status(HttpStatus.UNAUTHORIZED)
                    .header("WWW-Authenticate", "Bearer error=\"insufficient_user_authentication\", acr_values=\"mfa\"")
                    .build();
        }
        long id = insert(request.note());
        return ResponseEntity.status(HttpStatus.CREATED).body(new Order(id, request.note(), request.amount()));
    }

    @PostMapping("/status/{status}")
    @Idempotent
    public ResponseEntity<Map<String, Object>> withStatus(@PathVariable int status, @RequestBody OrderRequest request) {
        long id = insert(request.note());
        return ResponseEntity.status(status).body(Map.of("id", id, "status", status));
    }

    @PostMapping("/transactional/{status}")
    @Idempotent
    @Transactional
    public ResponseEntity<Map<String, Object>> transactional(@PathVariable int status, @RequestBody OrderRequest request) {
        long id = insert(request.note());
        return ResponseEntity.status(status).body(Map.of("id", id));
    }

    /**
     * Writes a row, and answers 503 itself when the database fails the write (a lost connection, a timeout), as a
     * handler that maps its own failures does: as its answer, or with {@code sendError}; or, given {@code pad}, with a
     * 200 whose body carries that many more characters.
     */
    @PostMapping("/guarded")
    @Idempotent
    public ResponseEntity<Map<String, Object>> guarded(@RequestBody OrderRequest request,
                                                       @RequestParam(defaultValue = "false") boolean sendError,
                                                       @RequestParam(defaultValue = "0") int pad,
                                                       HttpServletResponse response) throws IOException {
        try {
            return ResponseEntity.status(HttpStatus.CREATED).body(Map.of("id", insert(request.note())));
        } catch (org.springframework.dao.DataAccessException e) {
            if (sendError) {
                response.sendError(HttpStatus.SERVICE_UNAVAILABLE.value(), "orders unavailable");
                return null;
            }
            if (pad > 0) {
                return ResponseEntity.ok(Map.of("error", "orders unavailable", "pad", "x".repeat(pad)));
            }
            return ResponseEntity.status(HttpStatus.SERVICE_UNAVAILABLE).header("Retry-After", "7")
                    .body(Map.of("error", "orders unavailable"));
        }
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

    /**
     * Writes its answer through a {@code Writer} argument, which Spring MVC takes from the response before the
     * advice runs; {@code ?failAtCommit=true} also breaks a deferred constraint.
     */
    @PostMapping("/writer")
    @Idempotent
    public void writer(@RequestBody OrderRequest request, @RequestParam(defaultValue = "false") boolean failAtCommit,
                       HttpServletResponse response, Writer out) throws IOException {
        long id = insert(request.note());
        if (failAtCommit) {
            jdbc.sql("insert into order_audit (order_id) values (?)").param(-id).update();
        }
        response.setStatus(HttpStatus.CREATED.value());
        response.setContentType("text/plain;charset=UTF-8");
        out.write("order " + id + " for " + request.note() + " \u20ac");
        out.flush();
    }

    /** Sets a cookie through the servlet API; {@code ?failAtCommit=true} also breaks a deferred constraint. */
    @PostMapping("/cookie")
    @Idempotent
    @ResponseStatus(HttpStatus.CREATED)
    public Order cookie(@RequestBody OrderRequest request, @RequestParam(defaultValue = "false") boolean failAtCommit,
                        HttpServletResponse response) {
        long id = insert(request.note());
        if (failAtCommit) {
            jdbc.sql("insert into order_audit (order_id) values (?)").param(-id).update();
        }
        response.addCookie(new jakarta.servlet.http.Cookie("order", "secret-" + id));
        return new Order(id, request.note(), request.amount());
    }

    /** Reads its own body from an {@code InputStream} argument and writes its answer to an {@code OutputStream}. */
    @PostMapping("/streams")
    @Idempotent
    public void streams(InputStream in, OutputStream out, HttpServletResponse response) throws IOException {
        String note = new String(in.readAllBytes(), StandardCharsets.UTF_8);
        long id = insert(note);
        response.setStatus(HttpStatus.CREATED.value());
        response.setContentType("text/plain");
        out.write(("order " + id + " for " + note).getBytes(StandardCharsets.UTF_8));
        out.flush();
    }

    /** Text written the servlet way: encoding set as a Charset before the type, a locale, a writer. */
    @PostMapping("/text")
    @Idempotent
    public void text(@RequestBody OrderRequest request, HttpServletResponse response) throws IOException {
        long id = insert(request.note());
        response.setStatus(HttpStatus.CREATED.value());
        response.setCharacterEncoding(StandardCharsets.UTF_8);
        response.setContentType("text/plain");
        response.setLocale(java.util.Locale.GERMANY);
        response.setHeader("Content-Disposition", "attachment; filename=\"bestellung-" + id + ".txt\"");
        response.getWriter().write("Bestellung " + id + ": caf\u00e9 \u20ac");
    }

    /** Text through the servlet's writer in whatever encoding the container has: none is set here. */
    @PostMapping("/container-text")
    @Idempotent
    public void containerText(@RequestBody OrderRequest request, HttpServletResponse response) throws IOException {
        writeContainerText(request, response);
    }

    /** The same without {@code @Idempotent}: what the container alone makes of it. */
    @PostMapping("/container-text/unguarded")
    public void containerTextUnguarded(@RequestBody OrderRequest request, HttpServletResponse response)
            throws IOException {
        writeContainerText(request, response);
    }

    private void writeContainerText(OrderRequest request, HttpServletResponse response) throws IOException {
        insert(request.note());
        response.setStatus(HttpStatus.CREATED.value());
        response.setContentType("text/plain");
        response.getWriter().write("caf\u00e9 \u20ac");
    }

    /** JSON through the servlet's writer, no charset set: the container writes it in the one it takes for JSON. */
    @PostMapping("/json-text")
    @Idempotent
    public void jsonText(@RequestBody OrderRequest request, HttpServletResponse response) throws IOException {
        writeJsonText(request, response);
    }

    /** The same without {@code @Idempotent}: what the container alone makes of it. */
    @PostMapping("/json-text/unguarded")
    public void jsonTextUnguarded(@RequestBody OrderRequest request, HttpServletResponse response) throws IOException {
        writeJsonText(request, response);
    }

    private void writeJsonText(OrderRequest request, HttpServletResponse response) throws IOException {
        insert(request.note());
        response.setStatus(HttpStatus.CREATED.value());
        response.setContentType("application/json");
        response.getWriter().write("{\"note\":\"caf\u00e9 \u20ac\"}");
    }

    /**
     * Text whose encoding comes from the response's locale ({@code locale}, a language tag, or none): no charset is
     * set, so the container takes the one its locale-encoding mapping gives the locale (UTF-8 for English on Tomcat in
     * Spring Boot), else its default.
     */
    @PostMapping("/localized-text")
    @Idempotent
    public void localizedText(@RequestParam(required = false) String locale, @RequestBody OrderRequest request,
                              HttpServletResponse response) throws IOException {
        writeLocalizedText(locale, request, response);
    }

    /** The same without {@code @Idempotent}: what the container alone makes of it. */
    @PostMapping("/localized-text/unguarded")
    public void localizedTextUnguarded(@RequestParam(required = false) String locale,
                                       @RequestBody OrderRequest request, HttpServletResponse response)
            throws IOException {
        writeLocalizedText(locale, request, response);
    }

    private void writeLocalizedText(String locale, OrderRequest request, HttpServletResponse response)
            throws IOException {
        insert(request.note());
        response.setStatus(HttpStatus.CREATED.value());
        response.setContentType("text/plain");
        if (locale != null) {
            response.setLocale(java.util.Locale.forLanguageTag(locale));
        }
        response.getWriter().write("caf\u00e9 \u20ac");
    }

    /** Answers with a redirect of a chosen status (Servlet 6.1's two-argument form). */
    @PostMapping("/redirect/{status}")
    @Idempotent
    public void redirect(@PathVariable int status, @RequestBody OrderRequest request, HttpServletResponse response)
            throws IOException {
        long id = insert(request.note());
        response.sendRedirect("/orders/" + id, status);
    }

    /** Not idempotent itself, but calls an {@code @Idempotent} service method, then writes a row of its own. */
    @PostMapping("/via-service")
    @ResponseStatus(HttpStatus.CREATED)
    public Map<String, Object> viaService(@RequestBody OrderRequest request) {
        long id = service.insert(request.note());
        insert(request.note() + "-after");
        return Map.of("id", id);
    }

    /** Writes a row, then answers asynchronously through the servlet API, which no startup check can see. */
    @PostMapping("/async-servlet")
    @Idempotent
    public void asyncServlet(@RequestBody OrderRequest request, HttpServletRequest servletRequest,
                             HttpServletResponse servletResponse) {
        insert(request.note());
        jakarta.servlet.AsyncContext async = servletRequest.startAsync(servletRequest, servletResponse);
        async.start(() -> {
            try {
                async.getResponse().getWriter().write("late answer");
            } catch (IOException e) {
                throw new java.io.UncheckedIOException(e);
            } finally {
                async.complete();
            }
        });
    }

    /**
     * Writes a row, starts async processing without arguments (its context holds the container's own response, not
     * the one the library captures the answer in), and writes an answer to that response and flushes it, before the
     * handler returns: on the handler's thread ({@code on=thread}), or in a task on the container's async executor
     * that the handler waits for ({@code on=task}). The write's failure is let through as it comes.
     */
    @PostMapping("/async-servlet-raw")
    @Idempotent
    public void asyncServletRaw(@RequestBody OrderRequest request, @RequestParam String on,
                                HttpServletRequest servletRequest) throws Exception {
        insert(request.note());
        jakarta.servlet.AsyncContext async = servletRequest.startAsync();
        java.util.concurrent.Callable<Void> write = () -> {
            jakarta.servlet.ServletResponse response = async.getResponse();
            response.setContentType("text/plain");
            response.getOutputStream().write("ok from async work".getBytes(StandardCharsets.UTF_8));
            response.flushBuffer();
            return null;
        };
        if (on.equals("thread")) {
            write.call();
        } else {
            java.util.concurrent.CountDownLatch written = new java.util.concurrent.CountDownLatch(1);
            async.start(() -> {
                try {
                    write.call();
                } catch (Exception e) {
                    throw OrderController.<RuntimeException>undeclared(e);
                } finally {
                    written.countDown();
                }
            });
            written.await(10, java.util.concurrent.TimeUnit.SECONDS);
        }
    }

    /**
     * The work {@code /async-servlet-late} starts on the container's async executor waits for {@link #go} (released
     * by {@code /after-late-async}, once its request has been answered) and counts {@link #done} down before its last
     * step.
     */
    public static final class LateAsyncWork {
        static volatile java.util.concurrent.CountDownLatch go = new java.util.concurrent.CountDownLatch(1);
        static volatile java.util.concurrent.CountDownLatch done = new java.util.concurrent.CountDownLatch(1);

        public static void reset() {
            go = new java.util.concurrent.CountDownLatch(1);
            done = new java.util.concurrent.CountDownLatch(1);
        }
    }

    /**
     * As {@code /async-servlet}, but its async work runs only once the request has been answered and completed. What
     * it does then is {@code kind}:
     * <ul>
     * <li>{@code write}: writes to the response of its async context, and completes it in its {@code finally};</li>
     * <li>{@code checked}: fails with a checked exception it does not declare, as a task written in Kotlin does (its
     * {@code IOException} from a write, say);</li>
     * <li>{@code raw}: writes to the container's response, which it took from its context (started without the
     * wrappers) before the library answered;</li>
     * <li>{@code read}: reads the body of the container's request, taken so.</li>
     * </ul>
     */
    @PostMapping("/async-servlet-late")
    @Idempotent
    public void asyncServletLate(@RequestBody OrderRequest request, @RequestParam String kind,
                                 HttpServletRequest servletRequest, HttpServletResponse servletResponse)
            throws InterruptedException {
        insert(request.note());
        java.util.concurrent.CountDownLatch go = LateAsyncWork.go;
        java.util.concurrent.CountDownLatch done = LateAsyncWork.done;
        java.util.concurrent.CountDownLatch taken = new java.util.concurrent.CountDownLatch(1);
        boolean unwrapped = kind.equals("raw") || kind.equals("read");
        jakarta.servlet.AsyncContext async = unwrapped ? servletRequest.startAsync()
                : servletRequest.startAsync(servletRequest, servletResponse);
        async.start(() -> {
            jakarta.servlet.ServletResponse keptResponse = kind.equals("raw") ? async.getResponse() : null;
            jakarta.servlet.ServletRequest keptRequest = kind.equals("read") ? async.getRequest() : null;
            taken.countDown();
            try {
                go.await(10, java.util.concurrent.TimeUnit.SECONDS);
                switch (kind) {
                    case "write" -> async.getResponse().getWriter().write("late answer");
                    case "raw" -> {
                        keptResponse.getOutputStream().write("late answer".getBytes(StandardCharsets.UTF_8));
                        keptResponse.flushBuffer();
                    }
                    case "read" -> keptRequest.getInputStream().readAllBytes();
                    default -> {
                    }
                }
            } catch (IOException e) {
                throw new java.io.UncheckedIOException(e);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            } finally {
                done.countDown();
                if (kind.equals("write")) {
                    async.complete();
                }
            }
            if (kind.equals("checked")) {
                throw OrderController.<RuntimeException>undeclared(new IOException("the late write failed"));
            }
        });
        taken.await(10, java.util.concurrent.TimeUnit.SECONDS);
    }

    @SuppressWarnings("unchecked")
    private static <E extends Throwable> E undeclared(Throwable failure) throws E {
        throw (E) failure;
    }

    /**
     * Releases the late async work of {@code /async-servlet-late}, and once it has ended answers with the body it was
     * sent.
     */
    @PostMapping("/after-late-async")
    public String afterLateAsync(InputStream body) throws InterruptedException, IOException {
        LateAsyncWork.go.countDown();
        LateAsyncWork.done.await(10, java.util.concurrent.TimeUnit.SECONDS);
        Thread.sleep(100); // the late work's last step, after its count down
        return new String(body.readAllBytes(), StandardCharsets.UTF_8);
    }

    /**
     * Not idempotent: writes a row and answers on another thread, through the servlet API or one of Spring MVC's
     * async return values ({@code kind}: a future, a {@code Callable}, a streaming body, server-sent events, a
     * {@code DeferredResult} set on another thread or one that times out, a {@code ResponseBodyEmitter}, or a future
     * that fails).
     */
    @PostMapping("/plain-async")
    public Object plainAsync(@RequestBody OrderRequest request, @RequestParam String kind,
                             HttpServletRequest servletRequest, HttpServletResponse servletResponse) {
        insert(request.note());
        switch (kind) {
            case "future" -> {
                return java.util.concurrent.CompletableFuture.supplyAsync(() -> Map.of("late", request.note()));
            }
            case "callable" -> {
                return (java.util.concurrent.Callable<Map<String, String>>) () -> Map.of("late", request.note());
            }
            case "stream" -> {
                return (org.springframework.web.servlet.mvc.method.annotation.StreamingResponseBody) out -> {
                    out.write("late ".getBytes(StandardCharsets.UTF_8));
                    out.flush(); // sent before the rest is written
                    out.write(request.note().getBytes(StandardCharsets.UTF_8));
                };
            }
            case "sse" -> {
                var emitter = new org.springframework.web.servlet.mvc.method.annotation.SseEmitter();
                new Thread(() -> {
                    try {
                        emitter.send("late");
                        emitter.send(request.note());
                        emitter.complete();
                    } catch (IOException e) {
                        emitter.completeWithError(e);
                    }
                }).start();
                return emitter;
            }
            case "timeout" -> {
                return new org.springframework.web.context.request.async.DeferredResult<String>(200L); // never set
            }
            case "deferred" -> {
                var result = new org.springframework.web.context.request.async.DeferredResult<Map<String, String>>();
                new Thread(() -> result.setResult(Map.of("late", request.note()))).start();
                return result;
            }
            case "emitter" -> {
                var emitter = new org.springframework.web.servlet.mvc.method.annotation.ResponseBodyEmitter();
                new Thread(() -> {
                    try {
                        emitter.send("late ", MediaType.TEXT_PLAIN);
                        emitter.send(request.note(), MediaType.TEXT_PLAIN);
                        emitter.complete();
                    } catch (IOException e) {
                        emitter.completeWithError(e);
                    }
                }).start();
                return emitter;
            }
            case "error" -> { // dispatched again with the exception, which becomes an error page's answer
                return java.util.concurrent.CompletableFuture.supplyAsync(() -> {
                    throw new org.springframework.web.server.ResponseStatusException(HttpStatus.I_AM_A_TEAPOT,
                            "late " + request.note());
                });
            }
            default -> {
            }
        }
        jakarta.servlet.AsyncContext async = kind.equals("servlet-unwrapped") ? servletRequest.startAsync()
                : servletRequest.startAsync(servletRequest, servletResponse);
        async.start(() -> {
            try {
                async.getResponse().setContentType("text/plain");
                async.getResponse().getWriter().write("late " + request.note());
            } catch (IOException e) {
                throw new java.io.UncheckedIOException(e);
            } finally {
                servletRequest.getAsyncContext().complete();
            }
        });
        return null;
    }

    /**
     * Not idempotent: reads its body and answers {@code echo:} and the body, both without blocking (a read listener,
     * then a write listener), as the servlet API allows once async processing has started.
     */
    @PostMapping("/plain-nonblocking")
    public void plainNonBlocking(HttpServletRequest servletRequest, HttpServletResponse servletResponse)
            throws IOException {
        jakarta.servlet.AsyncContext async = servletRequest.startAsync(servletRequest, servletResponse);
        jakarta.servlet.ServletInputStream in = servletRequest.getInputStream();
        java.io.ByteArrayOutputStream body = new java.io.ByteArrayOutputStream();
        body.write("echo:".getBytes(StandardCharsets.UTF_8));
        in.setReadListener(new jakarta.servlet.ReadListener() {
            @Override
            public void onDataAvailable() throws IOException {
                byte[] buffer = new byte[7]; // several reads for one body
                while (in.isReady() && !in.isFinished()) {
                    int n = in.read(buffer);
                    if (n > 0) {
                        body.write(buffer, 0, n);
                    }
                }
            }

            @Override
            public void onAllDataRead() throws IOException {
                jakarta.servlet.ServletOutputStream out = servletResponse.getOutputStream();
                servletResponse.setContentType("text/plain");
                out.setWriteListener(new jakarta.servlet.WriteListener() {
                    private boolean written;

                    @Override
                    public void onWritePossible() throws IOException {
                        if (!written && out.isReady()) {
                            written = true;
                            out.write(body.toByteArray());
                        }
                        if (written && out.isReady()) {
                            async.complete();
                        }
                    }

                    @Override
                    public void onError(Throwable t) {
                        async.complete();
                    }
                });
            }

            @Override
            public void onError(Throwable t) {
                async.complete();
            }
        });
    }

    /** Writes a row, then starts async processing through the servlet API, which no one completes. */
    @PostMapping("/async-left-open")
    @Idempotent
    public void asyncLeftOpen(@RequestBody OrderRequest request, HttpServletRequest servletRequest,
                              HttpServletResponse servletResponse) {
        insert(request.note());
        servletRequest.startAsync(servletRequest, servletResponse);
    }

    /** The emitters {@code /async-value?kind=emitter} returned, by the note of their request. */
    public static final Map<String, org.springframework.web.servlet.mvc.method.annotation.ResponseBodyEmitter>
            RETURNED_EMITTERS = new java.util.concurrent.ConcurrentHashMap<>();

    /**
     * Writes a row, then answers with a {@code Callable} (or, with {@code ?kind=export}, a streaming body of the
     * application's own kind; with {@code ?kind=emitter}, an emitter it keeps) behind a declared {@code Object},
     * which no startup check can see: Spring MVC would run it on another thread, where it writes a row of its own.
     */
    @PostMapping("/async-value")
    @Idempotent
    public Object asyncValue(@RequestBody OrderRequest request,
                             @RequestParam(defaultValue = "callable") String kind) {
        insert(request.note());
        if (kind.equals("export")) {
            return new CsvExport(() -> insert(request.note() + "-late"));
        }
        if (kind.equals("publisher-entity")) {
            return ResponseEntity.ok(latePublisher(request.note()));
        }
        if (kind.equals("emitter")) {
            // kept, as an application keeps the emitters it sends events to
            var emitter = new org.springframework.web.servlet.mvc.method.annotation.SseEmitter();
            RETURNED_EMITTERS.put(request.note(), emitter);
            return emitter;
        }
        return (java.util.concurrent.Callable<Map<String, Object>>) () -> {
            insert(request.note() + "-late");
            return Map.of("late", true);
        };
    }

    /** A publisher that writes a row on a thread of its own once subscribed to, then completes empty. */
    private java.util.concurrent.Flow.Publisher<String> latePublisher(String note) {
        return subscriber -> new Thread(() -> {
            insert(note + "-late");
            subscriber.onSubscribe(new java.util.concurrent.Flow.Subscription() {
                @Override
                public void request(long n) {
                }

                @Override
                public void cancel() {
                }
            });
            subscriber.onComplete();
        }).start();
    }

    /** An application's own kind of streaming body: Spring MVC answers it as a {@code StreamingResponseBody}. */
    public interface ExportBody extends org.springframework.web.servlet.mvc.method.annotation.StreamingResponseBody {
    }

    /** Records that it ran (a side effect), then writes the export. */
    public record CsvExport(Runnable record) implements ExportBody {
        @Override
        public void writeTo(OutputStream out) throws IOException {
            record.run();
            out.write("reference,amount\n".getBytes(StandardCharsets.UTF_8));
        }
    }

    /** An optional-key handler calling an optional-key service method. */
    @PostMapping("/optional-via-service")
    @Idempotent(keyRequired = false)
    @ResponseStatus(HttpStatus.CREATED)
    public Map<String, Object> optionalViaService(@RequestBody OrderRequest request) {
        return Map.of("id", service.insertOptionally(request.note()));
    }

    /** A text body, which Spring MVC reads in the charset its type names. */
    @PostMapping(path = "/text-note", consumes = "text/plain")
    @Idempotent
    @ResponseStatus(HttpStatus.CREATED)
    public Map<String, Object> textNote(@RequestBody String note) {
        return Map.of("id", insert(note));
    }

    /** A text body fingerprinted by its whole text, which Spring MVC reads in the charset its type names. */
    @PostMapping("/text-fingerprint")
    @Idempotent(fingerprint = "#body")
    @ResponseStatus(HttpStatus.CREATED)
    public Map<String, Object> textFingerprint(@RequestBody String note) {
        return Map.of("id", insert(note));
    }

    /** A form post whose handler reads the parameters from the request itself. */
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

    /**
     * Carries on after a {@code @Transactional} method it called failed: the transaction they share is marked
     * rollback-only, so the commit rolls back instead.
     */
    @PostMapping("/caught-inner-failure")
    @Idempotent
    @ResponseStatus(HttpStatus.CREATED)
    public Order caughtInnerFailure(@RequestBody OrderRequest request) {
        long id = insert(request.note());
        try {
            service.insertAndFail(request.note() + "-inner");
        } catch (IllegalStateException e) {
            // answered as if nothing had happened
        }
        return new Order(id, request.note(), request.amount());
    }

    /**
     * Writes a row, then refuses the request with 422 when a {@code @Transactional} method it called failed: the
     * failure left the transaction able only to roll back.
     */
    @PostMapping("/caught-inner-refusal")
    @Idempotent
    public ResponseEntity<Map<String, String>> caughtInnerRefusal(@RequestBody OrderRequest request) {
        insert(request.note());
        try {
            service.insertAndFail(request.note() + "-inner");
        } catch (IllegalStateException e) {
            return ResponseEntity.status(422).header("X-Refused", "inner")
                    .body(Map.of("refused", e.getMessage()));
        }
        return ResponseEntity.status(HttpStatus.CREATED).build();
    }

    /**
     * Writes a row, then marks its own transaction rollback-only, as a handler does that decides to keep nothing of a
     * request it refuses ({@code ?status=422}) or answers as a dry run ({@code ?status=201}): it joined the request's
     * transaction, which Spring marks rollback-only as the handler's ends.
     */
    @PostMapping("/marked-rollback-only")
    @Idempotent
    @Transactional
    public ResponseEntity<Map<String, String>> markedRollbackOnly(@RequestBody OrderRequest request,
                                                                  @RequestParam int status) {
        insert(request.note());
        org.springframework.transaction.interceptor.TransactionAspectSupport.currentTransactionStatus()
                .setRollbackOnly();
        return ResponseEntity.status(status).header("X-Refused", "marked").body(Map.of("refused", "marked"));
    }

    /**
     * Writes a row, then refuses the request with 422 when a statement of its own failed, which it caught: PostgreSQL
     * has aborted the transaction, of which Spring knows nothing. {@code ?status=201} answers 201 instead.
     */
    @PostMapping("/caught-own-refusal")
    @Idempotent
    public ResponseEntity<Map<String, String>> caughtOwnRefusal(@RequestBody OrderRequest request,
                                                                @RequestParam(defaultValue = "422") int status) {
        long id = insert(request.note());
        try {
            jdbc.sql("insert into orders (id, note) values (?, ?)").param(id).param(request.note()).update();
        } catch (org.springframework.dao.DuplicateKeyException e) {
            return ResponseEntity.status(status).header("X-Refused", "own").body(Map.of("refused", "duplicate"));
        }
        return ResponseEntity.status(HttpStatus.CREATED).build();
    }

    /** Writes a row that breaks a deferred constraint: the database refuses it only at commit. */
    @PostMapping("/fails-at-commit")
    @Idempotent
    @ResponseStatus(HttpStatus.CREATED)
    public Order failsAtCommit(@RequestBody OrderRequest request) {
        long id = insert(request.note());
        jdbc.sql("insert into order_audit (order_id) values (?)").param(-id).update();
        return new Order(id, request.note(), request.amount());
    }

    /**
     * Writes a row, then a statement the database refuses at once, which aborts the transaction in PostgreSQL; the
     * failure is answered by {@link FailureAdvice}, which reads the database to answer it.
     */
    @PostMapping("/fails-in-the-database")
    @Idempotent
    @ResponseStatus(HttpStatus.CREATED)
    public Order failsInTheDatabase(@RequestBody OrderRequest request) {
        long id = insert(request.note());
        try {
            jdbc.sql("insert into orders (id, note) values (?, ?)").param(id).param(request.note()).update();
        } catch (org.springframework.dao.DuplicateKeyException e) {
            throw new OrderConflict(request.note(), e);
        }
        return new Order(id, request.note(), request.amount());
    }

    /** A payment provider's callback: no header, keyed by the provider's transaction id. */
    @PostMapping("/callbacks")
    @Idempotent(key = "#body.transactionId", fingerprint = {"#body.amount", "#body.currency"})
    public Map<String, Object> callback(@RequestBody Map<String, Object> callback) {
        long id = insert("callback-" + callback.get("transactionId"));
        return Map.of("id", id, "received", callback.get("nonce"));
    }

    /** Keyed by a member of the body when the body has it. */
    @PostMapping("/optional-callbacks")
    @Idempotent(key = "#body.transactionId", keyRequired = false)
    public Map<String, Object> optionalCallback(@RequestBody Map<String, Object> callback) {
        return Map.of("id", insert("optional-callback-" + callback.get("note")));
    }

    /** Keyed by a member of the body read as a UUID, when the body has one; fingerprinted by an amount read as a number. */
    @PostMapping("/events")
    @Idempotent(key = "T(java.util.UUID).fromString(#body.eventId)", keyRequired = false,
            fingerprint = "T(java.lang.Long).parseLong(#body.amount)")
    public Map<String, Object> event(@RequestBody Map<String, Object> event) {
        return Map.of("id", insert("event-" + event.get("note")));
    }

    /** Keyed by a member of the body that is itself an object: a provider's reference made of several parts. */
    @PostMapping("/callbacks-by-reference")
    @Idempotent(key = "#body.reference")
    public Map<String, Object> callbackByReference(@RequestBody Map<String, Object> callback) {
        return Map.of("id", insert("reference-callback-" + callback.get("note")));
    }

    /** Fingerprinted by parameters that are an array and a double. */
    @PostMapping("/tagged")
    @Idempotent(fingerprint = {"#tags", "#weight"})
    public Map<String, Object> tagged(@RequestParam String[] tags, @RequestParam double weight,
                                      @RequestBody OrderRequest request) {
        return Map.of("id", insert(request.note()));
    }

    /** Keyed by a path variable, fingerprinting nothing. */
    @PostMapping("/by-reference/{reference}")
    @Idempotent(key = "#path.reference")
    public Map<String, Object> byReference(@PathVariable String reference, @RequestBody OrderRequest request) {
        long id = insert(request.note());
        return Map.of("id", id, "reference", reference);
    }

    /** A provider's callback under a route with a variable, keyed by the body and fingerprinting nothing named. */
    @PostMapping("/provider-callbacks/{provider}")
    @Idempotent(key = "#body.transactionId")
    public Map<String, Object> providerCallback(@PathVariable String provider, @RequestBody Map<String, Object> callback) {
        return Map.of("id", insert("provider-callback-" + callback.get("transactionId")), "provider", provider);
    }

    /**
     * A provider's webhook that takes its body as the text it came in (to check its signature, say), keyed by the
     * provider and a member of the body: {@code #body} is the request's body, the parameter of that name
     * notwithstanding, also once {@code #provider} has made the context load the arguments.
     */
    @PostMapping("/webhooks/{provider}")
    @Idempotent(key = "#provider + ':' + #body.eventId")
    public Map<String, Object> webhook(@PathVariable String provider, @RequestBody String body) {
        return Map.of("id", insert("webhook-" + provider + "-" + body));
    }

    /** A provider's refund callback under each payment's own path, keyed and fingerprinted by members of the body. */
    @PostMapping("/payments/{payment}/refunds")
    @Idempotent(key = "#body.refundId", fingerprint = "#body.amount")
    public Map<String, Object> refundCallback(@PathVariable long payment, @RequestBody Map<String, Object> callback) {
        return Map.of("id", insert("refund-" + callback.get("refundId")), "payment", payment);
    }

    /**
     * Fingerprinted by the body and the query's parameters as values, for a gateway that rebuilds queries: the order
     * and escaping of the parameters as sent do not count.
     */
    @PostMapping("/by-values")
    @Idempotent(fingerprint = {"#body", "#params"})
    public Map<String, Object> byValues(@RequestParam String currency, @RequestParam String channel,
                                        @RequestBody OrderRequest request) {
        return Map.of("id", insert(request.note()), "currency", currency, "channel", channel);
    }

    /** A provider's form-encoded callback without a header, keyed and fingerprinted by its fields. */
    @PostMapping("/form-callbacks")
    @Idempotent(key = "#params['transactionId']", fingerprint = "#params['amount']")
    public Map<String, Object> formCallback(@RequestParam String transactionId, @RequestParam String nonce,
                                            @RequestParam(required = false) String amount) {
        return Map.of("id", insert("form-callback-" + transactionId), "received", nonce,
                "amount", String.valueOf(amount));
    }

    /** Keyed by a request header, fingerprinted by a query parameter: a webhook that names its event in a header. */
    @PostMapping("/by-event-header")
    @Idempotent(key = "#headers['X-Event-Id']", fingerprint = "#params['amount']")
    public Map<String, Object> byEventHeader(@RequestBody OrderRequest request) {
        return Map.of("id", insert(request.note()));
    }

    /** Keyed by a request header, fingerprinted by another that the handler binds. */
    @PostMapping("/by-event-header/amount-header")
    @Idempotent(key = "#headers['X-Event-Id']", fingerprint = "#headers['X-Amount']")
    public Map<String, Object> byEventHeaderAmount(@RequestHeader("X-Amount") String amount,
                                                   @RequestBody OrderRequest request) {
        return Map.of("id", insert(request.note()), "amount", amount);
    }

    /** Keyed by an optional header the handler takes as an {@code Optional}: without it, no key. */
    @PostMapping("/by-optional-event")
    @Idempotent(key = "#eventId", keyRequired = false)
    public Map<String, Object> byOptionalEvent(@RequestHeader("X-Event-Id") java.util.Optional<String> eventId,
                                               @RequestBody OrderRequest request) {
        return Map.of("id", insert(request.note()));
    }

    /** Serves POST and PUT; under the default methods only its POST requests are idempotent. */
    @RequestMapping(path = "/{id}", method = {RequestMethod.POST, RequestMethod.PUT})
    @Idempotent
    public Map<String, Object> put(@PathVariable long id, @RequestBody OrderRequest request) {
        return Map.of("id", insert(request.note()));
    }

    /**
     * POST and PATCH under one scope the endpoint names, so that they share keys: a POST and a PATCH with one key are
     * two requests under it, told apart by their method alone.
     */
    @RequestMapping(path = "/shared-scope", method = {RequestMethod.POST, RequestMethod.PATCH})
    @Idempotent(scope = "orders-shared-scope")
    @ResponseStatus(HttpStatus.CREATED)
    public Map<String, Object> sharedScope(HttpServletRequest servletRequest, @RequestBody OrderRequest request) {
        return Map.of("id", insert(request.note()), "method", servletRequest.getMethod());
    }

    /**
     * Mapped to no method in particular, so that Spring MVC gives it a request whatever its method, also one spelled
     * in lower case, which the default methods cover as they cover POST.
     */
    @RequestMapping("/any-method")
    @Idempotent
    @ResponseStatus(HttpStatus.CREATED)
    public Map<String, Object> anyMethod(@RequestBody OrderRequest request) {
        return Map.of("id", insert(request.note()));
    }

    @PutMapping("/put-idempotent/{id}")
    @Idempotent(methods = "PUT")
    public Map<String, Object> idempotentPut(@PathVariable long id, @RequestBody OrderRequest request) {
        return Map.of("id", insert(request.note()));
    }

    @PostMapping("/store-everything/{status}")
    @Idempotent(storagePolicy = StoreEverything.class)
    public ResponseEntity<Map<String, Object>> storeEverything(@PathVariable int status,
                                                               @RequestBody OrderRequest request) {
        return ResponseEntity.status(status).body(Map.of("id", insert(request.note())));
    }

    /** Stores every answer, 5xx included: for endpoints whose failures are final. */
    public static class StoreEverything implements io.idempotency.core.StoragePolicy {
        @Override
        public boolean isStorable(int status) {
            return true;
        }
    }

    @PostMapping("/large")
    @Idempotent
    public ResponseEntity<String> large(@RequestParam int size, @RequestParam(defaultValue = "200") int status,
                                        @RequestBody OrderRequest request) {
        insert(request.note());
        return ResponseEntity.status(status).body("x".repeat(size));
    }

    /** Streams {@code megabytes} MiB of answer, as an export would; then fails if asked to. */
    @PostMapping("/streamed")
    @Idempotent
    public void streamed(@RequestParam int megabytes, @RequestParam(defaultValue = "false") boolean thenFail,
                         @RequestBody OrderRequest request, OutputStream body) throws IOException {
        insert(request.note());
        byte[] chunk = new byte[1024 * 1024];
        for (int i = 0; i < megabytes; i++) {
            body.write(chunk);
        }
        if (thenFail) {
            throw new org.springframework.web.server.ResponseStatusException(HttpStatus.UNPROCESSABLE_CONTENT,
                    "not this order");
        }
    }

    /**
     * Writes {@code size} bytes of answer under status {@code first}, then sets {@code then}: a status decided only
     * once the body is written.
     */
    @PostMapping("/restatused")
    @Idempotent
    public void restatused(@RequestParam int size, @RequestParam int first, @RequestParam int then,
                           @RequestBody OrderRequest request, HttpServletResponse response) throws IOException {
        insert(request.note());
        response.setStatus(first);
        response.setContentType("text/plain");
        response.getOutputStream().write("x".repeat(size).getBytes(StandardCharsets.US_ASCII));
        response.setStatus(then);
    }

    @PostMapping("/slow")
    @Idempotent
    @ResponseStatus(HttpStatus.CREATED)
    public Order slow(@RequestParam long millis, @RequestBody OrderRequest request) throws InterruptedException {
        long id = insert(request.note());
        Thread.sleep(millis);
        return new Order(id, request.note(), request.amount());
    }

    /** Whether the idempotency filter wrapped this request. */
    @RequestMapping(path = "/wrapped", method = {RequestMethod.GET, RequestMethod.POST, RequestMethod.PUT,
            RequestMethod.DELETE})
    public Map<String, Object> wrapped(jakarta.servlet.http.HttpServletRequest request) {
        return Map.of("wrapped", request.getAttribute("io.idempotency.spring.IdempotentExchange") != null);
    }

    @PostMapping("/optional")
    @Idempotent(keyRequired = false)
    @ResponseStatus(HttpStatus.CREATED)
    public Order optionalKey(@RequestBody OrderRequest request) {
        long id = insert(request.note());
        return new Order(id, request.note(), request.amount());
    }

    @PostMapping(path = "/multipart", consumes = "multipart/form-data")
    @Idempotent
    @ResponseStatus(HttpStatus.CREATED)
    public Order multipart(@RequestParam String note) {
        long id = insert(note);
        return new Order(id, note, null);
    }

    /** A multipart body on an endpoint whose key is optional. */
    @PostMapping(path = "/multipart/optional", consumes = "multipart/form-data")
    @Idempotent(keyRequired = false)
    @ResponseStatus(HttpStatus.CREATED)
    public Order multipartOptionally(@RequestParam String note) {
        long id = insert(note);
        return new Order(id, note, null);
    }

    @PostMapping("/plain")
    @ResponseStatus(HttpStatus.CREATED)
    public Order notIdempotent(@RequestBody OrderRequest request) {
        long id = insert(request.note());
        return new Order(id, request.note(), request.amount());
    }

    /** An order that conflicts with one the database holds; {@link FailureAdvice} looks the note up to answer it. */
    public static class OrderConflict extends RuntimeException {
        final String note;

        OrderConflict(String note, Throwable cause) {
            super("order conflicts with a stored one", cause);
            this.note = note;
        }
    }

    /** Turned into a response of the given status by {@link FailureAdvice}. */
    public static class OrderFailure extends RuntimeException {
        final int status;

        OrderFailure(int status) {
            super("order failed with " + status);
            this.status = status;
        }
    }
}
