package io.idempotency.sample.payment;

import io.idempotency.core.Idempotent;
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

/**
 * The payment API.
 *
 * <p>{@code POST /payments} is {@link Idempotent}: the client sends an {@code Idempotency-Key} header, and however
 * often the request is repeated (a timeout, a double click, a crash between commit and answer) at most one payment
 * is written and every repetition gets the first answer back. The method itself contains no idempotency code and
 * no {@code @Transactional}: the starter opens the transaction before the method runs and commits it after the
 * answer has been rendered, together with the stored answer.
 */
@RestController
@RequestMapping("/payments")
public class PaymentController {

    private final PaymentRepository payments;
    private final FaultInjector faults;

    /**
     * @param payments the payment table
     * @param faults   fault injection ({@code X-Chaos}), inert unless enabled
     */
    public PaymentController(PaymentRepository payments, FaultInjector faults) {
        this.payments = payments;
        this.faults = faults;
    }

    /**
     * Creates a payment: 201 with the payment and its {@code Location}; 400 problem+json for an invalid body.
     * Everything that can be refused is checked before the first write, so a refused request leaves no row.
     */
    @Idempotent
    @PostMapping(consumes = MediaType.APPLICATION_JSON_VALUE, produces = MediaType.APPLICATION_JSON_VALUE)
    public ResponseEntity<Payment> create(@RequestBody PaymentRequest request,
                                          @RequestHeader(name = FaultInjector.HEADER, required = false) String chaos) {
        PaymentRequest.ValidPayment valid = request.validate();
        List<FaultInjector.Fault> injected = faults.parse(chaos);

        Payment payment = payments.insert(valid.orderId(), valid.amount(), valid.currency());
        faults.afterWrite(injected, payment);

        return ResponseEntity.created(URI.create("/payments/" + payment.id())).body(payment);
    }

    /** The payments of one order, oldest first (an empty list when there are none). */
    @GetMapping(params = "orderId", produces = MediaType.APPLICATION_JSON_VALUE)
    public List<Payment> byOrder(@RequestParam String orderId) {
        return payments.findByOrderId(orderId);
    }

    /** One payment; 404 problem+json when there is none with this id. */
    @GetMapping(path = "/{id}", produces = MediaType.APPLICATION_JSON_VALUE)
    public Payment byId(@PathVariable long id) {
        return payments.findById(id)
                .orElseThrow(() -> new ResponseStatusException(HttpStatus.NOT_FOUND, "no payment with id " + id));
    }
}
