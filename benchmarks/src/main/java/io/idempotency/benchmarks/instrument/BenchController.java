package io.idempotency.benchmarks.instrument;

import org.springframework.boot.context.event.ApplicationReadyEvent;
import org.springframework.context.event.EventListener;
import org.springframework.http.ResponseEntity;
import org.springframework.web.bind.annotation.GetMapping;
import org.springframework.web.bind.annotation.PostMapping;
import org.springframework.web.bind.annotation.RestController;

import java.util.Map;

/** The load generator's window into the application: readiness and the statistics of {@link BenchStats}. */
@RestController
public class BenchController {

    private final BenchStats stats;
    private volatile boolean ready;

    public BenchController(BenchStats stats) {
        this.stats = stats;
    }

    @EventListener(ApplicationReadyEvent.class)
    void ready() {
        ready = true;
    }

    @GetMapping("/bench/ready")
    ResponseEntity<String> isReady() {
        return ready ? ResponseEntity.ok("ready") : ResponseEntity.status(503).body("starting");
    }

    @GetMapping("/bench/stats")
    Map<String, Object> stats() {
        return stats.toMap();
    }

    @PostMapping("/bench/reset")
    ResponseEntity<Void> reset() {
        stats.reset();
        return ResponseEntity.noContent().build();
    }
}
