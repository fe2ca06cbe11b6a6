package io.idempotency.sample.payment;

import com.fasterxml.jackson.annotation.JsonIgnoreProperties;
import org.springframework.core.env.Environment;
import org.springframework.http.MediaType;
import org.springframework.http.client.JdkClientHttpRequestFactory;
import org.springframework.stereotype.Component;
import org.springframework.util.StringUtils;
import org.springframework.web.client.ResourceAccessException;
import org.springframework.web.client.RestClient;
import org.springframework.web.client.RestClientException;

import java.math.BigDecimal;
import java.net.ConnectException;
import java.net.http.HttpClient;
import java.net.http.HttpConnectTimeoutException;
import java.util.Map;
import java.util.Optional;
import java.util.function.Supplier;

/**
 * The payment gateway's API as the application sees it: over real HTTP (Spring's {@link RestClient} on the JDK's
 * HTTP client), with nothing shared with the gateway but the wire format. By default the gateway is the fake one the
 * sample serves itself under {@code /gateway} ({@code sample.gateway.base-url} points elsewhere).
 *
 * <p>Failures are told apart by what they mean for the charge:
 * <ul>
 *   <li>no connection could be made → {@link GatewayUnreachableException}: the charge was definitely not made;</li>
 *   <li>anything after the request may have left (a timeout, a 5xx, a lost connection, an unexpected status, an
 *       answer that cannot be read) →
 *       {@link GatewayOutcomeUnknownException}: the charge may have been made.</li>
 * </ul>
 * Thread-safe.
 */
@Component
public class GatewayClient {

    /** The gateway's answer to a charge. */
    public sealed interface Result {
    }

    /** The gateway booked the charge now, or had booked it under this key before. */
    public record Approved(GatewayCharge charge) implements Result {
    }

    /** The gateway declined the charge and booked nothing; {@code detail} is its explanation. */
    public record Declined(String detail) implements Result {
    }

    /** A charge as the gateway describes it (the fields the application uses). */
    @JsonIgnoreProperties(ignoreUnknown = true)
    public record GatewayCharge(long id, String orderId, String amount, String currency) {
    }

    /** The body the gateway expects. */
    record ChargeOrder(String orderId, String amount, String currency) {
    }

    private final GatewayProperties properties;
    private final Environment environment;
    private volatile RestClient http;

    /**
     * @param properties  where the gateway is and how long to wait for it
     * @param environment gives {@code local.server.port} once the web server has started, for the built-in gateway
     */
    public GatewayClient(GatewayProperties properties, Environment environment) {
        this.properties = properties;
        this.environment = environment;
    }

    /**
     * Asks the gateway to charge, under the idempotency key {@code key}: sent again with the same key, the charge is
     * not made again, and the answer is the first charge.
     */
    public Result charge(String key, String orderId, BigDecimal amount, String currency) {
        return call("charge", () -> http().post()
                .uri("/gateway/charges")
                .header("Idempotency-Key", key)
                .contentType(MediaType.APPLICATION_JSON)
                .accept(MediaType.APPLICATION_JSON, MediaType.APPLICATION_PROBLEM_JSON)
                .body(new ChargeOrder(orderId, amount.toPlainString(), currency))
                .exchange((request, response) -> {
                    int status = response.getStatusCode().value();
                    if (status == 200 || status == 201) {
                        return new Approved(response.bodyTo(GatewayCharge.class));
                    }
                    if (status == 402) {
                        Map<?, ?> problem = response.bodyTo(Map.class);
                        Object detail = problem == null ? null : problem.get("detail");
                        return new Declined(detail == null ? "declined by the gateway" : detail.toString());
                    }
                    throw new GatewayOutcomeUnknownException("the gateway answered the charge with HTTP " + status);
                }));
    }

    /** The charge the gateway booked under {@code key}, if any. */
    public Optional<GatewayCharge> findByKey(String key) {
        return call("look-up", () -> http().get()
                .uri("/gateway/charges/by-key")
                // in a header, never in the address: access logs show that, and so does a failed call's message
                .header("Idempotency-Key", key)
                .accept(MediaType.APPLICATION_JSON, MediaType.APPLICATION_PROBLEM_JSON)
                .exchange((request, response) -> {
                    int status = response.getStatusCode().value();
                    if (status == 200) {
                        return Optional.of(response.bodyTo(GatewayCharge.class));
                    }
                    if (status == 404) {
                        return Optional.<GatewayCharge>empty();
                    }
                    throw new GatewayOutcomeUnknownException("the gateway answered the look-up with HTTP " + status);
                }));
    }

    private static <T> T call(String what, Supplier<T> exchange) {
        try {
            return exchange.get();
        } catch (ResourceAccessException e) {
            if (neverConnected(e)) {
                throw new GatewayUnreachableException("the gateway could not be reached for the " + what
                        + "; nothing was sent", e);
            }
            throw new GatewayOutcomeUnknownException("the gateway gave no answer to the " + what + ": " + e.getMessage(),
                    e);
        } catch (RestClientException e) {
            // The gateway answered, but unreadably (a body that is not what it should be): it may have booked.
            throw new GatewayOutcomeUnknownException("the gateway's answer to the " + what + " could not be read: "
                    + e.getMessage(), e);
        }
    }

    /** True if the failure happened before a connection existed, so no byte of the request was sent. */
    private static boolean neverConnected(Throwable failure) {
        for (Throwable cause = failure; cause != null; cause = cause.getCause()) {
            if (cause instanceof ConnectException || cause instanceof HttpConnectTimeoutException) {
                return true;
            }
        }
        return false;
    }

    private RestClient http() {
        RestClient client = http;
        if (client == null) {
            synchronized (this) {
                client = http;
                if (client == null) {
                    HttpClient jdk = HttpClient.newBuilder()
                            .version(HttpClient.Version.HTTP_1_1)
                            .connectTimeout(properties.connectTimeout())
                            .build();
                    JdkClientHttpRequestFactory requests = new JdkClientHttpRequestFactory(jdk);
                    requests.setReadTimeout(properties.readTimeout());
                    client = RestClient.builder().baseUrl(baseUrl()).requestFactory(requests).build();
                    http = client;
                }
            }
        }
        return client;
    }

    private String baseUrl() {
        if (StringUtils.hasText(properties.baseUrl())) {
            return properties.baseUrl();
        }
        String port = environment.getProperty("local.server.port");
        if (port == null) {
            throw new IllegalStateException("the built-in gateway is served by this application's web server, which"
                    + " has not started; set sample.gateway.base-url to use another gateway");
        }
        return "http://127.0.0.1:" + port;
    }
}
