package io.idempotency.spring.usertests;

import io.idempotency.testkit.Await;
import io.idempotency.testkit.TestPostgres;
import org.junit.jupiter.api.Test;
import org.springframework.beans.factory.annotation.Autowired;
import org.springframework.boot.test.context.SpringBootTest;
import org.springframework.boot.webmvc.test.autoconfigure.AutoConfigureMockMvc;
import org.springframework.http.MediaType;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;
import org.springframework.test.web.servlet.MockMvc;
import org.springframework.test.web.servlet.MvcResult;
import org.springframework.test.web.servlet.assertj.MockMvcTester;
import org.springframework.test.web.servlet.client.RestTestClient;

import java.time.Duration;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;

import static org.assertj.core.api.Assertions.assertThat;
import static org.springframework.test.web.servlet.request.MockMvcRequestBuilders.post;
import static org.springframework.test.web.servlet.result.MockMvcResultMatchers.content;
import static org.springframework.test.web.servlet.result.MockMvcResultMatchers.header;
import static org.springframework.test.web.servlet.result.MockMvcResultMatchers.jsonPath;
import static org.springframework.test.web.servlet.result.MockMvcResultMatchers.status;

/**
 * An application's own test of its {@code @Idempotent} endpoint, as docs/testing.md shows it: the whole application
 * ({@code @SpringBootTest}, default mock web environment) with MockMvc, on a real PostgreSQL. The first request, its
 * replay, a different body under the key, a missing key and a duplicate sent while the first is still running are
 * answered as a real server answers them, through MockMvc, MockMvcTester and a RestTestClient bound to MockMvc alike.
 */
@SpringBootTest(classes = PaymentsApplication.class)
@AutoConfigureMockMvc
class MockMvcApplicationTest {

    static final TestPostgres.Database DATABASE = TestPostgres.newDatabase();

    static {
        DATABASE.queryString(PaymentsApplication.PAYMENTS_TABLE);
    }

    @DynamicPropertySource
    static void database(DynamicPropertyRegistry registry) {
        DATABASE.springProperties().forEach((name, value) -> registry.add(name, () -> value));
    }

    @Autowired
    MockMvc mvc;

    @Autowired
    MockMvcTester tester;

    // docs/testing.md: "The whole application with MockMvc"
    @Test
    void aRetryIsReplayedAndBooksOnce() throws Exception {
        String body = "{\"orderId\":\"o-1\",\"amount\":\"12.50\"}";
        MvcResult first = mvc.perform(post("/payments").contentType(MediaType.APPLICATION_JSON)
                        .header("Idempotency-Key", "key-1").content(body))
                .andExpect(status().isCreated())
                .andExpect(header().doesNotExist("Idempotent-Replayed"))
                .andReturn();

        mvc.perform(post("/payments").contentType(MediaType.APPLICATION_JSON)
                        .header("Idempotency-Key", "key-1").content(body))
                .andExpect(status().isCreated())
                .andExpect(header().string("Idempotent-Replayed", "true"))
                .andExpect(header().string("Location", first.getResponse().getHeader("Location")))
                .andExpect(content().bytes(first.getResponse().getContentAsByteArray()));

        mvc.perform(post("/payments").contentType(MediaType.APPLICATION_JSON)
                        .header("Idempotency-Key", "key-1").content("{\"orderId\":\"o-1\",\"amount\":\"99.00\"}"))
                .andExpect(status().isUnprocessableContent())
                .andExpect(content().contentType(MediaType.APPLICATION_PROBLEM_JSON))
                .andExpect(jsonPath("$.type").value(
                        "https://idempotency-starter.github.io/problems/idempotency-key-mismatch"));

        mvc.perform(post("/payments").contentType(MediaType.APPLICATION_JSON).content(body))
                .andExpect(status().isBadRequest())
                .andExpect(jsonPath("$.type").value(
                        "https://idempotency-starter.github.io/problems/idempotency-key-missing"));

        assertThat(DATABASE.queryLong("select count(*) from payments where order_id = 'o-1'")).isEqualTo(1);
    }

