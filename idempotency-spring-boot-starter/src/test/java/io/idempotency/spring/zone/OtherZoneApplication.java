package io.idempotency.spring.zone;

import io.idempotency.core.IdempotencyMode;
import io.idempotency.core.IdempotencyRecord;
import io.idempotency.core.IdempotencyStore;
import io.idempotency.core.Idempotent;
import io.idempotency.core.ScopedKey;
import jakarta.servlet.http.HttpServletResponse;
import org.springframework.boot.SpringApplication;
import org.springframework.boot.autoconfigure.SpringBootApplication;
import org.springframework.http.HttpStatus;
import org.springframework.jdbc.core.simple.JdbcClient;
import org.springframework.web.bind.annotation.GetMapping;
import org.springframework.web.bind.annotation.PostMapping;
import org.springframework.web.bind.annotation.RequestBody;
import org.springframework.web.bind.annotation.RequestHeader;
import org.springframework.web.bind.annotation.RequestParam;
import org.springframework.web.bind.annotation.ResponseStatus;
import org.springframework.web.bind.annotation.RestController;

import java.util.Map;
import java.util.TimeZone;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * An application run in a JVM of its own, whose default time zone the command line sets ({@code -Duser.timezone}):
 * one endpoint in the default mode, one intent-first with a short lease, counting their executions.
 */
@SpringBootApplication
public class OtherZoneApplication {

    /** 2026-01-01T00:00:00Z, the time the payments endpoint gives as its answer's Last-Modified. */
    public static final long LAST_MODIFIED = 1767225600000L;

    public static void main(String[] args) {
        System.out.println("JVM time zone: " + TimeZone.getDefault().getID());
        SpringApplication.run(OtherZoneApplication.class, args);
    }

    @RestController
    static class Payments {

        private final Map<String, AtomicInteger> executions = new ConcurrentHashMap<>();
        private final JdbcClient jdbc;
        private final IdempotencyStore store;

        Payments(JdbcClient jdbc, IdempotencyStore store) {
            this.jdbc = jdbc;
            this.store = store;
        }

        /** A record's times as the store reads them in this JVM: claimed, expiring, lease end (or null). */
        @GetMapping("/zone/record")
        public String record(@RequestParam String scope, @RequestParam String key) {
            IdempotencyRecord record = store.find(new ScopedKey("", scope, key)).orElseThrow();
            return record.createdAt() + " " + record.expiresAt() + " " + record.lockedUntil();
        }

        /** The time zone of the application's database sessions. */
        @GetMapping("/zone/session")
        public String sessionZone() {
            return jdbc.sql("SHOW TimeZone").query(String.class).single();
        }

        @PostMapping("/zone/payments")
        @Idempotent
        @ResponseStatus(HttpStatus.CREATED)
        public Map<String, Object> pay(@RequestBody Map<String, String> body, HttpServletResponse response) {
            response.setDateHeader("Last-Modified", LAST_MODIFIED);
            return Map.of("note", body.get("note"), "execution", count(body.get("note")));
        }

        @PostMapping("/zone/charges")
        @Idempotent(mode = IdempotencyMode.INTENT_FIRST, lease = "8s")
        @ResponseStatus(HttpStatus.CREATED)
        public Map<String, Object> charge(@RequestBody Map<String, String> body,
                                          @RequestHeader(name = "X-Fail", defaultValue = "no") String fail) {
            int execution = count(body.get("note"));
            if (fail.equals("unknown")) {
                throw new IllegalStateException("the gateway timed out: outcome unknown");
            }
            return Map.of("note", body.get("note"), "execution", execution);
        }

        @GetMapping("/zone/executions")
        public int executions(@RequestParam String note) {
            AtomicInteger count = executions.get(note);
            return count == null ? 0 : count.get();
        }

        private int count(String note) {
            return executions.computeIfAbsent(note, n -> new AtomicInteger()).incrementAndGet();
        }
    }
}
