package io.idempotency.spring.war;

import io.idempotency.core.Idempotent;
import io.idempotency.core.IdempotencyMode;
import org.springframework.boot.autoconfigure.SpringBootApplication;
import org.springframework.boot.builder.SpringApplicationBuilder;
import org.springframework.boot.web.servlet.support.SpringBootServletInitializer;
import org.springframework.http.HttpStatus;
import org.springframework.http.ResponseEntity;
import org.springframework.jdbc.core.simple.JdbcClient;
import org.springframework.web.bind.annotation.PostMapping;
import org.springframework.web.bind.annotation.RequestBody;
import org.springframework.web.bind.annotation.RequestHeader;
import org.springframework.web.bind.annotation.RestController;

import java.net.URI;
import java.util.Map;

/**
 * An application packaged as a war: Spring Boot started by the servlet container through
 * {@link SpringBootServletInitializer}, as a container of its own deploys it, with no embedded server.
 */
@SpringBootApplication
public class WarApplication extends SpringBootServletInitializer {

    @Override
    protected SpringApplicationBuilder configure(SpringApplicationBuilder builder) {
        return builder.sources(WarApplication.class);
    }

    public record Payment(String note) {
    }

    @RestController
    static class Payments {

        private final JdbcClient jdbc;

        Payments(JdbcClient jdbc) {
            this.jdbc = jdbc;
        }

        private long insert(String note) {
            return jdbc.sql("insert into orders (note) values (?) returning id").param(note).query(Long.class).single();
        }

        @PostMapping("/payments")
        @Idempotent
        ResponseEntity<Map<String, Object>> pay(@RequestBody Payment payment,
                                                @RequestHeader(name = "X-Pad", defaultValue = "0") int pad) {
            long id = insert(payment.note());
            ResponseEntity.BodyBuilder answer = ResponseEntity.created(URI.create("/payments/" + id));
            if (pad > 0) {
                answer.header("X-Pad", "p".repeat(pad));
            }
            return answer.body(Map.of("id", id, "note", payment.note()));
        }

        /** Writes its row, then fails with an exception no handler of the application maps. */
        @PostMapping("/payments/failing")
        @Idempotent
        Map<String, Object> failing(@RequestBody Payment payment) {
            insert(payment.note());
            throw new IllegalStateException("the ledger refused it");
        }

        /** Writes its row, then answers with {@code sendError}, which the container's error page renders. */
        @PostMapping("/payments/refused")
        @Idempotent
        void refused(@RequestBody Payment payment, jakarta.servlet.http.HttpServletResponse response)
                throws java.io.IOException {
            insert(payment.note());
            response.sendError(HttpStatus.PAYMENT_REQUIRED.value(), "insufficient funds");
        }

        /** Writes its row, then starts async processing, which the startup checks cannot see. */
        @PostMapping("/payments/async")
        @Idempotent
        void async(@RequestBody Payment payment, jakarta.servlet.http.HttpServletRequest request) {
            insert(payment.note());
            request.startAsync();
        }

        /** A charge at a third party: the intent is committed before it, and its lease renewed while it runs. */
        @PostMapping("/charges")
        @Idempotent(mode = IdempotencyMode.INTENT_FIRST, lease = "2s")
        ResponseEntity<Map<String, Object>> charge(@RequestBody Payment payment,
                                                   @RequestHeader(name = "X-Sleep-Ms", defaultValue = "0") long sleepMs)
                throws InterruptedException {
            Thread.sleep(sleepMs);
            long id = insert(payment.note());
            return ResponseEntity.status(HttpStatus.CREATED).body(Map.of("id", id));
        }
    }
}
