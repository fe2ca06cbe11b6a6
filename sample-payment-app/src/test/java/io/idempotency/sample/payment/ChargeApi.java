package io.idempotency.sample.payment;

import java.io.IOException;
import java.net.URI;
import java.net.http.HttpResponse;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * A tiny HTTP client for {@code POST /charges} and the fake gateway's read endpoints, used by the integration tests:
 * real HTTP over the loopback interface. Bodies are kept as bytes so that replays can be compared byte for byte.
 */
final class ChargeApi {

    private static final Pattern NUMBER_FIELD = Pattern.compile("\"(\\w+)\":(\\d+)");

    private final PaymentApi api;

    ChargeApi(URI base) {
        this.api = new PaymentApi(base);
    }

    static ChargeApi onPort(int port) {
        return new ChargeApi(URI.create("http://127.0.0.1:" + port));
    }

    /** POST /charges, anonymous; {@code key} and {@code chaos} are left out when null. */
    HttpResponse<byte[]> charge(String key, String body, String chaos) throws IOException, InterruptedException {
        return chargeAs(null, null, key, body, chaos);
    }

    /** POST /charges with HTTP Basic credentials; anonymous when {@code user} is null. */
    HttpResponse<byte[]> chargeAs(String user, String password, String key, String body, String chaos)
            throws IOException, InterruptedException {
        return api.postJson("/charges", user, password, key, body, chaos);
    }

    /** GET on a path, e.g. {@code /gateway/charges?orderId=o-1}. */
    HttpResponse<String> get(String pathAndQuery) throws IOException, InterruptedException {
        return api.get(pathAndQuery);
    }

    /** GET on a path with HTTP Basic credentials; anonymous when {@code user} is null. */
    HttpResponse<String> getAs(String user, String password, String pathAndQuery)
            throws IOException, InterruptedException {
        return api.getAs(user, password, pathAndQuery);
    }

    /** The fake gateway's ledger entries of an order, as it lists them (a JSON array); fails unless 200. */
    String gatewayCharges(String orderId) throws IOException, InterruptedException {
        return api.getOk("/gateway/charges?orderId=" + orderId);
    }

    /** The application's charges of an order (a JSON array); fails unless 200. */
    String charges(String orderId) throws IOException, InterruptedException {
        return api.getOk("/charges?orderId=" + orderId);
    }

    /** The value of a numeric top-level field such as {@code "gatewayChargeId":7} in a JSON object. */
    static long numberField(String json, String name) {
        Matcher matcher = NUMBER_FIELD.matcher(json);
        while (matcher.find()) {
            if (matcher.group(1).equals(name)) {
                return Long.parseLong(matcher.group(2));
            }
        }
        throw new IllegalArgumentException("no numeric field " + name + " in " + json);
    }
}
