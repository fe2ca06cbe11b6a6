package io.idempotency.sample.payment;

import io.idempotency.core.IdempotencyContext;
import io.idempotency.core.Idempotent;
import jakarta.servlet.http.HttpServletRequest;
import org.springframework.http.HttpStatus;
import org.springframework.http.MediaType;
import org.springframework.http.ResponseEntity;
import org.springframework.web.bind.annotation.GetMapping;
import org.springframework.web.bind.annotation.PathVariable;
import org.springframework.web.bind.annotation.PostMapping;
import org.springframework.web.bind.annotation.RequestBody;
import org.springframework.web.bind.annotation.RequestHeader;
import org.springframework.web.bind.annotation.RequestMapping;
import org.springframework.web.bind.annotation.RequestParam;
import org.springframework.web.bind.annotation.RestController;
import org.springframework.web.server.ResponseStatusException;

import java.net.URI;
import java.util.List;
import java.util.Optional;

/**
 * The payment API.
 *
 * <p>{@code POST /payments} is {@link Idempotent}: the client sends an {@code Idempotency-Key} header, and however
 * often the request is repeated (a timeout, a double click, a crash between commit and answer) at most one payment
 * is written and every repetition gets the first answer back. The method itself contains no idempotency code and
 * no {@code @Transactional}: the starter opens the transaction before the method runs and commits it after the
 * answer has been rendered, together with the stored answer.
 *
 * <p>Behind the key stands a second wall ({@code sample.second-wall.enabled}, on by default): one payment per payer
 * and order, enforced by a unique index. Idempotency records are deleted after their retention period, and a request
 * replayed after that runs again; the second wall turns that replay into {@code 200 OK} with the payment that already
 * exists, instead of a second payment.
 */
@RestController
@RequestMapping("/payments")
public class PaymentController {

    private final PaymentRepository payments;
    private final Payers payers;
    private final FaultInjector faults;
    private final boolean secondWall;

    /**
     * @param payments   the payment table
     * @param payers     the payer of a read, as the writes record it
     * @param faults     fault injection ({@code X-Chaos}), inert unless enabled
     * @param secondWall whether one payment per payer and order is enforced
     */
    public PaymentController(PaymentRepository payments, Payers payers, FaultInjector faults,
                             SecondWallProperties secondWall) {
        this.payments = payments;
        this.payers = payers;
        this.faults = faults;
        this.secondWall = secondWall.enabled();
    }

    /**
     * Creates a payment: 201 with the payment and its {@code Location}; 400 problem+json for an invalid body.
     * Everything that can be refused is checked before the first write, so a refused request leaves no row.
     *
     * <p>With the second wall on, a payer who already paid the order (under another key, or under a key whose record
     * is gone) gets {@code 200 OK} with the existing payment and its {@code Location}, and nothing is written; if
     * the amount or currency differ, it is not the same payment but a conflicting one: 409 problem+json
     * ({@link PaymentExceptionHandler#ORDER_ALREADY_PAID}), nothing written.
     *
     * <p>The payer is the caller the starter scopes the key by ({@code IdempotencyContext.require().key().caller()}):
     * the principal's name by default, {@code ""} when anonymous, or whatever the application's {@code CallerResolver}
     * names (a tenant, say), so that the second wall and the keys share one namespace.
     */
    @Idempotent
    @PostMapping(consumes = MediaType.APPLICATION_JSON_VALUE, produces = MediaType.APPLICATION_JSON_VALUE)
    public ResponseEntity<Payment> create(@RequestBody PaymentRequest request,
                                          @RequestHeader(name = FaultInjector.HEADER, required = false) String chaos) {
        PaymentRequest.ValidPayment valid = request.validate();
        List<FaultInjector.Fault> injected = faults.parse(chaos);
        // The caller the starter scoped the key by (by default the principal's name, "" when anonymous): the same
        // payer whoever records the row, this handler or, for a charge, the stale-claim resolver, which knows only it.
        String payer = IdempotencyContext.require().key().caller();
        faults.beforeWrite(injected);

        if (!secondWall) {
            Payment payment = payments.insert(payer, valid.orderId(), valid.amount(), valid.currency());
            faults.afterWrite(injected, payment);
            return ResponseEntity.created(location(payment)).body(payment);
        }

        Optional<Payment> inserted =
                payments.insertUnlessPaid(payer, valid.orderId(), valid.amount(), valid.currency());
        if (inserted.isPresent()) {
            faults.afterWrite(injected, inserted.get());
            return ResponseEntity.created(location(inserted.get())).body(inserted.get());
        }
        // Payments are never updated or deleted, so the row the insert conflicted with is there to be read.
        Payment existing = payments.findCovered(payer, valid.orderId())
                .orElseThrow(() -> new IllegalStateException("payment of order " + valid.orderId()
                        + " conflicted on insert but cannot be read"));
        if (!valid.sameMoneyAs(existing.amount(), existing.currency())) {
            throw new OrderAlreadyPaidException(existing);
        }
        // The faults still apply, so that delays and crashes can be shown on this path too.
        faults.afterWrite(injected, existing);
        // 200, not 201: nothing was created by this request. The client gets the payment it meant to make.
        return ResponseEntity.ok().location(location(existing)).body(existing);
    }

    /** The caller's payments of one order, oldest first (an empty list when there are none). */
    @GetMapping(params = "orderId", produces = MediaType.APPLICATION_JSON_VALUE)
    public List<Payment> byOrder(@RequestParam String orderId, HttpServletRequest request) {
        if (orderId.indexOf('\0') >= 0) {
            // no order id holds a NUL (a write refuses it), and PostgreSQL would refuse the query with a 5xx
            return List.of();
        }
        return payments.findAllOf(payers.of(request), orderId);
    }

    /**
     * One of the caller's payments; 404 problem+json when the caller has none with this id. Another payer's payment
     * gets the same 404 as an id never handed out: a 403 would tell the caller that the payment exists, and let it
     * count the payments of others by walking the ids.
     */
    @GetMapping(path = "/{id}", produces = MediaType.APPLICATION_JSON_VALUE)
    public Payment byId(@PathVariable long id, HttpServletRequest request) {
        return payments.findOf(payers.of(request), id)
                .orElseThrow(() -> new ResponseStatusException(HttpStatus.NOT_FOUND, "no payment with id " + id));
    }

    /** The URI of a payment, as sent in {@code Location}. */
    static URI location(Payment payment) {
        return URI.create("/payments/" + payment.id());
    }
}
