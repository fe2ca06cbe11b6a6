package io.idempotency.spring.usertests;

import io.idempotency.core.Idempotent;
import org.springframework.boot.autoconfigure.SpringBootApplication;
import org.springframework.http.ResponseEntity;
import org.springframework.jdbc.core.simple.JdbcClient;
import org.springframework.stereotype.Service;
import org.springframework.web.bind.annotation.PostMapping;
import org.springframework.web.bind.annotation.RequestBody;
import org.springframework.web.bind.annotation.RestController;

import java.net.URI;

/**
 * An application as its users write it, for the tests they write of it (docs/testing.md): one {@code @Idempotent}
 * endpoint that books a payment in the application's own table ({@code payments}, one per order) through a service,
 * and answers 201 with its {@code Location}.
 */
@SpringBootApplication
public class PaymentsApplication {

    /** The table the application's own migrations would make. */
    static final String PAYMENTS_TABLE = "create table payments (id bigserial primary key,"
            + " order_id text not null unique, amount numeric(19, 2) not null)";

    public record PaymentRequest(String orderId, String amount) {
    }

    public record Payment(long id, String orderId, String amount) {
    }

    @Service
    public static class PaymentService {

        private final JdbcClient jdbc;

        public PaymentService(JdbcClient jdbc) {
            this.jdbc = jdbc;
        }

        public Payment book(PaymentRequest request) {
            long id = jdbc.sql("insert into payments (order_id, amount) values (?, ?::numeric) returning id")
                    .params(request.orderId(), request.amount()).query(Long.class).single();
            return new Payment(id, request.orderId(), request.amount());
        }
    }

    @RestController
    public static class PaymentController {

        private final PaymentService payments;

        public PaymentController(PaymentService payments) {
            this.payments = payments;
        }

        @PostMapping("/payments")
        @Idempotent
        public ResponseEntity<Payment> create(@RequestBody PaymentRequest request) throws InterruptedException {
            if (request.orderId().startsWith("slow-")) {
                Thread.sleep(1000); // holds its key while a duplicate arrives (within the 2 s in-flight wait)
            }
            Payment payment = payments.book(request);
            return ResponseEntity.created(URI.create("/payments/" + payment.id())).body(payment);
        }
    }
}
