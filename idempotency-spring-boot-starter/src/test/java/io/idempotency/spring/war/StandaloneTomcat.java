package io.idempotency.spring.war;

import org.apache.catalina.Context;
import org.apache.catalina.LifecycleException;
import org.apache.catalina.startup.Tomcat;
import org.springframework.web.SpringServletContainerInitializer;

import java.io.File;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.HashMap;
import java.util.Map;
import java.util.Set;

/**
 * A Tomcat of its own, as a war is deployed to: the container finds the application's
 * {@code WebApplicationInitializer} through Spring's {@link SpringServletContainerInitializer} (as it would through
 * the jar's {@code META-INF/services} entry) and the application's settings come from the context's parameters (a
 * {@code context.xml}'s), not from Spring Boot's {@code server.*} properties, which it does not apply to a container it
 * did not make. Each webapp has a class loader of the container's, as in a real deployment.
 * <p>
 * Tomcat's types stay inside this class: the test classes that use it are loaded (not run) where Tomcat is not on the
 * class path, by the Jetty module's search for tagged tests, and must not name them.
 */
final class StandaloneTomcat implements AutoCloseable {

    private final Tomcat tomcat = new Tomcat();
    private final Path base;
    private final Map<String, Context> deployed = new HashMap<>();

    StandaloneTomcat() {
        try {
            base = Files.createTempDirectory("standalone-tomcat");
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
        tomcat.setBaseDir(base.toString());
        tomcat.setPort(0);
        tomcat.getConnector(); // the default HTTP/1.1 connector, with the container's own limits
        tomcat.getHost().setAutoDeploy(false);
    }

    /** Deploys {@code initializer}'s application at {@code path} with {@code parameters} as its context's. */
    void deploy(String path, Class<?> initializer, Map<String, String> parameters) {
        File docBase = base.resolve("webapps" + (path.isEmpty() ? "/ROOT" : path)).toFile();
        docBase.mkdirs();
        Context context = tomcat.addContext(path, docBase.getAbsolutePath());
        context.addServletContainerInitializer(new SpringServletContainerInitializer(), Set.of(initializer));
        parameters.forEach(context::addParameter);
        deployed.put(path, context);
    }

    void start() throws LifecycleException {
        tomcat.start();
    }

    int port() {
        return tomcat.getConnector().getLocalPort();
    }

    /** Undeploys the application at {@code path}, as the container's manager does. */
    void undeploy(String path) {
        tomcat.getHost().removeChild(deployed.get(path));
    }

    /** The class loader the container gave the application at {@code path}. */
    ClassLoader classLoader(String path) {
        return deployed.get(path).getLoader().getClassLoader();
    }

    @Override
    public void close() throws LifecycleException {
        tomcat.stop();
        tomcat.destroy();
    }
}
