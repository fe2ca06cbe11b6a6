package io.idempotency.sample.payment;

import io.idempotency.core.StoredResponse;
import org.springframework.http.HttpHeaders;
import org.springframework.http.HttpStatus;
import org.springframework.http.MediaType;
import org.springframework.http.ProblemDetail;
import org.springframework.http.ResponseEntity;
import org.springframework.stereotype.Component;
import tools.jackson.databind.json.JsonMapper;

import java.net.URI;
import java.util.List;

/**
 * The answers of {@code POST /charges}, in one place, because two code paths produce the "charge created" answer and
 * a client must not be able to tell them apart:
 * <ul>
 *   <li>the handler returns it ({@link #created}), Spring MVC renders it, and the starter stores the bytes;</li>
 *   <li>{@link GatewayChargeResolver} builds it for a charge whose request died after the gateway booked it
 *       ({@link #createdForReplay}): the starter stores it as if the handler had answered, and replays it.</li>
 * </ul>
 * Both render the body with the application's {@link JsonMapper} — the one Spring MVC's JSON converter uses — from the
 * same {@code charges} row, and send the same headers in the same order; a test compares the two byte for byte.
 */
@Component
public class ChargeResponses {

    /** Problem type of a charge the gateway declined. */
    public static final URI CHARGE_DECLINED =
            URI.create("https://idempotency-starter.github.io/problems/sample/charge-declined");

    private final JsonMapper json;

    /** @param json the application's JSON mapper */
    public ChargeResponses(JsonMapper json) {
        this.json = json;
    }

    /** The URI of a charge, as sent in {@code Location}. */
    public static URI location(Charge charge) {
        return URI.create("/charges/" + charge.id());
    }

    /** 201 with the charge and its {@code Location}, as the handler returns it. */
    public ResponseEntity<Charge> created(Charge charge) {
        return ResponseEntity.created(location(charge)).contentType(MediaType.APPLICATION_JSON).body(charge);
    }

    /** The same answer as {@link #created}, as the starter stores it: status, headers, body bytes. */
    public StoredResponse createdForReplay(Charge charge) {
        return new StoredResponse(HttpStatus.CREATED.value(), List.of(
                new StoredResponse.Header(HttpHeaders.LOCATION, location(charge).toString()),
                new StoredResponse.Header(HttpHeaders.CONTENT_TYPE, MediaType.APPLICATION_JSON_VALUE)),
                json.writeValueAsBytes(charge));
    }

    /**
     * 402 problem+json: the gateway declined the charge and booked nothing. Returned (not thrown), so that the starter
     * stores it like any final answer: every repetition of the request gets the same decline, and the gateway is not
     * asked again.
     */
    public ResponseEntity<ProblemDetail> declined(String orderId, String detail) {
        ProblemDetail problem = ProblemDetail.forStatusAndDetail(HttpStatus.PAYMENT_REQUIRED, detail);
        problem.setType(CHARGE_DECLINED);
        problem.setTitle("Charge declined");
        problem.setProperty("orderId", orderId);
        return ResponseEntity.status(HttpStatus.PAYMENT_REQUIRED).contentType(MediaType.APPLICATION_PROBLEM_JSON)
                .body(problem);
    }
}
