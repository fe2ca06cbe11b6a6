package io.idempotency.spring;

import io.idempotency.testkit.TestPostgres;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;
import org.springframework.boot.diagnostics.FailureAnalysis;

import static io.idempotency.spring.StartupFailures.startupFailure;
import static org.assertj.core.api.Assertions.assertThat;

/**
 * {@code idempotency.header-name} set to a request header that HTTP, browsers, proxies or tracing already give a
 * value: the application does not start. Its value is the same for many requests of a client (each would be refused
 * or replayed another's answer), or new on every attempt (a retry would run the request again), or one a browser
 * never lets a page set.
 */
class KeyHeaderOfOtherMeaningSettingTest {

    private static final TestPostgres.Database DATABASE = TestPostgres.newDatabase();

    @ParameterizedTest
    @ValueSource(strings = {
            // HTTP: a preference or priority many requests share, a digest or signature of each message
            "Prefer", "Priority", "Early-Data", "Content-Digest", "Repr-Digest", "Digest", "Content-MD5",
            "Signature", "Signature-Input", "CDN-Loop",
            // set by browsers, which let no page set them
            "Sec-Fetch-Mode", "sec-ch-ua", "Upgrade-Insecure-Requests", "DNT",
            "Access-Control-Request-Method", "X-HTTP-Method-Override",
            // tracing (Zipkin's B3 is one of Spring Boot's own propagation formats)
            "b3", "X-B3-TraceId", "X-B3-SpanId", "X-Amzn-Trace-Id", "X-Cloud-Trace-Context", "uber-trace-id",
            "sentry-trace",
            // proxies and load balancers
            "X-Real-IP", "X-Forwarded-Server", "X-Forwarded-Ssl", "True-Client-IP", "CF-Connecting-IP", "CF-Ray",
            "X-Envoy-Attempt-Count", "X-Forwarded-Client-Cert"})
    void aHeaderThatAlreadyHasAValueStopsTheStartNamingTheSetting(String header) {
        FailureAnalysis analysis = new IdempotencyFailureAnalyzer().analyze(startupFailure(
                TestDatabases.contextRunner(DATABASE).withPropertyValues("idempotency.header-name=" + header)));
        assertThat(analysis).as("a report naming the setting").isNotNull();
        assertThat(analysis.getDescription()).startsWith("idempotency.header-name (\"" + header + "\")")
                .contains("already means something else");
        assertThat(analysis.getAction()).contains("idempotency.header-name");
    }

    @ParameterizedTest
    @ValueSource(strings = {"Idempotency-Key", "X-Idempotency-Key", "X-Request-Id", "X-Correlation-Id",
            "Request-Id"})
    void aHeaderOfTheClientsOwnStarts(String header) {
        TestDatabases.contextRunner(DATABASE).withPropertyValues("idempotency.header-name=" + header)
                .run(context -> assertThat(context).hasNotFailed());
    }
}
