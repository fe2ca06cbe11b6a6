package io.idempotency.spring.quickstart;

import io.idempotency.core.Idempotent;
import org.springframework.boot.autoconfigure.SpringBootApplication;
import org.springframework.http.ResponseEntity;
import org.springframework.jdbc.core.simple.JdbcClient;
import org.springframework.stereotype.Repository;
import org.springframework.web.bind.annotation.PostMapping;
import org.springframework.web.bind.annotation.RequestBody;
import org.springframework.web.bind.annotation.RestController;

import java.math.BigDecimal;
import java.net.URI;

/**
 * The application the README's "Annotate an endpoint" section describes, its controller method as the README shows
 * it: no {@code @Transactional}, no idempotency code ({@link QuickStartTest}).
 */
@SpringBootApplication
public class QuickStartApplication {

    record PaymentRequest(String orderId, BigDecimal amount, String currency) {
    }

    record Payment(long id, String orderId, BigDecimal amount, String currency) {
    }

    @Repository
    static class Payments {

        private final JdbcClient jdbc;

        Payments(JdbcClient jdbc) {
            this.jdbc = jdbc;
        }

        Payment insert(PaymentRequest request) {
            long id = jdbc.sql("insert into payments (order_id, amount, currency) values (?, ?, ?) returning id")
                    .params(request.orderId(), request.amount(), request.currency()).query(Long.class).single();
            return new Payment(id, request.orderId(), request.amount(), request.currency());
        }
    }

    @RestController
    static class PaymentController {

        private final Payments payments;

        PaymentController(Payments payments) {
            this.payments = payments;
        }

        @PostMapping("/payments")
        @Idempotent
        public ResponseEntity<Payment> create(@RequestBody PaymentRequest request) {
            Payment payment = payments.insert(request);          // joins the idempotent transaction
            return ResponseEntity.created(URI.create("/payments/" + payment.id())).body(payment);
        }
    }
}
