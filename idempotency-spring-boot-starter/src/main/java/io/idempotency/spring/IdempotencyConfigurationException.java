package io.idempotency.spring;

import org.springframework.beans.factory.BeanInitializationException;

/**
 * The application is set up in a way the library cannot keep its promise in, so it does not start. Spring Boot shows
 * it as a startup failure report ({@link IdempotencyFailureAnalyzer}): what is wrong, and what to do.
 */
class IdempotencyConfigurationException extends BeanInitializationException {

    private final String action;

    /**
     * @param description what is wrong
     * @param action      what to do about it
     */
    IdempotencyConfigurationException(String description, String action) {
        this(description, action, null);
    }

    IdempotencyConfigurationException(String description, String action, Throwable cause) {
        super(description, cause);
        this.action = action;
    }

    String action() {
        return action;
    }
}
