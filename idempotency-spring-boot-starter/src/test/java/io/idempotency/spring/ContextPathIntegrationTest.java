package io.idempotency.spring;

import org.springframework.test.context.TestPropertySource;

/** The application deployed under a context path: {@code server.servlet.context-path=/shop}. */
@TestPropertySource(properties = "server.servlet.context-path=/shop")
class ContextPathIntegrationTest extends DeployedUnderAPathIntegrationTest {

    @Override
    String sentPrefix() {
        return "/shop";
    }

    @Override
    String contextPath() {
        return "/shop";
    }
}
