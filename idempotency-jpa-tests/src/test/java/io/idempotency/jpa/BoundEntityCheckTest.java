package io.idempotency.jpa;

import io.idempotency.core.Idempotent;
import io.idempotency.jpa.app.Purchase;
import io.idempotency.testkit.TestPostgres;
import org.jspecify.annotations.Nullable;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.ExtendWith;
import org.springframework.boot.test.system.CapturedOutput;
import org.springframework.boot.test.system.OutputCaptureExtension;
import org.springframework.boot.test.context.runner.WebApplicationContextRunner;
import org.springframework.web.bind.annotation.PathVariable;
import org.springframework.web.bind.annotation.PostMapping;
import org.springframework.web.bind.annotation.RequestBody;
import org.springframework.web.bind.annotation.RequestParam;
import org.springframework.web.bind.annotation.RestController;

import java.util.Map;
import java.util.Optional;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * An {@code @Idempotent} handler that takes an entity loaded from the request's path or parameters (Spring Data's web
 * support): Spring MVC loads it before the advice sees the request, so a retry after the handler deleted it would be
 * refused with 400 instead of being answered with the stored answer. Warned about at startup, naming the method.
 */
@ExtendWith(OutputCaptureExtension.class)
class BoundEntityCheckTest {

    private static final TestPostgres.Database DATABASE = JpaContexts.withPurchases();

    private final WebApplicationContextRunner contextRunner = JpaContexts.contextRunner(DATABASE);

    @Test
    void aRequiredEntityFromThePathOrAParameterIsWarnedAbout(CapturedOutput output) {
        contextRunner.withUserConfiguration(BoundController.class).run(context -> assertThat(context).hasNotFailed());
        assertThat(output).contains("BoundController.fromThePath(", "BoundController.fromAParameter(",
                Purchase.class.getName(), "path variable", "request parameter", "take its id");
    }

    @Test
    void anIdOrAnEntityThatMayBeMissingIsNotWarnedAbout(CapturedOutput output) {
        contextRunner.withUserConfiguration(AcceptedController.class)
                .run(context -> assertThat(context).hasNotFailed());
        assertThat(output).doesNotContain("Spring MVC loads it before @Idempotent sees the request");
    }

    @RestController
    static class BoundController {
        @PostMapping("/bound/{id}/cancel")
        @Idempotent
        public Map<String, Object> fromThePath(@PathVariable("id") Purchase purchase) {
            return Map.of();
        }

        @PostMapping("/bound/cancel")
        @Idempotent
        public Map<String, Object> fromAParameter(@RequestParam("id") Purchase purchase) {
            return Map.of();
        }
    }

    @RestController
    static class AcceptedController {
        @PostMapping("/accepted/{id}/cancel")
        @Idempotent
        public Map<String, Object> byId(@PathVariable long id) {
            return Map.of();
        }

        @PostMapping("/accepted/{id}/optional")
        @Idempotent
        public Map<String, Object> optional(@PathVariable("id") Optional<Purchase> purchase) {
            return Map.of();
        }

        @PostMapping("/accepted/{id}/nullable")
        @Idempotent
        public Map<String, Object> nullable(@PathVariable("id") @Nullable Purchase purchase) {
            return Map.of();
        }

        @PostMapping("/accepted/not-required")
        @Idempotent
        public Map<String, Object> notRequired(@RequestParam(name = "id", required = false) Purchase purchase) {
            return Map.of();
        }

        @PostMapping("/accepted/in-the-body")
        @Idempotent
        public Map<String, Object> inTheBody(@RequestBody Map<String, Object> body) {
            return Map.of();
        }
    }
}
