package io.idempotency.spring;

import org.springframework.test.context.TestPropertySource;

/**
 * The DispatcherServlet mapped under a path of its own: {@code spring.mvc.servlet.path=/api}. A redirect view is
 * relative to the context path (the root here), not to the servlet's path, with or without the library.
 */
@TestPropertySource(properties = "spring.mvc.servlet.path=/api")
class ServletPathIntegrationTest extends DeployedUnderAPathIntegrationTest {

    @Override
    String sentPrefix() {
        return "/api";
    }

    @Override
    String contextPath() {
        return "";
    }
}
