package io.idempotency.jpa;

import org.junit.jupiter.api.Test;
import org.springframework.test.context.TestPropertySource;

import java.net.URI;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.util.UUID;

import static org.assertj.core.api.Assertions.assertThat;

/** The same, with open-in-view off: the EntityManager lives as long as the library's transaction, not the request. */
@TestPropertySource(properties = "spring.jpa.open-in-view=false")
class JpaIdempotencyWithoutOpenInViewIntegrationTest extends JpaIdempotencyIntegrationTest {

    /** Without open-in-view there is no EntityManager outside a transaction to read through: JPA's rule, not ours. */
    @Test
    @Override
    void aRequestWithoutAKeyAnsweredOnAnotherThreadStillReadsThroughItsEntityManager() throws Exception {
        HttpResponse<String> created = post("/purchases", UUID.randomUUID().toString(),
                "{\"reference\":\"lazy-" + UUID.randomUUID() + "\",\"note\":\"two tickets\"}");
        String location = created.headers().firstValue("Location").orElseThrow();

        HttpResponse<String> note = http.send(HttpRequest.newBuilder(URI.create("http://localhost:" + port + location
                + "/note")).POST(HttpRequest.BodyPublishers.noBody()).build(), HttpResponse.BodyHandlers.ofString());

        assertThat(note.statusCode()).as("a lazy load without a session fails").isEqualTo(500);
    }
}
