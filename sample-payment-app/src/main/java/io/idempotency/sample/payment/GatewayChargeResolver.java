package io.idempotency.sample.payment;

import io.idempotency.core.StaleClaimResolver;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;
import org.springframework.stereotype.Component;

import java.math.BigDecimal;
import java.util.Optional;

/**
 * Decides what became of a {@code POST /charges} whose claim was left PROCESSING when its lease ran out — the process
 * died, hung, or the handler failed after calling the gateway — by asking the gateway.
 *
 * <p>The starter calls it (replacing its default, "rerun") for whoever took the stale claim over: a retry of the
 * request, or the background sweeper when no retry comes. The take-over is a compare-and-set on the claim's fencing
 * token, so each stale claim is resolved by one of them, even across instances.
 * <ul>
 *   <li>The gateway has a charge under the request's derived key ({@code GET /gateway/charges/by-key}, the key in
 *       its {@code Idempotency-Key} header): the charge is recorded locally if it is not yet, and the answer the
 *       handler would have given (201, the charge, its {@code Location}) is returned as {@code complete}: the
 *       starter stores it as SUCCEEDED and replays it.</li>
 *   <li>The gateway has a charge under the key that an earlier request under the same key made (the key, its record
 *       deleted, was sent again, maybe for another order, and its attempt stopped before the handler's check): the
 *       charge was recorded here before the claim was made, or an attempt of the claim took another order with the
 *       key. Then {@code rerun}, and the other orders are released (nothing can be charged for them under a key the
 *       gateway knows by another charge): the handler, which knows the request's order, answers 200 with the charge
 *       for the same order and 422 {@code key-used-for-another-charge} for another.</li>
 *   <li>The gateway has nothing under the key: {@code rerun} — the retry runs the handler again (the sweeper marks
 *       the claim FAILED, so that the request, sent again, runs). Safe even if a late first attempt books the charge
 *       after this look-up: it sends the same key, so the gateway books it once, and that attempt's own result is
 *       refused by the fencing token. For the same reason the order stays held by the key ({@link ChargeIntents}):
 *       "nothing booked yet" is not "nothing charged", and another key must not charge the order beside a booking
 *       that may still land.</li>
 *   <li>The gateway cannot be asked: the failure is thrown on as {@link GatewayOutcomeUnknownException} (an
 *       unreachable gateway too: the charge may exist all the same). The claim stays PROCESSING under the new
 *       holder's lease and is resolved by a later retry or sweep; a waiting retry is answered 502.</li>
 * </ul>
 * Every consultation is recorded in {@code charge_resolutions}. This runs outside any request transaction, so each
 * statement commits on its own; recording the charge is idempotent (unique {@code gateway_charge_id}), so a
 * resolution interrupted after it and repeated later records nothing twice. Claims of other scopes are answered
 * {@code rerun}, the starter's default. Thread-safe.
 */
@Component
public class GatewayChargeResolver implements StaleClaimResolver {

    private static final Logger log = LoggerFactory.getLogger(GatewayChargeResolver.class);

    private final GatewayClient gateway;
    private final ChargeRepository charges;
    private final ChargeResponses responses;
    private final ChargeIntents intents;

    /**
     * @param gateway   the payment gateway, over HTTP
     * @param charges   the application's record of charges and of resolutions
     * @param responses renders the answer the handler would have given
     * @param intents   the orders the keys hold
     */
    public GatewayChargeResolver(GatewayClient gateway, ChargeRepository charges, ChargeResponses responses,
                                 ChargeIntents intents) {
        this.gateway = gateway;
        this.charges = charges;
        this.responses = responses;
        this.intents = intents;
    }

    @Override
    public Resolution resolve(StaleClaim claim) {
        if (!ChargeController.SCOPE.equals(claim.key().scope())) {
            return Resolution.rerun();
        }
        ChargeRepository.ResolvedBy by = claim.retryWaiting()
                ? ChargeRepository.ResolvedBy.RETRY : ChargeRepository.ResolvedBy.SWEEPER;
        String caller = claim.key().caller();
        String key = claim.key().key();

        Optional<GatewayClient.GatewayCharge> booked;
        try {
            booked = gateway.findByKey(claim.downstreamKey());
        } catch (RuntimeException e) {
            charges.recordResolution(caller, key, claim.downstreamKey(), "error", by, null);
            log.warn("stale charge claim {} (by {}): the gateway could not be asked; left for a later attempt: {}",
                    claim.key(), by, e.getMessage());
            if (e instanceof GatewayUnreachableException) {
                // Unreachable for the look-up says nothing about the charge, which may well exist: never let it
                // reach the client as "no charge was made" (503), and never as a definite failure.
                throw new GatewayOutcomeUnknownException("the gateway could not be reached to ask what became of"
                        + " the charge, which may have been made", e);
            }
            throw e;
        }
        if (booked.isEmpty()) {
            // Nothing is booked under the key yet, which is not "nothing was charged": a call the dead or hung holder
            // sent may still be booked after this look-up. So the key keeps its hold on the order: the rerun, or the
            // request sent again after a FAILED mark, charges under the same key (the gateway books it once), and
            // another key for the order is refused rather than charging it a second time.
            charges.recordResolution(caller, key, claim.downstreamKey(), "rerun", by, null);
            log.info("stale charge claim {} (by {}): the gateway has no charge under its key; rerun", claim.key(), by);
            return Resolution.rerun();
        }
        GatewayClient.GatewayCharge charge = booked.get();
        // The booking is the claim's only if the claim's request made it. Not so when the key, its record deleted
        // (retention), was sent again and its attempt stopped before the handler's check refused it
        // (holdsAnotherOrder): the gateway knows the key by the charge of the key's earlier request. Completing with
        // it would answer the request, maybe sent for another order, with that charge. Two signs tell it, each
        // covering a part of that window: the charge was recorded here before the claim was made (it answered an
        // earlier request); or an attempt of the claim took another order with the key. Then the handler decides,
        // knowing the order: the same order → 200 with its charge; another → 422 key-used-for-another-charge.
        Optional<Charge> recordedBefore = charges.findByGatewayChargeId(charge.id())
                .filter(earlier -> earlier.createdAt().toInstant().isBefore(claim.createdAt()));
        int otherOrders = intents.releaseOtherOrdersTakenSince(caller, claim.downstreamKey(), charge.orderId(),
                claim.createdAt());
        if (recordedBefore.isPresent() || otherOrders > 0) {
            charges.recordResolution(caller, key, claim.downstreamKey(), "rerun", by, charge.id());
            log.info("stale charge claim {} (by {}): the gateway's charge {} under its key is an earlier request's"
                    + " (recorded before the claim: {}, other orders taken and released: {}); rerun", claim.key(), by,
                    charge.id(), recordedBefore.isPresent(), otherOrders);
            return Resolution.rerun();
        }
        Charge recorded = charges.record(caller, charge.orderId(), new BigDecimal(charge.amount()), charge.currency(),
                charge.id());
        charges.recordResolution(caller, key, claim.downstreamKey(), "complete", by, charge.id());
        log.info("stale charge claim {} (by {}): the gateway booked charge {}; recorded as charge {} and completed",
                claim.key(), by, charge.id(), recorded.id());
        return Resolution.complete(responses.createdForReplay(recorded));
    }
}
