package io.idempotency.jpa.app;

import io.idempotency.core.Idempotent;
import jakarta.validation.Constraint;
import jakarta.validation.ConstraintValidator;
import jakarta.validation.ConstraintValidatorContext;
import jakarta.validation.Payload;
import jakarta.validation.Validator;
import org.springframework.http.HttpStatus;
import org.springframework.http.ResponseEntity;
import org.springframework.jdbc.core.simple.JdbcClient;
import org.springframework.transaction.annotation.Transactional;
import org.springframework.web.bind.annotation.PostMapping;
import org.springframework.web.bind.annotation.RequestBody;
import org.springframework.web.bind.annotation.RestController;

import java.lang.annotation.ElementType;
import java.lang.annotation.Retention;
import java.lang.annotation.RetentionPolicy;
import java.lang.annotation.Target;
import java.util.Map;

/**
 * A purchase whose reference is checked unused by a validator that asks the database. The handler validates it, not
 * Spring MVC as it binds the body ({@code @Valid}): that would run before {@code @Idempotent} sees the request, and
 * refuse the retry of the request that used the reference instead of replaying its answer.
 */
@RestController
public class UnusedReferences {

    @Target(ElementType.FIELD)
    @Retention(RetentionPolicy.RUNTIME)
    @Constraint(validatedBy = UnusedValidator.class)
    public @interface Unused {
        String message() default "is already used";

        Class<?>[] groups() default {};

        Class<? extends Payload>[] payload() default {};
    }

    public static class UnusedValidator implements ConstraintValidator<Unused, String> {

        private final JdbcClient jdbc;

        public UnusedValidator(JdbcClient jdbc) {
            this.jdbc = jdbc;
        }

        @Override
        public boolean isValid(String reference, ConstraintValidatorContext context) {
            return reference == null || jdbc.sql("select count(*) from purchases where reference = ?")
                    .param(reference).query(Long.class).single() == 0;
        }
    }

    public static final class NewPurchase {
        @Unused
        public String reference;
        public String note;
    }

    private final PurchaseRepository purchases;
    private final Validator validator;

    public UnusedReferences(PurchaseRepository purchases, Validator validator) {
        this.purchases = purchases;
        this.validator = validator;
    }

    @PostMapping("/validated/purchases")
    @Idempotent
    @Transactional
    public ResponseEntity<Map<String, Object>> create(@RequestBody NewPurchase request) {
        if (!validator.validate(request).isEmpty()) {
            return ResponseEntity.status(HttpStatus.UNPROCESSABLE_CONTENT).body(Map.of("error", "reference-used"));
        }
        Purchase saved = purchases.save(new Purchase(request.reference, request.note));
        return ResponseEntity.status(HttpStatus.CREATED).body(Map.of("id", saved.getId()));
    }
}
