package io.idempotency.sample.payment;

import org.springframework.boot.context.properties.ConfigurationProperties;
import org.springframework.boot.context.properties.bind.DefaultValue;

import java.time.Duration;

/**
 * Where {@code POST /charges} finds the payment gateway ({@code sample.gateway.*}).
 *
 * @param baseUrl        the gateway's base URL; empty (the default): the fake gateway this application serves under
 *                       {@code /gateway}, called over real HTTP on {@code http://127.0.0.1:${local.server.port}}
 * @param connectTimeout how long to wait for a connection; a charge that could not connect was not made
 * @param readTimeout    how long to wait for the gateway's answer; a charge that timed out may or may not have been
 *                       made (an unknown outcome, resolved after the lease)
 */
@ConfigurationProperties("sample.gateway")
public record GatewayProperties(@DefaultValue("") String baseUrl,
                                @DefaultValue("2s") Duration connectTimeout,
                                @DefaultValue("10s") Duration readTimeout) {
}
