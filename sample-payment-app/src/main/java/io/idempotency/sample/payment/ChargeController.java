package io.idempotency.sample.payment;

import io.idempotency.core.IdempotencyContext;
import io.idempotency.core.IdempotencyMode;
import io.idempotency.core.Idempotent;
import jakarta.servlet.http.HttpServletRequest;
import org.springframework.http.HttpStatus;
import org.springframework.http.MediaType;
import org.springframework.http.ResponseEntity;
import org.springframework.web.bind.annotation.GetMapping;
import org.springframework.web.bind.annotation.PathVariable;
import org.springframework.web.bind.annotation.PostMapping;
import org.springframework.web.bind.annotation.RequestBody;
import org.springframework.web.bind.annotation.RequestMapping;
import org.springframework.web.bind.annotation.RequestParam;
import org.springframework.web.bind.annotation.RestController;
import org.springframework.web.server.ResponseStatusException;

import java.math.BigDecimal;
import java.util.List;
import java.util.Optional;

/**
 * Charges through an external payment gateway: a side effect that no database transaction of this application can
 * roll back, so {@code POST /charges} uses the starter's {@link IdempotencyMode#INTENT_FIRST intent-first} mode.
 *
 * <p>The starter commits the claim of the {@code Idempotency-Key} (with a lease, {@code idempotency.lease}) before the
 * handler runs, and renews the lease while it runs. The handler calls the gateway with the key the starter derives for
 * this caller and key ({@link IdempotencyContext#downstreamKey()}), never the client's raw key; the gateway books a
 * charge once per key. Then the handler records the charge in the local {@code charges} table, in the transaction that
 * stores the answer as SUCCEEDED. If the process dies or the handler fails in between, the claim stays PROCESSING
 * until its lease runs out; then a retry, or the background sweeper, takes it over and asks
 * {@link GatewayChargeResolver}, which looks the charge up at the gateway by the same derived key.
 *
 * <p>One charge per payer and order, whatever the key: before calling the gateway the handler commits an intent for
 * the order ({@link ChargeIntents}). A request whose order is held by another key's intent gets 409
 * ({@link OrderAlreadyChargedException}) without reaching the gateway; one whose own intent holds it and whose charge
 * is recorded (its key replayed after the record was deleted) gets 200 with that charge, without asking the gateway.
 * A key used before for another order of the payer, and sent again for this one after its record was deleted, gets
 * 422 ({@link KeyUsedForAnotherChargeException}) without reaching the gateway, which knows it by the other charge.
 *
 * <p>Outcomes of the gateway call:
 * <ul>
 *   <li>booked (now or before, under this key) → the charge is recorded → 201, stored and replayed;</li>
 *   <li>declined → 402 problem+json, returned as a final answer: stored and replayed, the gateway is not asked
 *       again ({@link ChargeResponses#declined});</li>
 *   <li>not reachable at all → {@link GatewayUnreachableException}, a definite failure: 503, the claim is marked
 *       FAILED at once and a retry runs again — unless an earlier attempt of the request held the order already (a
 *       rerun): that one may have reached the gateway, and its charge may still be booked, so the outcome is
 *       unknown (below);</li>
 *   <li>no usable answer (timeout, 5xx) → {@link GatewayOutcomeUnknownException}: 502; the charge may exist, so the
 *       claim waits for its lease to run out and the resolver to find out.</li>
 * </ul>
 */
@RestController
@RequestMapping("/charges")
public class ChargeController {

    /** The idempotency scope of {@code POST /charges}; {@link GatewayChargeResolver} resolves claims of this scope. */
    public static final String SCOPE = "POST /charges";

    private final GatewayClient gateway;
    private final ChargeRepository charges;
    private final ChargeResponses responses;
    private final FaultInjector faults;
    private final ChargeIntents intents;
    private final Payers payers;

    /**
     * @param gateway   the payment gateway, over HTTP
     * @param charges   the application's record of its charges
     * @param responses renders the answers (shared with the resolver)
     * @param faults    fault injection ({@code X-Chaos}), inert unless enabled
     * @param intents   which request may charge an order (one charge per payer and order)
     * @param payers    the payer of a read, as the writes record it
     */
    public ChargeController(GatewayClient gateway, ChargeRepository charges, ChargeResponses responses,
                            FaultInjector faults, ChargeIntents intents, Payers payers) {
        this.gateway = gateway;
        this.charges = charges;
        this.responses = responses;
        this.faults = faults;
        this.intents = intents;
        this.payers = payers;
    }

