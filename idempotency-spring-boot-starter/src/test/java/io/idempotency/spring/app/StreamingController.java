package io.idempotency.spring.app;

import org.springframework.http.MediaType;
import org.springframework.web.bind.annotation.RequestMapping;
import org.springframework.web.bind.annotation.RequestMethod;
import org.springframework.web.bind.annotation.RequestParam;
import org.springframework.web.bind.annotation.RestController;
import org.springframework.web.context.request.async.DeferredResult;
import org.springframework.web.context.request.async.WebAsyncTask;
import org.springframework.web.servlet.mvc.method.annotation.ResponseBodyEmitter;
import org.springframework.web.servlet.mvc.method.annotation.SseEmitter;
import org.springframework.web.servlet.mvc.method.annotation.StreamingResponseBody;

import java.io.IOException;
import java.nio.charset.StandardCharsets;

/**
 * Not idempotent: async answers that time out or fail after they began, mapped on POST, which the idempotency filter
 * wraps (some {@code @Idempotent} endpoint takes it), and on GET, which it leaves alone (none takes it), so that a
 * test can compare what the client gets either way. A stream of events answering a POST is common (a chat completion
 * streamed as it is generated), and each ends in one of these ways.
 */
@RestController
@RequestMapping(path = "/streams", method = {RequestMethod.GET, RequestMethod.POST})
public class StreamingController {

    /** How long the answers that time out wait, in milliseconds. */
    static final long TIMEOUT = 300;

    /** An event, then on the timeout the application completes the stream itself. */
    @RequestMapping("/events-timeout-handled")
    public SseEmitter eventsTimeoutHandled(@RequestParam String note) throws IOException {
        SseEmitter emitter = new SseEmitter(TIMEOUT);
        emitter.onTimeout(emitter::complete);
        emitter.send("first " + note);
        return emitter;
    }

    /** An event, then nothing until the timeout, which Spring MVC ends. */
    @RequestMapping("/events-timeout")
    public SseEmitter eventsTimeout(@RequestParam String note) throws IOException {
        SseEmitter emitter = new SseEmitter(TIMEOUT);
        emitter.send("first " + note);
        return emitter;
    }

    /** An event, then the work behind the stream fails. */
    @RequestMapping("/events-error")
    public SseEmitter eventsError(@RequestParam String note) {
        SseEmitter emitter = new SseEmitter();
        new Thread(() -> {
            try {
                emitter.send("first " + note);
                Thread.sleep(50);
                emitter.completeWithError(new IllegalStateException("the stream broke after " + note));
            } catch (IOException | InterruptedException e) {
                emitter.completeWithError(e);
            }
        }).start();
        return emitter;
    }

    /** The work behind the stream fails before anything was sent: an error page answers. */
    @RequestMapping("/emitter-error-early")
    public ResponseBodyEmitter emitterErrorEarly(@RequestParam String note) {
        ResponseBodyEmitter emitter = new ResponseBodyEmitter();
        new Thread(() -> emitter.completeWithError(new IllegalStateException("no stream for " + note))).start();
        return emitter;
    }

    /** Writes part of its body and flushes it, then fails. */
    @RequestMapping("/stream-error")
    public StreamingResponseBody streamError(@RequestParam String note) {
        return out -> {
            out.write(("first " + note + "\n").getBytes(StandardCharsets.UTF_8));
            out.flush();
            throw new IllegalStateException("the export broke after " + note);
        };
    }

    /** Never set: the timeout answers with the result given for it. */
    @RequestMapping("/deferred-timeout-result")
    public DeferredResult<String> deferredTimeoutResult(@RequestParam String note) {
        return new DeferredResult<>(TIMEOUT, "fallback " + note);
    }

    /**
     * Too slow: its timeout callback answers instead. The work ignores the interruption Spring MVC sends it on the
     * timeout: an interrupted work's own failure could race the callback's answer.
     */
    @RequestMapping(path = "/task-timeout", produces = MediaType.TEXT_PLAIN_VALUE)
    public WebAsyncTask<String> taskTimeout(@RequestParam String note) {
        WebAsyncTask<String> task = new WebAsyncTask<>(TIMEOUT, () -> {
            long end = System.nanoTime() + java.util.concurrent.TimeUnit.SECONDS.toNanos(3);
            while (System.nanoTime() < end) {
                try {
                    Thread.sleep(java.util.concurrent.TimeUnit.NANOSECONDS.toMillis(end - System.nanoTime()) + 1);
                } catch (InterruptedException ignored) {
                    // finishes its work all the same, and its result is dropped
                }
            }
            return "too late " + note;
        });
        task.onTimeout(() -> "fallback " + note);
        return task;
    }
}
