package io.idempotency.jpa;

import io.idempotency.core.DefiniteFailureException;
import io.idempotency.core.Idempotent;
import io.idempotency.core.IdempotencyMode;
import io.idempotency.core.StaleClaimResolver;
import io.idempotency.jpa.app.JpaTestApplication;
import io.idempotency.jpa.app.Purchase;
import io.idempotency.jpa.app.PurchaseRepository;
import io.idempotency.jpa.app.ThreadBoundResources;
import io.idempotency.spring.CallerResolver;
import io.idempotency.testkit.TestPostgres;
import jakarta.servlet.http.HttpServletRequest;
import jakarta.servlet.http.HttpServletResponse;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.Test;
import org.springframework.beans.factory.annotation.Autowired;
import org.springframework.boot.test.context.SpringBootTest;
import org.springframework.context.annotation.Bean;
import org.springframework.context.annotation.Configuration;
import org.springframework.core.Ordered;
import org.springframework.http.HttpStatus;
import org.springframework.http.ResponseEntity;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;
import org.springframework.transaction.annotation.Transactional;
import org.springframework.web.bind.annotation.ExceptionHandler;
import org.springframework.web.bind.annotation.ModelAttribute;
import org.springframework.web.bind.annotation.PathVariable;
import org.springframework.web.bind.annotation.PostMapping;
import org.springframework.web.bind.annotation.RequestBody;
import org.springframework.web.bind.annotation.RestController;
import org.springframework.web.servlet.HandlerInterceptor;
import org.springframework.web.servlet.config.annotation.InterceptorRegistry;
import org.springframework.web.servlet.config.annotation.WebMvcConfigurer;

