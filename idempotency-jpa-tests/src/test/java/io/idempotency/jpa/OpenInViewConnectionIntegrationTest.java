package io.idempotency.jpa;

import io.idempotency.core.Idempotent;
import io.idempotency.core.IdempotencyMode;
import io.idempotency.jpa.app.JpaTestApplication;
import io.idempotency.jpa.app.Purchase;
import io.idempotency.jpa.app.PurchaseController;
import io.idempotency.jpa.app.PurchaseRepository;
import io.idempotency.testkit.TestPostgres;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;
import org.springframework.beans.factory.annotation.Autowired;
import org.springframework.boot.test.context.SpringBootTest;
import org.springframework.http.ResponseEntity;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;
import org.springframework.transaction.annotation.Transactional;
import org.springframework.web.bind.annotation.ModelAttribute;
import org.springframework.web.bind.annotation.PostMapping;
import org.springframework.web.bind.annotation.RequestBody;
import org.springframework.web.bind.annotation.RestController;

import javax.sql.DataSource;
import java.net.URI;
import java.net.http.HttpResponse;
import java.sql.Connection;
import java.sql.Statement;
import java.time.Duration;
import java.util.Map;
import java.util.UUID;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * Under open-in-view, the request's EntityManager keeps the connection it took for a read made before the handler (an
 * entity loaded for its arguments) until the request ends, and JPA's transaction manager runs the claim on that very
 * connection, as an intent-first claim, committed on its own beside the EntityManager, runs on it too: a request needs
 * one connection of the pool, first execution and replay alike. A pool with one connection free shows it — no answer
 * is kept in memory, so every replay goes to the database.
 */
@SpringBootTest(classes = {JpaTestApplication.class, OpenInViewConnectionIntegrationTest.LookedUpFirst.class},
        webEnvironment = SpringBootTest.WebEnvironment.RANDOM_PORT,
        properties = {"spring.datasource.hikari.maximum-pool-size=2",
                "spring.datasource.hikari.connection-timeout=1000",
                "idempotency.replay-cache.max-entries=0",
                "idempotency.retention.cleanup.enabled=false",
                "idempotency.sweeper.enabled=false"})
class OpenInViewConnectionIntegrationTest extends JpaHttpTest {

    static final TestPostgres.Database DATABASE = JpaContexts.withPurchases();

    @Override
    TestPostgres.Database database() {
        return DATABASE;
    }

    @Autowired
    DataSource dataSource;

    @DynamicPropertySource
    static void database(DynamicPropertyRegistry registry) {
        JpaContexts.register(registry, DATABASE);
    }

    /** A handler whose request reads through the EntityManager before the handler runs. */
    @RestController
    static class LookedUpFirst {

        private final PurchaseRepository purchases;

        LookedUpFirst(PurchaseRepository purchases) {
            this.purchases = purchases;
        }

        @ModelAttribute
        void lookUp() {
            purchases.count(); // as an argument loaded from the database would be
        }

        @PostMapping("/looked-up/purchases")
        @Idempotent
        @Transactional
        public ResponseEntity<Map<String, Object>> create(@RequestBody PurchaseController.PurchaseRequest request) {
            Purchase saved = purchases.save(new Purchase(request.reference(), request.note()));
            return ResponseEntity.created(URI.create("/purchases/" + saved.getId()))
                    .body(Map.of("id", saved.getId(), "reference", saved.getReference()));
        }

        /** Intent-first: the claim commits on its own, beside the EntityManager, on the connection it holds. */
        @PostMapping("/looked-up/intent-purchases")
        @Idempotent(mode = IdempotencyMode.INTENT_FIRST, lease = "30s")
        @Transactional
        public ResponseEntity<Map<String, Object>> createIntentFirst(
                @RequestBody PurchaseController.PurchaseRequest request) {
            return create(request);
        }
    }

    @ParameterizedTest
    @ValueSource(strings = {"/looked-up/purchases", "/looked-up/intent-purchases"})
    void aReplayNeedsNoConnectionBeyondTheOneTheRequestHolds(String path) throws Exception {
        String key = UUID.randomUUID().toString();
        String reference = "one-connection-" + key;
        String body = "{\"reference\":\"" + reference + "\",\"note\":\"two tickets\"}";

        HttpResponse<String> first;
        HttpResponse<String> second;
        HttpResponse<String> third;
        try (Connection busyElsewhere = dataSource.getConnection()) { // the pool has one connection left
            first = post(path, key, body);
            second = post(path, key, body);
            third = post(path, key, body);
        }

        assertThat(first.statusCode()).isEqualTo(201);
        for (HttpResponse<String> retry : new HttpResponse[] {second, third}) {
            assertThat(retry.statusCode()).as(retry.body()).isEqualTo(201);
            assertThat(retry.body()).isEqualTo(first.body());
            assertThat(retry.headers().firstValue("Idempotent-Replayed")).hasValue("true");
        }
        assertThat(purchases(reference)).isEqualTo(1);
    }

    /**
     * An intent-first claim whose EntityManager holds no connection yet has one taken for it; a pool that gives none
     * is answered as any claim the database could not take: 503, the handler not run, nothing kept.
     */
    @Test
    void anIntentFirstClaimThePoolGivesNoConnectionIsAnswered503() throws Exception {
        String key = UUID.randomUUID().toString();
        String reference = "no-connection-" + key;

        HttpResponse<String> refused;
        try (Connection first = dataSource.getConnection(); Connection second = dataSource.getConnection()) {
            refused = post("/purchases/intent", key, "{\"reference\":\"" + reference + "\",\"note\":\"x\"}");
        }

        assertThat(refused.statusCode()).as(refused.body()).isEqualTo(503);
        assertThat(refused.body()).contains("idempotency-store-unavailable");
        assertThat(refused.headers().firstValue("Retry-After")).isPresent();
        assertThat(purchases(reference)).isZero();
        assertThat(record(key)).isNull();
    }

    /**
     * A request whose EntityManager has read nothing holds no connection yet: its replay is read on a connection of
     * its own, not claimed. A table locked against writes shows which: the claim's insert waits for the lock, the
     * read does not.
     */
    @Test
    void aReplayIsReadWhenTheRequestsEntityManagerHoldsNoConnectionYet() throws Exception {
        String key = UUID.randomUUID().toString();
        String reference = "read-apart-" + key;
        String body = "{\"reference\":\"" + reference + "\",\"note\":\"two tickets\"}";
        HttpResponse<String> first = post("/purchases", key, body);
        assertThat(first.statusCode()).isEqualTo(201);

        HttpResponse<String> replay;
        try (Connection locker = dataSource.getConnection()) {
            locker.setAutoCommit(false);
            try (Statement lock = locker.createStatement()) {
                lock.execute("LOCK TABLE idempotency_keys IN EXCLUSIVE MODE"); // writes wait, reads do not
                replay = post("/purchases", key, body, Duration.ofSeconds(10));
            } finally {
                locker.rollback();
            }
        }

        assertThat(replay.statusCode()).as(replay.body()).isEqualTo(201);
        assertThat(replay.body()).isEqualTo(first.body());
        assertThat(replay.headers().firstValue("Idempotent-Replayed")).hasValue("true");
        assertThat(purchases(reference)).isEqualTo(1);
    }
}
