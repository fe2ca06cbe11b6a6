package io.idempotency.sample.payment;

import org.springframework.boot.context.properties.ConfigurationProperties;

/**
 * Switches fault injection on ({@code sample.chaos.enabled}). Off by default: then the {@code X-Chaos} header is
 * ignored, so the sample never crashes on a header sent by accident.
 *
 * @param enabled whether {@code X-Chaos} is honoured
 */
@ConfigurationProperties("sample.chaos")
public record ChaosProperties(boolean enabled) {
}
