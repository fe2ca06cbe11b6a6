package io.idempotency.spring.app;

import io.idempotency.core.Idempotent;
import jakarta.servlet.ServletInputStream;
import jakarta.servlet.http.HttpServletRequest;
import jakarta.servlet.http.HttpServletResponse;
import org.springframework.http.ResponseEntity;
import org.springframework.jdbc.core.simple.JdbcClient;
import org.springframework.web.bind.annotation.PostMapping;
import org.springframework.web.bind.annotation.RequestBody;
import org.springframework.web.bind.annotation.RequestMapping;
import org.springframework.web.bind.annotation.RequestParam;
import org.springframework.web.bind.annotation.RestController;

import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.OutputStream;
import java.io.PrintWriter;
import java.nio.ByteBuffer;
import java.nio.charset.Charset;
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

    @PostMapping("/processing")
    @Idempotent
    public void processing(@RequestBody OrderController.OrderRequest request, HttpServletResponse response)
            throws IOException {
        response.sendError(102); // Jetty sends 102 Processing this way
        long id = insert(request.note(), false);
        response.setStatus(201);
        response.setContentType("text/plain;charset=UTF-8");
        response.getWriter().write("order " + id);
    }

    /**
     * Writes the start of its answer through the writer and the rest through the output stream, which the Servlet
     * specification forbids (the container refuses the second of them): the answer fails, with or without the library.
     */
    @PostMapping("/writer-then-stream")
    @Idempotent
    public void writerThenStream(@RequestBody OrderController.OrderRequest request, HttpServletResponse response)
            throws IOException {
        writeThroughBoth(request, response);
    }

    @PostMapping("/unguarded/writer-then-stream")
    public void writerThenStreamUnguarded(@RequestBody OrderController.OrderRequest request,
                                          HttpServletResponse response) throws IOException {
        writeThroughBoth(request, response);
    }

    /** The same the other way round: the output stream first, then the writer. */
    @PostMapping("/stream-then-writer")
    @Idempotent
    public void streamThenWriter(@RequestBody OrderController.OrderRequest request, HttpServletResponse response)
            throws IOException {
        long id = insert(request.note(), false);
        response.setStatus(201);
        response.setContentType("text/plain;charset=UTF-8");
        response.getOutputStream().write("order ".getBytes(StandardCharsets.UTF_8));
        response.getWriter().write(String.valueOf(id));
    }

    private void writeThroughBoth(OrderController.OrderRequest request, HttpServletResponse response)
            throws IOException {
        long id = insert(request.note(), false);
        response.setStatus(201);
        response.setContentType("text/plain;charset=UTF-8");
        response.getWriter().write("order ");
        response.getOutputStream().write(String.valueOf(id).getBytes(StandardCharsets.UTF_8));
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

    /** Writes its answer with {@code ServletOutputStream.write(ByteBuffer)} (Servlet 6.1), heap or direct buffers. */
    @PostMapping("/byte-buffer")
    @Idempotent
    public void byteBuffer(@RequestBody OrderController.OrderRequest request, @RequestParam boolean direct,
                           @RequestParam(defaultValue = "false") boolean failAtCommit, HttpServletResponse response)
            throws IOException {
        writeByteBuffers(insert(request.note(), failAtCommit), direct, response);
    }

    /** {@link #byteBuffer} on an endpoint that is not idempotent, whose request still passes the library's filter. */
    @PostMapping("/byte-buffer-not-idempotent")
    public void byteBufferNotIdempotent(@RequestBody OrderController.OrderRequest request, @RequestParam boolean direct,
                                        HttpServletResponse response) throws IOException {
        writeByteBuffers(insert(request.note(), false), direct, response);
    }

    private static void writeByteBuffers(long id, boolean direct, HttpServletResponse response) throws IOException {
        response.setStatus(201);
        response.setContentType("text/plain");
        for (String part : new String[] {"order ", Long.toString(id), " in buffers"}) {
            byte[] bytes = part.getBytes(StandardCharsets.UTF_8);
            int capacity = bytes.length + 4;
            ByteBuffer buffer = direct ? ByteBuffer.allocateDirect(capacity) : ByteBuffer.allocate(capacity);
            buffer.put(new byte[] {'x', 'x'}).put(bytes).put(new byte[] {'y', 'y'});
            buffer.position(2).limit(2 + bytes.length); // only the part: the bytes around it are not written
            response.getOutputStream().write(buffer);
        }
    }

    /** Reads its body with {@code ServletInputStream.read(ByteBuffer)} (Servlet 6.1): the note is the whole body. */
    @PostMapping("/read-byte-buffer")
    @Idempotent
    public ResponseEntity<String> readByteBuffer(HttpServletRequest request, @RequestParam boolean direct)
            throws IOException {
        String note = readWithByteBuffers(request.getInputStream(), direct);
        return ResponseEntity.status(201).body("order " + insert(note, false) + " " + note);
    }

    /** {@link #readByteBuffer} on an endpoint that is not idempotent, whose request still passes the filter. */
    @PostMapping("/read-byte-buffer-not-idempotent")
    public ResponseEntity<String> readByteBufferNotIdempotent(HttpServletRequest request, @RequestParam boolean direct)
            throws IOException {
        String note = readWithByteBuffers(request.getInputStream(), direct);
        return ResponseEntity.status(201).body("order " + insert(note, false) + " " + note);
    }

    private static String readWithByteBuffers(ServletInputStream in, boolean direct) throws IOException {
        ByteArrayOutputStream body = new ByteArrayOutputStream();
        ByteBuffer buffer = direct ? ByteBuffer.allocateDirect(7) : ByteBuffer.allocate(7); // several reads
        int n;
        while ((n = in.read(buffer)) != -1) {
            // Servlet 6.1: the bytes read are between the buffer's position at the call and its limit
            byte[] bytes = new byte[buffer.remaining()];
            buffer.get(bytes);
            body.write(bytes, 0, bytes.length);
            buffer.clear();
            if (n == 0 && in.isFinished()) {
                break;
            }
        }
        return body.toString(StandardCharsets.UTF_8);
    }

    /** Writes part of a body, then redirects with {@code sendRedirect(location, 303, clearBuffer)} (Servlet 6.1). */
    @PostMapping("/redirect")
    @Idempotent
    public void redirect(@RequestBody OrderController.OrderRequest request, @RequestParam boolean clearBuffer,
                         @RequestParam(defaultValue = "false") boolean failAtCommit, HttpServletResponse response)
            throws IOException {
        long id = insert(request.note(), failAtCommit);
        response.setContentType("text/plain");
        response.getOutputStream().write(("see order " + id).getBytes(StandardCharsets.UTF_8));
        response.sendRedirect("/orders/" + id, 303, clearBuffer);
    }

    /** {@link #redirect} on an endpoint that is not idempotent: what the container does alone. */
    @PostMapping("/redirect-not-idempotent")
    public void redirectNotIdempotent(@RequestBody OrderController.OrderRequest request,
                                      @RequestParam boolean clearBuffer, HttpServletResponse response)
            throws IOException {
        long id = insert(request.note(), false);
        response.setContentType("text/plain");
        response.getOutputStream().write(("see order " + id).getBytes(StandardCharsets.UTF_8));
        response.sendRedirect("/orders/" + id, 303, clearBuffer);
    }

    /**
     * Text in a charset chosen with {@code setCharacterEncoding(Charset)} (Servlet 6.1) or named in the content type,
     * then written with {@code getWriter()}; the writer's {@code checkError()} is reported in a header.
     */
    @PostMapping("/charset")
    @Idempotent
    public void charset(@RequestBody OrderController.OrderRequest request, @RequestParam String charset,
                        @RequestParam boolean inContentType, @RequestParam(defaultValue = "false") boolean failAtCommit,
                        HttpServletResponse response) throws IOException {
        writeText(insert(request.note(), failAtCommit), charset, inContentType, response);
    }

    /** {@link #charset} on an endpoint that is not idempotent: what the container does alone. */
    @PostMapping("/charset-not-idempotent")
    public void charsetNotIdempotent(@RequestBody OrderController.OrderRequest request, @RequestParam String charset,
                                     @RequestParam boolean inContentType, HttpServletResponse response)
            throws IOException {
        writeText(insert(request.note(), false), charset, inContentType, response);
    }

    /** How each {@link #ticks} request ended: true when its writer reported an error (the client gone). */
    private static final Map<String, java.util.concurrent.CompletableFuture<Boolean>> TICKS_ENDED =
            new java.util.concurrent.ConcurrentHashMap<>();

    /** How the {@link #ticks} request {@code id} ends. */
    public static java.util.concurrent.CompletableFuture<Boolean> ticksEnded(String id) {
        return TICKS_ENDED.computeIfAbsent(id, any -> new java.util.concurrent.CompletableFuture<>());
    }

    /**
     * Not idempotent: writes a line every 50 ms until its writer reports an error, as servlet code that streams to a
     * client notices that the client went away (for at most 20 s).
     */
    @org.springframework.web.bind.annotation.RequestMapping(path = "/ticks", method = {
            org.springframework.web.bind.annotation.RequestMethod.GET,
            org.springframework.web.bind.annotation.RequestMethod.POST})
    public void ticks(@RequestParam String id, HttpServletResponse response) throws IOException, InterruptedException {
        response.setContentType("text/plain");
        PrintWriter writer = response.getWriter();
        long deadline = System.nanoTime() + java.util.concurrent.TimeUnit.SECONDS.toNanos(20);
        boolean error = false;
        while (System.nanoTime() < deadline && !(error = writer.checkError())) {
            writer.write("tick\n");
            writer.flush();
            Thread.sleep(50);
        }
        ticksEnded(id).complete(error);
    }

    private static void writeText(long id, String charset, boolean inContentType, HttpServletResponse response)
            throws IOException {
        response.setStatus(201);
        if (inContentType) {
            response.setContentType("text/plain;charset=" + charset);
        } else {
            response.setCharacterEncoding(Charset.forName(charset));
            response.setContentType("text/plain");
        }
        PrintWriter writer = response.getWriter();
        writer.print("order " + id + " \u20ac \u00e9");
        response.setHeader("X-Writer-Error", Boolean.toString(writer.checkError()));
    }
}