import java.net.URI;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.util.List;
import java.util.Map;
import java.util.UUID;
import java.util.concurrent.TimeUnit;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * An intent-first endpoint whose entity argument Spring MVC loads (Spring Data's web support) through open-in-view's
 * EntityManager before the advice sees the request. The claim commits on its own before the handler runs, and must
 * leave that EntityManager as it found it: neither write what the request's data binding changed on the entity before
 * the handler had run (a commit through JPA's transaction manager flushes it), nor clear it when the claim finds the
 * key taken (a rollback through JPA's transaction manager does), which would leave the entity the handler changes
 * unmanaged and its change unwritten, while its answer is stored. Nor may a stale claim resolver's transaction write
 * that binding, nor a transaction that runs later in a request the library answered without its handler.
 */
@SpringBootTest(classes = {JpaTestApplication.class, IntentFirstEntityArgumentsIntegrationTest.EntityArguments.class,
        IntentFirstEntityArgumentsIntegrationTest.AuditedElsewhere.class},
        webEnvironment = SpringBootTest.WebEnvironment.RANDOM_PORT,
        properties = {"idempotency.replay-cache.max-entries=0", "idempotency.sweeper.enabled=false"})
class IntentFirstEntityArgumentsIntegrationTest extends JpaHttpTest {

    static final TestPostgres.Database DATABASE = JpaContexts.withPurchases();

    @Override
    TestPostgres.Database database() {
        return DATABASE;
    }

    @DynamicPropertySource
    static void database(DynamicPropertyRegistry registry) {
        JpaContexts.register(registry, DATABASE);
    }

    @Autowired
    PurchaseRepository purchases;

    @RestController
    static class EntityArguments {

        record Renote(String note) {
        }

        /** Renotes the purchase Spring Data's web support loaded by the id in the path. */
        @PostMapping("/entity-arguments/{id}/renote")
        @Idempotent(mode = IdempotencyMode.INTENT_FIRST, lease = "30s")
        @Transactional
        public Map<String, Object> renote(@PathVariable("id") Purchase purchase, @RequestBody Renote renote) {
            purchase.setNote(renote.note());
            return Map.of("id", purchase.getId(), "note", purchase.getNote());
        }

        /**
         * Renotes the purchase named in the path with the form's note, which Spring MVC binds onto it before the
         * handler runs; a note starting with "declined" is declined definitely, and must leave the purchase as it was.
         */
        @PostMapping("/entity-arguments/{purchase}/renote-form")
        @Idempotent(mode = IdempotencyMode.INTENT_FIRST, lease = "30s")
        @Transactional
        public Map<String, Object> renoteForm(@ModelAttribute("purchase") Purchase purchase) {
            if (purchase.getNote().startsWith("declined")) {
                throw new DefiniteFailureException("the gateway declined " + purchase.getReference());
            }
            return Map.of("id", purchase.getId(), "note", purchase.getNote());
        }

        @ExceptionHandler(DefiniteFailureException.class)
        ResponseEntity<Map<String, Object>> declined(DefiniteFailureException e) {
            return ResponseEntity.status(HttpStatus.PAYMENT_REQUIRED).body(Map.of("error", "declined"));
        }
    }

    /**
     * Writes through JPA where an application may, outside the handler: a stale claim resolver that records each
     * claim it is asked about (its local write) before it answers "rerun", and an interceptor that records, after a
     * request asking for it (header {@code X-Audit}), that it was served. Its caller resolver cannot name the caller
     * of a request whose key starts with "callerless-" (it fails) or "nameless-" (it names none).
     */
    @Configuration(proxyBeanMethods = false)
    static class AuditedElsewhere implements WebMvcConfigurer {

        private final PurchaseRepository purchases;

        AuditedElsewhere(PurchaseRepository purchases) {
            this.purchases = purchases;
        }

        @Bean
        StaleClaimResolver recordingResolver() {
            return claim -> {
                if (claim.key().key().startsWith("unreachable-")) {
                    throw new IllegalStateException("the gateway cannot be reached");
                }
                purchases.save(new Purchase("resolved-" + claim.key().key(), "resolved"));
                return StaleClaimResolver.Resolution.rerun();
            };
        }

        @Bean
        CallerResolver keyedCallers() {
            return request -> {
                String key = request.getHeader("Idempotency-Key");
                if (key.startsWith("callerless-")) {
                    throw new IllegalStateException("the caller's account cannot be read");
                }
                return key.startsWith("nameless-") ? null : "";
            };
        }

        @Override
        public void addInterceptors(InterceptorRegistry registry) {
            registry.addInterceptor(new HandlerInterceptor() {
                @Override
                public void afterCompletion(HttpServletRequest request, HttpServletResponse response, Object handler,
                                            Exception failure) {
                    String audit = request.getHeader("X-Audit");
                    if (audit != null) {
                        purchases.save(new Purchase("audit-" + audit, "served"));
                    }
                }
            }).addPathPatterns("/entity-arguments/**")
                    // after open-in-view's, so that it completes first, while the request's EntityManager is open
                    .order(Ordered.LOWEST_PRECEDENCE);
        }
    }

    @Test
    void aRetryRunningAgainUnderAStaleClaimWritesTheChangeToItsEntityArgument() throws Exception {
        long id = purchaseNoted("stale-");
        String key = UUID.randomUUID().toString();
        String path = "/entity-arguments/" + id + "/renote";
        assertThat(post(path, key, "{\"note\":\"renoted\"}").statusCode()).isEqualTo(200);
        // as if the process had died after the claim, before the handler's transaction committed
        DATABASE.queryString("update purchases set note = 'before' where id = " + id);
        abandon(key);

        HttpResponse<String> retry = post(path, key, "{\"note\":\"renoted\"}");

        assertThat(retry.statusCode()).as(retry.body()).isEqualTo(200);
        assertThat(retry.headers().firstValue("Idempotent-Replayed")).as("it ran again").isEmpty();
        assertThat(record(key)).isEqualTo("SUCCEEDED 200");
        assertThat(noteOf(id))
                .as("the change the stored answer shows was written").isEqualTo("renoted");
    }

    @Test
    void whatTheRequestBoundOntoAnEntityIsNotWrittenByTheClaimOfADeclinedRequest() throws Exception {
        long id = purchaseNoted("bound-");
        String key = UUID.randomUUID().toString();

        HttpResponse<String> declined = postForm(id, key, "declined-renote", null);

        assertThat(declined.statusCode()).as(declined.body()).isEqualTo(402);
        assertThat(record(key)).isEqualTo("FAILED -");
        assertThat(noteOf(id))
                .as("nothing of a declined request is written").isEqualTo("before");
    }

    /**
     * A retry that takes a stale claim over asks the resolver, whose local write commits in a transaction of its own:
     * it must not carry what the retry's data binding changed on the entity, which the handler then declines.
     */
    @Test
    void whatTheRequestBoundIsNotWrittenByTheResolversTransaction() throws Exception {
        long id = purchaseNoted("resolved-bound-");
        String key = UUID.randomUUID().toString();
        assertThat(postForm(id, key, "declined-renote", null).statusCode()).isEqualTo(402);
        // the declined attempt's claim, as if its process had died before marking it: PROCESSING, lease run out
        abandon(key);

        HttpResponse<String> retry = postForm(id, key, "declined-renote", null);

        assertThat(retry.statusCode()).as(retry.body()).isEqualTo(402);
        assertThat(purchases("resolved-" + key)).as("the resolver was asked and wrote").isEqualTo(1);
        assertThat(noteOf(id))
                .as("nothing of a declined request is written").isEqualTo("before");
    }

    /**
     * A replay is answered without the handler: what its data binding changed on the entity is not written by a
     * transaction that runs after it in the same request (an interceptor's, here), which would change the purchase a
     * second time.
     */
    @Test
    void aReplayWritesNothingOfWhatItBoundOntoAnEntity() throws Exception {
        long id = purchaseNoted("replayed-bound-");
        String key = UUID.randomUUID().toString();
        HttpResponse<String> first = postForm(id, key, "renoted", null);
        assertThat(first.statusCode()).as(first.body()).isEqualTo(200);
        DATABASE.queryString("update purchases set note = 'changed since' where id = " + id);

        HttpResponse<String> replay = postForm(id, key, "renoted", key);

        assertThat(replay.statusCode()).isEqualTo(200);
        assertThat(replay.headers().firstValue("Idempotent-Replayed")).hasValue("true");
        assertThat(purchases("audit-" + key)).as("the interceptor wrote after the replay").isEqualTo(1);
        assertThat(noteOf(id))
                .as("the replay changed nothing").isEqualTo("changed since");
    }

    /** So is a request the library refuses before its claim, and one whose resolver failed. */
    @Test
    void aRefusedRequestOrOneWhoseResolverFailedWritesNothingOfWhatItBoundOntoAnEntity() throws Exception {
        long id = purchaseNoted("refused-bound-");
        String audit = UUID.randomUUID().toString();
        HttpResponse<String> malformed = postForm(id, "two,keys", "renoted", audit);
        assertThat(malformed.statusCode()).as(malformed.body()).isEqualTo(400);
        assertThat(malformed.body()).contains("idempotency-key-malformed");

        String key = "unreachable-" + UUID.randomUUID();
        assertThat(postForm(id, key, "declined-renote", null).statusCode()).isEqualTo(402);
        abandon(key);
        String staleToken = fencingToken(key);
        HttpResponse<String> unresolved = postForm(id, key, "declined-renote", key);

        assertThat(unresolved.statusCode()).as(unresolved.body()).isEqualTo(500);
        assertThat(purchases("audit-" + audit)).as("the interceptor wrote after the refusal").isEqualTo(1);
        assertThat(purchases("audit-" + key)).as("and after the failed resolution").isEqualTo(1);
        assertThat(record(key)).as("the claim stays for a later resolution").isEqualTo("PROCESSING -");
        assertThat(fencingToken(key)).as("the retry took the stale claim over to ask the resolver")
                .isNotEqualTo(staleToken);
        assertThat(noteOf(id))
                .as("nothing of either request is written").isEqualTo("before");
    }

    /** So is a request whose caller cannot be named: its caller resolver fails, or names none. */
    @Test
    void aRequestWhoseCallerCannotBeNamedWritesNothingOfWhatItBoundOntoAnEntity() throws Exception {
        long id = purchaseNoted("callerless-bound-");
        for (String key : List.of("callerless-" + UUID.randomUUID(), "nameless-" + UUID.randomUUID())) {
            HttpResponse<String> refused = postForm(id, key, "renoted", key);

            assertThat(refused.statusCode()).as(key + ": " + refused.body()).isEqualTo(500);
            assertThat(record(key)).as(key + ": nothing is claimed").isNull();
            assertThat(purchases("audit-" + key)).as(key + ": the interceptor wrote after the failure").isEqualTo(1);
        }
        assertThat(noteOf(id))
                .as("nothing of either request is written").isEqualTo("before");
    }

    /** A new purchase noted "before"; its id. */
    private long purchaseNoted(String referencePrefix) {
        return purchases.save(new Purchase(referencePrefix + UUID.randomUUID(), "before")).getId();
    }

    private static String noteOf(long id) {
        return DATABASE.queryString("select note from purchases where id = " + id);
    }

    /**
     * The key's claim as if its holder's process had died before recording an outcome: PROCESSING, no answer, its
     * lease run out.
     */
    private static void abandon(String key) {
        DATABASE.queryString("update idempotency_keys set status = 'PROCESSING', response_status = null,"
                + " response_headers = null, response_body = null, locked_until = now() - interval '1 minute'"
                + " where idempotency_key = '" + key + "'");
    }

    private static String fencingToken(String key) {
        return DATABASE.queryString("select fencing_token::text from idempotency_keys where idempotency_key = '"
                + key + "'");
    }

    private HttpResponse<String> postForm(long id, String key, String note, String audit) throws Exception {
        HttpRequest.Builder request = HttpRequest.newBuilder(URI.create("http://localhost:" + port
                        + "/entity-arguments/" + id + "/renote-form"))
                .header("Content-Type", "application/x-www-form-urlencoded")
                .header("Idempotency-Key", key)
                .POST(HttpRequest.BodyPublishers.ofString("note=" + note, StandardCharsets.UTF_8));
        if (audit != null) {
            request.header("X-Audit", audit);
        }
        return http.send(request.build(), HttpResponse.BodyHandlers.ofString());
    }

    /** No request of this class left an EntityManager, a connection or a transaction bound to a server thread. */
    @AfterAll
    static void nothingWasLeftBoundToAServerThread() throws InterruptedException {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
        while (ThreadBoundResources.UNFINISHED.get() > 0 && System.nanoTime() < deadline) {
            Thread.sleep(10);
        }
        assertThat(ThreadBoundResources.UNFINISHED.get()).isZero();
        assertThat(ThreadBoundResources.LEFT_BOUND).isEmpty();
    }
}
