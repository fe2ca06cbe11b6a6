package io.idempotency.jpa;

import io.idempotency.core.IdempotencyTemplate;
import io.idempotency.core.ScopedKey;
import io.idempotency.jpa.app.JpaTestApplication;
import io.idempotency.jpa.app.Purchase;
import io.idempotency.jpa.app.PurchaseRepository;
import io.idempotency.jpa.app.PurchaseUpdates;
import io.idempotency.testkit.TestPostgres;
import org.junit.jupiter.api.Test;
import org.springframework.beans.factory.annotation.Autowired;
import org.springframework.boot.test.context.SpringBootTest;
import org.springframework.dao.DataIntegrityViolationException;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;

import java.nio.charset.StandardCharsets;
import java.util.UUID;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/**
 * {@link IdempotencyTemplate} (a message consumer's way in) with Spring Data JPA: the work's entities commit with the
 * record, and an INSERT Hibernate held back fails as the work's own failure, leaving nothing.
 */
@SpringBootTest(classes = JpaTestApplication.class, webEnvironment = SpringBootTest.WebEnvironment.NONE)
class JpaIdempotencyTemplateIntegrationTest {

    static final TestPostgres.Database DATABASE = JpaContexts.withPurchases();

    @DynamicPropertySource
    static void database(DynamicPropertyRegistry registry) {
        JpaContexts.register(registry, DATABASE);
    }

    @Autowired
    IdempotencyTemplate template;

    @Autowired
    PurchaseRepository purchases;

    @Test
    void aRedeliveredMessageIsProcessedOnce() throws Exception {
        String reference = "message-" + UUID.randomUUID();
        ScopedKey key = new ScopedKey("", "purchases-queue", reference);

        IdempotencyTemplate.Result first = template.execute(key, bytes(reference), () -> save(reference));
        IdempotencyTemplate.Result redelivered = template.execute(key, bytes(reference), () -> save(reference));

        assertThat(first.replayed()).isFalse();
        assertThat(redelivered.replayed()).isTrue();
        assertThat(redelivered.value()).isEqualTo(first.value());
        assertThat(count(reference)).isEqualTo(1);
        assertThat(record(key.key())).isEqualTo("SUCCEEDED");
    }

    @Test
    void aHeldBackInsertThatFailsIsTheWorksFailureAndLeavesNothing() throws Exception {
        String reference = "taken-" + UUID.randomUUID();
        template.execute(new ScopedKey("", "purchases-queue", "first-" + reference), bytes(reference),
                () -> save(reference));
        ScopedKey key = new ScopedKey("", "purchases-queue", "second-" + reference);

        assertThatThrownBy(() -> template.execute(key, bytes(reference), () -> save(reference)))
                .isInstanceOf(DataIntegrityViolationException.class);

        assertThat(count(reference)).isEqualTo(1);
        assertThat(record(key.key())).as("the key stays free for a retry").isNull();
    }

    /**
     * An update Hibernate holds back until the flush is still a write of the work: an entity listener called at the
     * flush sees the work's idempotency context, as the work's own statements do with plain JDBC.
     */
    @Test
    void aHeldBackUpdateIsWrittenUnderTheWorksContext() throws Exception {
        String reference = "noted-" + UUID.randomUUID();
        long id = purchases.save(new Purchase(reference, "from a message")).getId();
        ScopedKey key = new ScopedKey("", "purchases-queue", "note-" + reference);

        template.execute(key, bytes(reference), () -> {
            purchases.findById(id).orElseThrow().setNote("noted by a message");
            return bytes("noted");
        });

        assertThat(DATABASE.queryString("select note from purchases where reference = '" + reference + "'"))
                .isEqualTo("noted by a message");
        assertThat(PurchaseUpdates.SEEN).filteredOn(seen -> seen.startsWith(reference + " "))
                .containsExactly(reference + " " + key.key());
    }

    /** Saves through the repository; with a sequence id, Hibernate sends the INSERT at the flush. */
    private byte[] save(String reference) {
        return bytes("purchase " + purchases.save(new Purchase(reference, "from a message")).getId());
    }

    private static byte[] bytes(String text) {
        return text.getBytes(StandardCharsets.UTF_8);
    }

    private static long count(String reference) {
        return DATABASE.queryLong("select count(*) from purchases where reference = '" + reference + "'");
    }

    private static String record(String key) {
        return DATABASE.queryString("select status from idempotency_keys where idempotency_key = '" + key + "'");
    }
}
