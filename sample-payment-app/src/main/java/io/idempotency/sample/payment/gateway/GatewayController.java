package io.idempotency.sample.payment.gateway;

import org.springframework.http.HttpStatus;
import org.springframework.http.MediaType;
import org.springframework.http.ProblemDetail;
import org.springframework.http.ResponseEntity;
import org.springframework.web.bind.annotation.GetMapping;
import org.springframework.web.bind.annotation.PostMapping;
import org.springframework.web.bind.annotation.RequestBody;
import org.springframework.web.bind.annotation.RequestHeader;
import org.springframework.web.bind.annotation.RequestMapping;
import org.springframework.web.bind.annotation.RequestParam;
import org.springframework.web.bind.annotation.RestController;

import java.math.BigDecimal;
import java.net.URI;
import java.util.ArrayList;
import java.util.List;
import java.util.Optional;
import java.util.regex.Pattern;

/**
 * A fake external payment gateway, served by the sample under {@code /gateway/**} so that the sample needs nothing
 * else to run. Treat it as another company's system: it has its own table ({@code gateway_ledger}), and the
 * application's charges side reaches it only over HTTP, like any third party. Like real gateways (Stripe, Adyen) it
 * deduplicates on the {@code Idempotency-Key} its client sends: a charge sent again with the same key is not booked
 * again, and the answer is the charge booked the first time.
 *
 * <ul>
 *   <li>{@code POST /gateway/charges}, header {@code Idempotency-Key} (1 to 64 characters), body
 *       {@code {"orderId":"o-1","amount":"12.50","currency":"EUR"}} → {@code 201} with the new ledger entry, or
 *       {@code 200} with the entry already booked under the key (whatever the body says); {@code 402} problem when
 *       the charge is declined (amounts above {@value #LIMIT}; nothing is booked, so the same key may be sent again);
 *       {@code 400} problem for an invalid request.</li>
 *   <li>{@code GET /gateway/charges?orderId=o-1} → the order's ledger entries, oldest first.</li>
 *   <li>{@code GET /gateway/charges/by-key} (header {@code Idempotency-Key}) → the entry booked under the key, or
 *       {@code 404}.</li>
 * </ul>
 * Not {@code @Idempotent}: the gateway's deduplication is its own, the unique index on its ledger's key.
 */
@RestController
@RequestMapping("/gateway/charges")
public class GatewayController {

    /** The header carrying the gateway's idempotency key. */
    public static final String KEY_HEADER = "Idempotency-Key";

    /** The largest amount the gateway charges; larger ones are declined (402). */
    public static final String LIMIT = "10000.00";

    static final int MAX_KEY_LENGTH = 64;

    private static final String PROBLEM_TYPE_BASE = "https://idempotency-starter.github.io/problems/sample/gateway/";
    private static final BigDecimal LIMIT_AMOUNT = new BigDecimal(LIMIT);
    private static final Pattern AMOUNT = Pattern.compile("[0-9]{1,17}(\\.[0-9]{1,2})?");
    private static final Pattern CURRENCY = Pattern.compile("[A-Z]{3}");

    private final GatewayLedger ledger;

    /** @param ledger the gateway's own table */
    public GatewayController(GatewayLedger ledger) {
        this.ledger = ledger;
    }

    /** Books a charge under the key, once: 201 when booked now, 200 with the earlier entry, 402 when declined. */
    @PostMapping(consumes = MediaType.APPLICATION_JSON_VALUE,
            produces = {MediaType.APPLICATION_JSON_VALUE, MediaType.APPLICATION_PROBLEM_JSON_VALUE})
    public ResponseEntity<?> charge(@RequestHeader(name = KEY_HEADER, required = false) String key,
                                    @RequestBody GatewayChargeRequest request) {
        List<String> errors = new ArrayList<>();
        if (key == null || key.isBlank() || key.length() > MAX_KEY_LENGTH) {
            errors.add(KEY_HEADER + " must be 1 to " + MAX_KEY_LENGTH + " characters");
        }
        if (request.orderId() == null || request.orderId().isBlank() || request.orderId().length() > 64) {
            errors.add("orderId must be 1 to 64 characters");
        }
        BigDecimal amount = null;
        if (request.amount() == null || !AMOUNT.matcher(request.amount()).matches()
                || (amount = new BigDecimal(request.amount())).signum() <= 0) {
            errors.add("amount must be a positive decimal with at most two fraction digits");
        }
        if (request.currency() == null || !CURRENCY.matcher(request.currency()).matches()) {
            errors.add("currency must be three upper-case letters");
        }
        if (!errors.isEmpty()) {
            return problem(HttpStatus.BAD_REQUEST, "invalid-charge", "Invalid charge request",
                    String.join("; ", errors));
        }
        ledger.logCall(key, request.orderId());
        // A booked key answers with its charge before any rule is applied: the same request gets the same outcome.
        Optional<LedgerEntry> booked = ledger.findByKey(key);
        if (booked.isPresent()) {
            return ResponseEntity.ok(booked.get());
        }
        if (amount.compareTo(LIMIT_AMOUNT) > 0) {
            return problem(HttpStatus.PAYMENT_REQUIRED, "charge-declined", "Charge declined",
                    "The amount is above the gateway's limit of " + LIMIT + " per charge.");
        }
        Optional<LedgerEntry> created = ledger.insertUnlessBooked(key, request.orderId(), amount.setScale(2),
                request.currency());
        if (created.isPresent()) {
            return ResponseEntity.status(HttpStatus.CREATED).body(created.get());
        }
        // A concurrent call with the same key booked it between our look-up and our insert.
        return ResponseEntity.ok(ledger.findByKey(key).orElseThrow(() -> new IllegalStateException(
                "the charge under key " + key + " conflicted on insert but cannot be read")));
    }

    /** The ledger entries of one order, oldest first. */
    @GetMapping(params = "orderId", produces = MediaType.APPLICATION_JSON_VALUE)
    public List<LedgerEntry> byOrder(@RequestParam String orderId) {
        return ledger.findByOrderId(orderId);
    }

    /** The entry booked under {@code key}: 200, or 404 when nothing is booked under it. */
    @GetMapping(path = "/by-key", produces = {MediaType.APPLICATION_JSON_VALUE,
            MediaType.APPLICATION_PROBLEM_JSON_VALUE})
    public ResponseEntity<?> byKey(@RequestHeader("Idempotency-Key") String key) {
        return ledger.findByKey(key)
                .<ResponseEntity<?>>map(ResponseEntity::ok)
                .orElseGet(() -> problem(HttpStatus.NOT_FOUND, "no-such-charge", "No such charge",
                        "Nothing is booked under this idempotency key."));
    }

    private static ResponseEntity<ProblemDetail> problem(HttpStatus status, String type, String title, String detail) {
        ProblemDetail problem = ProblemDetail.forStatusAndDetail(status, detail);
        problem.setType(URI.create(PROBLEM_TYPE_BASE + type));
        problem.setTitle(title);
        return ResponseEntity.status(status).contentType(MediaType.APPLICATION_PROBLEM_JSON).body(problem);
    }
}
