package io.idempotency.sample.payment;

import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.InetSocketAddress;
import java.net.Socket;
import java.net.SocketException;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.UUID;

/**
 * A tiny HTTP client for the sample's API, used by the integration tests: real HTTP over the loopback interface,
 * nothing mocked. Bodies are kept as bytes so that replays can be compared byte for byte.
 */
final class PaymentApi {

    static final String KEY_HEADER = "Idempotency-Key";
    static final String REPLAYED_HEADER = "Idempotent-Replayed";

    private final URI base;
    private final HttpClient http;

    PaymentApi(URI base) {
        this.base = base;
        this.http = HttpClient.newBuilder()
                .version(HttpClient.Version.HTTP_1_1)
                .connectTimeout(Duration.ofSeconds(5))
                .build();
    }

    static PaymentApi onPort(int port) {
        return new PaymentApi(URI.create("http://127.0.0.1:" + port));
    }

    URI base() {
        return base;
    }

    /** A JSON payment body for {@code orderId}. */
    static String body(String orderId, String amount) {
        return "{\"orderId\":\"" + orderId + "\",\"amount\":\"" + amount + "\",\"currency\":\"EUR\"}";
    }

    /** A fresh order id, so that tests never see each other's payments. */
    static String newOrderId() {
        return "o-" + UUID.randomUUID();
    }

    /** POST /payments; {@code key} and {@code chaos} are left out when null. */
    HttpResponse<byte[]> createPayment(String key, String body, String chaos) throws IOException, InterruptedException {
        return createPaymentAs(null, null, key, body, chaos);
    }

    /** POST /payments with HTTP Basic credentials; anonymous when {@code user} is null. */
    HttpResponse<byte[]> createPaymentAs(String user, String password, String key, String body, String chaos)
            throws IOException, InterruptedException {
        return postJson("/payments", user, password, key, body, chaos);
    }

    /**
     * POST of a JSON body to a path of the API, with HTTP Basic credentials unless {@code user} is null;
     * {@code key} and {@code chaos} are left out when null.
     */
    HttpResponse<byte[]> postJson(String path, String user, String password, String key, String body, String chaos)
            throws IOException, InterruptedException {
        return postJson(path, user == null ? null : basic(user + ":" + password), key, body, chaos);
    }

    /**
     * POST of a JSON body to a path of the API with the {@code Authorization} header given (a bearer token, say);
     * {@code authorization}, {@code key} and {@code chaos} are left out when null.
     */
    HttpResponse<byte[]> postJson(String path, String authorization, String key, String body, String chaos)
            throws IOException, InterruptedException {
        HttpRequest.Builder request = HttpRequest.newBuilder(base.resolve(path))
                .timeout(Duration.ofSeconds(30))
                .header("Content-Type", "application/json")
                .header("Accept", "application/json, application/problem+json")
                .POST(HttpRequest.BodyPublishers.ofString(body));
        if (key != null) {
            request.header(KEY_HEADER, key);
        }
        if (chaos != null) {
            request.header(FaultInjector.HEADER, chaos);
        }
        if (authorization != null) {
            request.header("Authorization", authorization);
        }
        return http.send(request.build(), HttpResponse.BodyHandlers.ofByteArray());
    }