    /**
     * Charges the order: 201 with the charge and its {@code Location}; 402 problem+json when the gateway declines.
     * The body was validated and {@code X-Chaos} parsed before the key was claimed ({@link ChargeWebConfiguration}).
     *
     * <p>The payer is the caller the starter scopes the key by, as recorded by {@link GatewayChargeResolver} too.
     */
    @Idempotent(mode = IdempotencyMode.INTENT_FIRST, scope = SCOPE)
    @PostMapping(consumes = MediaType.APPLICATION_JSON_VALUE,
            produces = {MediaType.APPLICATION_JSON_VALUE, MediaType.APPLICATION_PROBLEM_JSON_VALUE})
    public ResponseEntity<?> create(@RequestBody PaymentRequest request, ChargeFaults chaos) {
        PaymentRequest.ValidPayment valid = request.validate();
        List<FaultInjector.Fault> injected = chaos.faults();
        // The caller the starter scoped the key by (by default the principal's name, "" when anonymous): the same
        // payer whoever records the row, this handler or, for a charge, the stale-claim resolver, which knows only it.
        String payer = IdempotencyContext.require().key().caller();
        // HMAC of (caller, scope, key): stable across retries, restarts and instances, distinct per caller.
        String gatewayKey = IdempotencyContext.require().downstreamKey();

        // One charge per payer and order, whatever the key: the intent is committed before the gateway is called, so
        // that a request under another key for the same order never reaches the gateway.
        ChargeIntents.Holder holder = intents.hold(payer, valid.orderId(), gatewayKey);
        if (!gatewayKey.equals(holder.downstreamKey())) {
            throw new OrderAlreadyChargedException(valid.orderId(),
                    charges.findLatestOf(payer, valid.orderId()).orElse(null));
        }
        // This request holds the order. A charge recorded for it already was made by this key (its record deleted by
        // retention since, say): answered without asking the gateway, whose own memory of keys may be shorter.
        Optional<Charge> recorded = charges.findLatestOf(payer, valid.orderId());
        if (recorded.isPresent()) {
            Charge existing = recorded.get();
            if (!valid.sameMoneyAs(existing.amount(), existing.currency())) {
                throw new OrderAlreadyChargedException(valid.orderId(), existing);
            }
            return ResponseEntity.ok().location(ChargeResponses.location(existing))
                    .contentType(MediaType.APPLICATION_JSON).body(existing);
        }

        // The key held another order of the payer before: used for its charge, its record deleted since (retention),
        // and now sent for this order. The gateway knows the key by that charge and would answer this one with it,
        // charging nothing. Refused without asking it, and this order is released, also when an earlier attempt of
        // this request took it: that attempt came to this check too, after the other order was taken (no request runs
        // under the key while its record exists, so the other order was taken by an earlier use of the key, before
        // this request's claim), and was refused here before the gateway, or stopped before it.
        if (intents.holdsAnotherOrder(payer, valid.orderId(), gatewayKey)) {
            intents.release(payer, valid.orderId(), holder);
            throw new KeyUsedForAnotherChargeException(valid.orderId());
        }

        faults.beforeCharge(injected);
        GatewayClient.Result result;
        try {
            result = gateway.charge(gatewayKey, valid.orderId(), valid.amount(), valid.currency());
        } catch (GatewayUnreachableException e) {
            if (!holder.takenNow()) {
                // An earlier attempt of this request held the order already (this is its rerun, or the request sent
                // again after a failure): this attempt sent nothing, but that one may have, and the gateway may still
                // book its charge under the key. Not "no charge was made": the outcome is unknown, the order stays
                // with the key, and the claim waits for the resolver, which asks the gateway again.
                throw new GatewayOutcomeUnknownException("the gateway could not be reached for the charge, which an"
                        + " earlier attempt under the same key may have made", e);
            }
            intents.release(payer, valid.orderId(), holder); // nothing was charged: another key may pay the order
            throw e;
        }
        if (result instanceof GatewayClient.Declined declined) {
            // declined, nothing booked: another key may pay the order
            intents.release(payer, valid.orderId(), holder);
            return responses.declined(valid.orderId(), declined.detail());
        }
        GatewayClient.GatewayCharge booked = ((GatewayClient.Approved) result).charge();
        faults.afterCharge(injected, booked.id());

        // What the gateway booked is what happened: record its figures, once per gateway charge.
        Charge charge = charges.record(payer, booked.orderId(), new BigDecimal(booked.amount()), booked.currency(),
                booked.id());
        faults.afterRecord(injected, charge);
        return responses.created(charge);
    }

    /** The caller's charges of one order, oldest first (an empty list when there are none). */
    @GetMapping(params = "orderId", produces = MediaType.APPLICATION_JSON_VALUE)
    public List<Charge> byOrder(@RequestParam String orderId, HttpServletRequest request) {
        if (orderId.indexOf('\0') >= 0) {
            // no order id holds a NUL (a write refuses it), and PostgreSQL would refuse the query with a 5xx
            return List.of();
        }
        return charges.findAllOf(payers.of(request), orderId);
    }

    /**
     * One of the caller's charges; 404 problem+json when the caller has none with this id: another payer's charge
     * gets the same 404 as an id never handed out, which tells nothing about whether it exists.
     */
    @GetMapping(path = "/{id}", produces = MediaType.APPLICATION_JSON_VALUE)
    public Charge byId(@PathVariable long id, HttpServletRequest request) {
        return charges.findOf(payers.of(request), id)
                .orElseThrow(() -> new ResponseStatusException(HttpStatus.NOT_FOUND, "no charge with id " + id));
    }
}
