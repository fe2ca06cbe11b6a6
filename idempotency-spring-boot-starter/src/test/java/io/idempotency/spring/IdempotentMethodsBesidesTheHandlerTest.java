package io.idempotency.spring;

import io.idempotency.core.Idempotent;
import io.idempotency.testkit.TestPostgres;
import org.junit.jupiter.api.Test;
import org.springframework.http.ResponseEntity;
import org.springframework.ui.Model;
import org.springframework.web.bind.WebDataBinder;
import org.springframework.web.bind.annotation.ExceptionHandler;
import org.springframework.web.bind.annotation.InitBinder;
import org.springframework.web.bind.annotation.ModelAttribute;
import org.springframework.web.bind.annotation.PostMapping;
import org.springframework.web.bind.annotation.RequestBody;
import org.springframework.web.bind.annotation.RestController;
import org.springframework.web.bind.annotation.RestControllerAdvice;

import java.util.Map;

import static io.idempotency.spring.StartupFailures.assertStartFailsWithDescription;
import static org.assertj.core.api.Assertions.assertThat;

/**
 * {@code @Idempotent} on a method Spring MVC calls besides the handler: a {@code @ModelAttribute} or
 * {@code @InitBinder} method, called before the handler of every request to its controller, or an
 * {@code @ExceptionHandler} method. It is never the handler, so the advice refuses the call and every POST to the
 * controller, to its idempotent handlers too, failed with 500 (an exception handler's answer was lost to a 500). The
 * application must say so at startup.
 */
class IdempotentMethodsBesidesTheHandlerTest {

    private static final TestPostgres.Database DATABASE = TestPostgres.newDatabase();

    @Test
    void anIdempotentModelAttributeMethodStopsTheStart() {
        assertStartFailsWithDescription(TestDatabases.contextRunner(DATABASE)
                .withUserConfiguration(ModelAttributeController.class))
                .contains("IdempotentMethodsBesidesTheHandlerTest$ModelAttributeController.defaults(", "@ModelAttribute")
                .doesNotContain("create(");
    }

    @Test
    void anIdempotentInitBinderMethodStopsTheStart() {
        assertStartFailsWithDescription(TestDatabases.contextRunner(DATABASE)
                .withUserConfiguration(InitBinderController.class))
                .contains("IdempotentMethodsBesidesTheHandlerTest$InitBinderController.init(", "@InitBinder");
    }

    @Test
    void anIdempotentExceptionHandlerOfAControllerAdviceStopsTheStart() {
        assertStartFailsWithDescription(TestDatabases.contextRunner(DATABASE)
                .withUserConfiguration(Advice.class, ModelAttributeHandlerController.class))
                .contains("IdempotentMethodsBesidesTheHandlerTest$Advice.conflict(", "@ExceptionHandler");
    }

    /** {@code @ModelAttribute} on a handler names its return value: the handler is idempotent as any other. */
    @Test
    void anIdempotentHandlerWithModelAttributeStarts() {
        TestDatabases.contextRunner(DATABASE).withUserConfiguration(ModelAttributeHandlerController.class)
                .run(context -> assertThat(context).hasNotFailed());
    }

    @RestController
    static class ModelAttributeController {
        @ModelAttribute
        @Idempotent
        public void defaults(Model model) {
            model.addAttribute("currency", "EUR");
        }

        @PostMapping("/payments")
        @Idempotent
        public String create(@RequestBody Map<String, String> payment) {
            return "created";
        }
    }

    @RestController
    static class InitBinderController {
        @InitBinder
        @Idempotent
        public void init(WebDataBinder binder) {
        }

        @PostMapping("/payments")
        @Idempotent
        public String create(@RequestBody Map<String, String> payment) {
            return "created";
        }
    }

    @RestControllerAdvice
    static class Advice {
        @ExceptionHandler(IllegalArgumentException.class)
        @Idempotent
        public ResponseEntity<String> conflict(IllegalArgumentException e) {
            return ResponseEntity.status(409).body("refused");
        }
    }

    @RestController
    static class ModelAttributeHandlerController {
        @PostMapping("/refunds")
        @ModelAttribute("refund")
        @Idempotent
        public String refund() {
            return "refunded";
        }
    }
}