    /**
     * POST of a JSON body over a plain socket, anonymous, reading what comes back until the server closes the
     * connection. For a server that dies during the request these are all the bytes it sent before it died, which a
     * full HTTP client hides behind one {@link IOException} whether it got none or the status line and headers.
     */
    byte[] postJsonUntilClosed(String path, String key, String body, String chaos) throws IOException {
        byte[] content = body.getBytes(StandardCharsets.UTF_8);
        StringBuilder head = new StringBuilder()
                .append("POST ").append(path).append(" HTTP/1.1\r\n")
                .append("Host: ").append(base.getHost()).append(':').append(base.getPort()).append("\r\n")
                .append("Content-Type: application/json\r\n")
                .append("Accept: application/json, application/problem+json\r\n")
                .append("Content-Length: ").append(content.length).append("\r\n")
                .append("Connection: close\r\n");
        if (key != null) {
            head.append(KEY_HEADER).append(": ").append(key).append("\r\n");
        }
        if (chaos != null) {
            head.append(FaultInjector.HEADER).append(": ").append(chaos).append("\r\n");
        }
        head.append("\r\n");
        ByteArrayOutputStream received = new ByteArrayOutputStream();
        try (Socket socket = new Socket()) {
            socket.connect(new InetSocketAddress(base.getHost(), base.getPort()), 5_000);
            socket.setSoTimeout(60_000);
            OutputStream out = socket.getOutputStream();
            out.write(head.toString().getBytes(StandardCharsets.US_ASCII));
            out.write(content);
            out.flush();
            InputStream in = socket.getInputStream();
            byte[] buffer = new byte[8192];
            try {
                for (int n = in.read(buffer); n >= 0; n = in.read(buffer)) {
                    received.write(buffer, 0, n);
                }
            } catch (SocketException reset) {
                // the connection was reset rather than closed: what had arrived is all there is
            }
        }
        return received.toByteArray();
    }

    /** POST without a body to a path of the API, with {@code key} and HTTP Basic {@code credentials} (user:password). */
    HttpResponse<byte[]> postEmpty(String path, String key, String credentials)
            throws IOException, InterruptedException {
        return http.send(HttpRequest.newBuilder(base.resolve(path))
                .timeout(Duration.ofSeconds(30))
                .header(KEY_HEADER, key)
                .header("Authorization", basic(credentials))
                .POST(HttpRequest.BodyPublishers.noBody()).build(), HttpResponse.BodyHandlers.ofByteArray());
    }

    private static String basic(String credentials) {
        return "Basic " + java.util.Base64.getEncoder().encodeToString(credentials.getBytes(StandardCharsets.UTF_8));
    }

    /** GET on a path of the API, anonymous, e.g. {@code /payments?orderId=o-1}. */
    HttpResponse<String> get(String pathAndQuery) throws IOException, InterruptedException {
        return getAs(null, null, pathAndQuery);
    }

    /** GET on a path of the API with HTTP Basic credentials; anonymous when {@code user} is null. */
    HttpResponse<String> getAs(String user, String password, String pathAndQuery)
            throws IOException, InterruptedException {
        HttpRequest.Builder request = HttpRequest.newBuilder(base.resolve(pathAndQuery))
                .timeout(Duration.ofSeconds(10))
                .GET();
        if (user != null) {
            request.header("Authorization", basic(user + ":" + password));
        }
        return http.send(request.build(), HttpResponse.BodyHandlers.ofString());
    }

    /** The body of a GET that must answer 200, e.g. a list; fails otherwise. */
    String getOk(String pathAndQuery) throws IOException, InterruptedException {
        HttpResponse<String> response = get(pathAndQuery);
        if (response.statusCode() != 200) {
            throw new IllegalStateException("GET " + pathAndQuery + " answered " + response.statusCode() + ": "
                    + response.body());
        }
        return response.body();
    }

    /** The payments of an order, as the API lists them (a JSON array). */
    String paymentsOf(String orderId) throws IOException, InterruptedException {
        return getOk("/payments?orderId=" + orderId);
    }

    /** How many payments the API lists for an order (counts the objects in the JSON array by their ids). */
    int countPaymentsOf(String orderId) throws IOException, InterruptedException {
        String json = paymentsOf(orderId);
        int count = 0;
        for (int i = json.indexOf("\"id\":"); i >= 0; i = json.indexOf("\"id\":", i + 1)) {
            count++;
        }
        return count;
    }

    static String text(HttpResponse<byte[]> response) {
        return new String(response.body(), StandardCharsets.UTF_8);
    }

    static String contentType(HttpResponse<?> response) {
        return response.headers().firstValue("Content-Type").orElse("");
    }
}
