package io.idempotency.jpa.app;

import org.springframework.boot.autoconfigure.SpringBootApplication;

/** A Spring Data JPA application (Hibernate, Boot's JPA transaction manager) with one {@code @Idempotent} endpoint. */
@SpringBootApplication
public class JpaTestApplication {
}
