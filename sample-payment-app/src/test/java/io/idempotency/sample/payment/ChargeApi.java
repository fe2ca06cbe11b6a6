package io.idempotency.sample.payment;

import java.io.IOException;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.Base64;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * A tiny HTTP client for {@code POST /charges} and the fake gateway's read endpoints, used by the integration tests:
 * real HTTP over the loopback interface. Bodies are kept as bytes so that replays can be compared byte for byte.
 */
final class ChargeApi {

    private static final Pattern NUMBER_FIELD = Pattern.compile("\"(\\w+)\":(\\d+)");

    private final URI base;
    private final HttpClient http;

    ChargeApi(URI base) {
        this.base = base;
        this.http = HttpClient.newBuilder()
                .version(HttpClient.Version.HTTP_1_1)
                .connectTimeout(Duration.ofSeconds(5))
                .build();
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
        HttpRequest.Builder request = HttpRequest.newBuilder(base.resolve("/charges"))
                .timeout(Duration.ofSeconds(30))
                .header("Content-Type", "application/json")
                .header("Accept", "application/json, application/problem+json")
                .POST(HttpRequest.BodyPublishers.ofString(body));
        if (key != null) {
            request.header(PaymentApi.KEY_HEADER, key);
        }
        if (chaos != null) {
            request.header(FaultInjector.HEADER, chaos);
        }
        if (user != null) {
            request.header("Authorization", "Basic " + Base64.getEncoder()
                    .encodeToString((user + ":" + password).getBytes(StandardCharsets.UTF_8)));
        }
        return http.send(request.build(), HttpResponse.BodyHandlers.ofByteArray());
    }

    /** GET on a path, e.g. {@code /gateway/charges?orderId=o-1}. */
    HttpResponse<String> get(String pathAndQuery) throws IOException, InterruptedException {
        HttpRequest request = HttpRequest.newBuilder(base.resolve(pathAndQuery))
                .timeout(Duration.ofSeconds(10))
                .GET()
                .build();
        return http.send(request, HttpResponse.BodyHandlers.ofString());
    }

    /** The fake gateway's ledger entries of an order, as it lists them (a JSON array); fails unless 200. */
    String gatewayCharges(String orderId) throws IOException, InterruptedException {
        HttpResponse<String> response = get("/gateway/charges?orderId=" + orderId);
        if (response.statusCode() != 200) {
            throw new IllegalStateException("GET /gateway/charges answered " + response.statusCode() + ": "
                    + response.body());
        }
        return response.body();
    }

    /** The application's charges of an order (a JSON array); fails unless 200. */
    String charges(String orderId) throws IOException, InterruptedException {
        HttpResponse<String> response = get("/charges?orderId=" + orderId);
        if (response.statusCode() != 200) {
            throw new IllegalStateException("GET /charges answered " + response.statusCode() + ": " + response.body());
        }
        return response.body();
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
