package io.idempotency.liquibase.app;

import org.springframework.boot.autoconfigure.SpringBootApplication;

/** An application whose schema Liquibase manages, with one {@code @Idempotent} endpoint. */
@SpringBootApplication
public class LiquibaseTestApplication {
}
