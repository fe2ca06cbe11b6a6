package io.idempotency.spring.app;

import io.idempotency.core.DefiniteFailureException;
import io.idempotency.core.Idempotent;
import io.idempotency.core.IdempotencyContext;
import io.idempotency.core.IdempotencyMode;
import org.springframework.http.ResponseEntity;
import org.springframework.jdbc.core.simple.JdbcClient;
import org.springframework.web.bind.annotation.PostMapping;
import org.springframework.web.bind.annotation.RequestBody;
import org.springframework.web.bind.annotation.RequestMapping;
import org.springframework.web.bind.annotation.RequestHeader;
import org.springframework.web.bind.annotation.RestController;

import java.net.URI;
import java.util.Map;

/**
 * Charges through the {@link FakeGateway} in intent-first mode, slow or failing on demand (headers, which are not
 * part of the request's fingerprint, so a retry without them is the same request).
 */
@RestController
@RequestMapping("/intent")
public class IntentController {

    private final FakeGateway gateway;
    private final JdbcClient jdbc;

    public IntentController(FakeGateway gateway, JdbcClient jdbc) {
        this.gateway = gateway;
        this.jdbc = jdbc;
    }

    @PostMapping("/charges")
    @Idempotent(mode = IdempotencyMode.INTENT_FIRST, lease = "1s")
    public ResponseEntity<Map<String, Object>> charge(@RequestBody OrderController.OrderRequest request,
                                                      @RequestHeader(name = "X-Sleep-Ms", defaultValue = "0") long sleepMs,
                                                      @RequestHeader(name = "X-Fail", defaultValue = "none") String fail)
            throws InterruptedException {
        if (fail.equals("definite-before")) {
            throw new DefiniteFailureException("declined before charging");
        }
        long charge = gateway.charge(IdempotencyContext.require().downstreamKey());
        long id = jdbc.sql("insert into orders (note) values (?) returning id").param(request.note())
                .query(Long.class).single(); // a local write after the external call: commits with the result
        Thread.sleep(sleepMs);
        if (fail.equals("at-commit")) { // a deferred constraint: the local transaction fails when it commits
            jdbc.sql("insert into order_audit (order_id) values (?)").param(-id).update();
        }
        if (fail.equals("unknown")) {
            throw new IllegalStateException("gateway timed out: did the charge happen?");
        }
        if (fail.equals("too-large")) { // more than idempotency.max-stored-body-size (1 MB)
            return ResponseEntity.ok(Map.of("charge", charge, "id", id, "receipt", "x".repeat(1_100_000)));
        }
        return ResponseEntity.created(URI.create("/intent/charges/" + id)).body(Map.of("charge", charge, "id", id));
    }

    /**
     * As {@link #charge}, with a lease a retry sent right after the answer meets on a loaded machine too: there a
     * request can take most of a second, and a claim of {@code /charges} may be stale by the time the next one comes.
     */
    @PostMapping("/charges-with-a-longer-lease")
    @Idempotent(mode = IdempotencyMode.INTENT_FIRST, lease = "3s")
    public ResponseEntity<Map<String, Object>> chargeWithALongerLease(@RequestBody OrderController.OrderRequest request,
                                                                       @RequestHeader(name = "X-Sleep-Ms", defaultValue = "0") long sleepMs,
                                                                       @RequestHeader(name = "X-Fail", defaultValue = "none") String fail)
            throws InterruptedException {
        return charge(request, sleepMs, fail);
    }

    /**
     * As {@link #charge}, with a lease that a renewal late by up to a second on a loaded machine still keeps, for a
     * test that watches the lease while the application is busy shutting down.
     */
    @PostMapping("/charges-with-a-two-second-lease")
    @Idempotent(mode = IdempotencyMode.INTENT_FIRST, lease = "2s")
    public ResponseEntity<Map<String, Object>> chargeWithATwoSecondLease(@RequestBody OrderController.OrderRequest request,
                                                                          @RequestHeader(name = "X-Sleep-Ms", defaultValue = "0") long sleepMs)
            throws InterruptedException {
        return charge(request, sleepMs, "none");
    }

    @PostMapping("/long-lease")
    @Idempotent(mode = IdempotencyMode.INTENT_FIRST, lease = "10s")
    public ResponseEntity<Map<String, Object>> longLease(@RequestBody OrderController.OrderRequest request,
                                                         @RequestHeader(name = "X-Sleep-Ms", defaultValue = "0") long sleepMs)
            throws InterruptedException {
        return charge(request, sleepMs, "none");
    }
}
