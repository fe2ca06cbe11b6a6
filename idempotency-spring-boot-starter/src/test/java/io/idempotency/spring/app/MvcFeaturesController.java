package io.idempotency.spring.app;

import io.idempotency.core.Idempotent;
import org.springframework.http.CacheControl;
import org.springframework.http.HttpStatus;
import org.springframework.http.MediaType;
import org.springframework.http.ResponseEntity;
import org.springframework.jdbc.core.simple.JdbcClient;
import org.springframework.web.ErrorResponseException;
import org.springframework.web.bind.annotation.ExceptionHandler;
import org.springframework.web.bind.annotation.PostMapping;
import org.springframework.web.bind.annotation.RequestBody;
import org.springframework.web.bind.annotation.RequestMapping;
import org.springframework.web.bind.annotation.ResponseStatus;
import org.springframework.web.bind.annotation.RestController;
import org.springframework.web.server.ResponseStatusException;

import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.util.Map;
import java.util.zip.GZIPOutputStream;

/**
 * Endpoints whose answer Spring MVC shapes around the handler (body advice, interceptors, {@code @ResponseStatus},
 * problem details), each also mapped without {@code @Idempotent} under {@code /unguarded}, to compare the two.
 */
@RestController
@RequestMapping("/mvc")
public class MvcFeaturesController {

    public record Note(String note) {
    }

    private final JdbcClient jdbc;
    private final OrderService service;

    public MvcFeaturesController(JdbcClient jdbc, OrderService service) {
        this.jdbc = jdbc;
        this.service = service;
    }

    /** Refuses a note after writing it; answered by {@link #noteRefused}. */
    public static class NoteRefused extends RuntimeException {

        final String note;

        NoteRefused(String note) {
            super("note refused");
            this.note = note;
        }
    }

    @PostMapping("/refused-note")
    @Idempotent
    public Map<String, Object> refusedNote(@RequestBody Note request) {
        insert(request.note());
        throw new NoteRefused(request.note());
    }

    /** Records the refusal through an {@code @Idempotent} service method, after the handler's attempt ended. */
    @ExceptionHandler(NoteRefused.class)
    public ResponseEntity<Map<String, Object>> noteRefused(NoteRefused refused) {
        long id = service.insert(refused.note + "-refusal");
        return ResponseEntity.status(HttpStatus.UNPROCESSABLE_CONTENT).body(Map.of("refusal", id));
    }

    private long insert(String note) {
        return jdbc.sql("insert into orders (note) values (?) returning id").param(note).query(Long.class).single();
    }

    /** Its body is wrapped by {@link MvcFeaturesConfiguration.WrappingBodyAdvice}. */
    @PostMapping({"/wrapped", "/intercepted", "/advice-fails", "/post-handled"})
    @Idempotent
    @ResponseStatus(HttpStatus.CREATED)
    public Map<String, Object> plain(@RequestBody Note request) {
        return Map.of("id", insert(request.note()));
    }

    /**
     * Answers 200 without {@code @ResponseStatus}: Spring MVC then passes a returned {@code null} (what the handler gives
     * back when it did not run) to {@link MvcFeaturesConfiguration.WrappingBodyAdvice}, which cannot wrap it.
     */
    @PostMapping("/ok/wrapped")
    @Idempotent
    public Map<String, Object> plainOk(@RequestBody Note request) {
        return Map.of("id", insert(request.note()));
    }

    @PostMapping({"/unguarded/wrapped", "/unguarded/intercepted", "/unguarded/advice-fails"})
    @ResponseStatus(HttpStatus.CREATED)
    public Map<String, Object> plainUnguarded(@RequestBody Note request) {
        return plain(request);
    }

    /** A body the handler compressed itself, and says so. */
    @PostMapping("/gzipped")
    @Idempotent
    public ResponseEntity<byte[]> gzipped(@RequestBody Note request) {
        long id = insert(request.note());
        return ResponseEntity.status(HttpStatus.CREATED)
                .contentType(MediaType.APPLICATION_JSON)
                .header("Content-Encoding", "gzip")
                .body(gzip("{\"id\":" + id + "}"));
    }

    /** An answer the storage policy does not keep. */
    @PostMapping("/intercepted/unavailable")
    @Idempotent
    public ResponseEntity<Map<String, Object>> unavailable(@RequestBody Note request) {
        return ResponseEntity.status(HttpStatus.SERVICE_UNAVAILABLE).body(Map.of("id", insert(request.note())));
    }

    @PostMapping("/caching")
    @Idempotent
    public ResponseEntity<Map<String, Object>> caching(@RequestBody Note request) {
        return ResponseEntity.status(HttpStatus.CREATED)
                .cacheControl(CacheControl.noStore())
                .varyBy("Accept-Language")
                .body(Map.of("id", insert(request.note())));
    }

    /** A body above the default compression threshold (2 KB). */
    @PostMapping("/large")
    @Idempotent
    @ResponseStatus(HttpStatus.CREATED)
    public Map<String, Object> large(@RequestBody Note request) {
        return Map.of("id", insert(request.note()), "padding", "x".repeat(10_000));
    }

    @PostMapping("/unguarded/large")
    @ResponseStatus(HttpStatus.CREATED)
    public Map<String, Object> largeUnguarded(@RequestBody Note request) {
        return large(request);
    }

    @PostMapping("/status-exception")
    @Idempotent
    public Map<String, Object> statusException(@RequestBody Note request) {
        insert(request.note());
        throw new ResponseStatusException(HttpStatus.UNPROCESSABLE_CONTENT, "not this note");
    }

    @PostMapping("/unguarded/status-exception")
    public Map<String, Object> statusExceptionUnguarded(@RequestBody Note request) {
        return statusException(request);
    }

    @PostMapping("/error-response")
    @Idempotent
    public Map<String, Object> errorResponse(@RequestBody Note request) {
        insert(request.note());
        throw new ErrorResponseException(HttpStatus.BAD_REQUEST);
    }

    private static byte[] gzip(String text) {
        ByteArrayOutputStream bytes = new ByteArrayOutputStream();
        try (GZIPOutputStream out = new GZIPOutputStream(bytes)) {
            out.write(text.getBytes(StandardCharsets.UTF_8));
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
        return bytes.toByteArray();
    }
}
