package io.idempotency.spring;

import org.apache.catalina.startup.Tomcat;
import org.junit.jupiter.api.Test;
import org.springframework.boot.tomcat.TomcatWebServer;
import org.springframework.mock.env.MockEnvironment;

import static org.assertj.core.api.Assertions.assertThat;

/** The limit of the header section the filter holds an answer to: the embedded server's, as Spring Boot sets it. */
class HeaderSectionLimitTest {

    private static final String TOMCAT = "org.springframework.boot.tomcat.TomcatWebServer";
    private static final String JETTY = "org.springframework.boot.jetty.JettyWebServer";

    @Test
    void aContainerOfItsOwnIsHeldToItsDefaultAndAnUnknownOneToNone() {
        assertThat(IdempotencyAutoConfiguration.containerHeaderSectionLimit("Apache Tomcat/11.0.22")).isEqualTo(8 * 1024);
        assertThat(IdempotencyAutoConfiguration.containerHeaderSectionLimit("jetty/12.1.10")).isEqualTo(8 * 1024);
        assertThat(IdempotencyAutoConfiguration.containerHeaderSectionLimit("MockServletContext"))
                .isEqualTo(Long.MAX_VALUE);
        assertThat(IdempotencyAutoConfiguration.containerHeaderSectionLimit(null)).isEqualTo(Long.MAX_VALUE);
    }

    @Test
    void eachServersDefaultUnlessConfigured() {
        MockEnvironment environment = new MockEnvironment();

        assertThat(IdempotencyAutoConfiguration.headerSectionLimit(TOMCAT, environment)).isEqualTo(8 * 1024);
        // Jetty's header buffer starts at 8 KB, and an answer that outgrows it is not sent, whatever it may grow to
        assertThat(IdempotencyAutoConfiguration.headerSectionLimit(JETTY, environment)).isEqualTo(8 * 1024);

        environment.setProperty("server.tomcat.max-http-response-header-size", "20KB");
        environment.setProperty("server.jetty.max-http-response-header-size", "1000");

        assertThat(IdempotencyAutoConfiguration.headerSectionLimit(TOMCAT, environment)).isEqualTo(20 * 1024);
        assertThat(IdempotencyAutoConfiguration.headerSectionLimit(JETTY, environment)).isEqualTo(1000);
    }

    @Test
    void aLimitThatIsNotPositiveLeavesTheServersDefault() {
        // as Spring Boot gives the server only a positive one
        MockEnvironment environment = new MockEnvironment()
                .withProperty("server.tomcat.max-http-response-header-size", "0")
                .withProperty("server.jetty.max-http-response-header-size", "-1");

        assertThat(IdempotencyAutoConfiguration.headerSectionLimit(TOMCAT, environment)).isEqualTo(8 * 1024);
        assertThat(IdempotencyAutoConfiguration.headerSectionLimit(JETTY, environment)).isEqualTo(8 * 1024);
    }

    @Test
    void jettysLimitIsItsHeaderBufferEvenWhereTheBufferMayGrowFurther() {
        MockEnvironment environment = new MockEnvironment()
                .withProperty("server.jetty.max-http-response-header-size", "64KB");

        assertThat(IdempotencyAutoConfiguration.headerSectionLimit(JETTY, environment)).isEqualTo(8 * 1024);
    }

    @Test
    void aServerOfAClassThatExtendsAKnownOneHasItsLimit() {
        // as Spring Boot's Jetty server for servlets, JettyServletWebServer, extends JettyWebServer
        assertThat(IdempotencyAutoConfiguration.headerSectionLimit(ExtendedTomcatWebServer.class,
                new MockEnvironment())).isEqualTo(8 * 1024);
        assertThat(IdempotencyAutoConfiguration.headerSectionLimit(Object.class, new MockEnvironment()))
                .isEqualTo(Long.MAX_VALUE);
    }

    /** Only its class is used. */
    static class ExtendedTomcatWebServer extends TomcatWebServer {
        ExtendedTomcatWebServer(Tomcat tomcat) {
            super(tomcat);
        }
    }

    @Test
    void anotherServerHasNoLimitTheLibraryKnows() {
        assertThat(IdempotencyAutoConfiguration.headerSectionLimit("com.example.OtherWebServer",
                new MockEnvironment())).isEqualTo(Long.MAX_VALUE);
    }
}