    @Test
    void aDuplicateSentWhileTheFirstRunsWaitsForItAndIsReplayed() throws Exception {
        String body = "{\"orderId\":\"slow-1\",\"amount\":\"5.00\"}";
        CountDownLatch sent = new CountDownLatch(1);
        CompletableFuture<MvcResult> first = CompletableFuture.supplyAsync(() -> {
            try {
                sent.countDown();
                return mvc.perform(post("/payments").contentType(MediaType.APPLICATION_JSON)
                        .header("Idempotency-Key", "key-slow").content(body)).andReturn();
            } catch (Exception e) {
                throw new IllegalStateException(e);
            }
        });
        assertThat(sent.await(5, TimeUnit.SECONDS)).isTrue();
        // the first holds its claim, in its open transaction, for a second: the duplicate comes while it runs
        Await.until("the first request's claim", Duration.ofSeconds(5), () -> DATABASE.queryLong(
                "select count(*) from pg_stat_activity where application_name = '" + DATABASE.schema() + "'"
                        + " and state = 'idle in transaction'") > 0);
        assertThat(first).as("the first request, still running when the duplicate is sent").isNotDone();
        MvcResult duplicate = mvc.perform(post("/payments").contentType(MediaType.APPLICATION_JSON)
                .header("Idempotency-Key", "key-slow").content(body)).andReturn();
        MvcResult original = first.get(10, TimeUnit.SECONDS);

        List<MvcResult> answers = List.of(original, duplicate);
        assertThat(answers).allSatisfy(answer -> assertThat(answer.getResponse().getStatus()).isEqualTo(201));
        assertThat(answers).filteredOn(answer -> "true".equals(answer.getResponse().getHeader("Idempotent-Replayed")))
                .hasSize(1);
        assertThat(duplicate.getResponse().getContentAsString())
                .isEqualTo(original.getResponse().getContentAsString());
        assertThat(DATABASE.queryLong("select count(*) from payments where order_id = 'slow-1'")).isEqualTo(1);
    }

    // docs/testing.md: "MockMvcTester"
    @Test
    void mockMvcTesterSeesTheReplay() {
        String body = "{\"orderId\":\"o-2\",\"amount\":\"1.00\"}";
        assertThat(tester.post().uri("/payments").contentType(MediaType.APPLICATION_JSON)
                .header("Idempotency-Key", "key-2").content(body))
                .hasStatus(201).doesNotContainHeader("Idempotent-Replayed");
        assertThat(tester.post().uri("/payments").contentType(MediaType.APPLICATION_JSON)
                .header("Idempotency-Key", "key-2").content(body))
                .hasStatus(201).hasHeader("Idempotent-Replayed", "true");
        assertThat(DATABASE.queryLong("select count(*) from payments where order_id = 'o-2'")).isEqualTo(1);
    }

    // docs/testing.md: "RestTestClient"
    @Test
    void aRestTestClientBoundToMockMvcSeesTheReplay() {
        RestTestClient client = RestTestClient.bindTo(mvc).build();
        String body = "{\"orderId\":\"o-3\",\"amount\":\"1.00\"}";
        String location = client.post().uri("/payments").contentType(MediaType.APPLICATION_JSON)
                .header("Idempotency-Key", "key-3").body(body)
                .exchange()
                .expectStatus().isCreated()
                .expectHeader().doesNotExist("Idempotent-Replayed")
                .returnResult().getResponseHeaders().getFirst("Location");
        client.post().uri("/payments").contentType(MediaType.APPLICATION_JSON)
                .header("Idempotency-Key", "key-3").body(body)
                .exchange()
                .expectStatus().isCreated()
                .expectHeader().valueEquals("Idempotent-Replayed", "true")
                .expectHeader().valueEquals("Location", location);
        assertThat(DATABASE.queryLong("select count(*) from payments where order_id = 'o-3'")).isEqualTo(1);
    }
}
