package io.idempotency.spring.app;

import org.springframework.boot.autoconfigure.SpringBootApplication;

/** A small application with idempotent endpoints of every kind the starter must handle. */
@SpringBootApplication
public class TestApplication {
}
