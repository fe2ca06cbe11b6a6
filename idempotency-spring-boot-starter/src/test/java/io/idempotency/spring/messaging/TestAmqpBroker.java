package io.idempotency.spring.messaging;

import com.rabbitmq.client.Connection;
import com.rabbitmq.client.ConnectionFactory;
import org.apache.qpid.server.SystemLauncher;
import org.apache.qpid.server.SystemLauncherListener;
import org.apache.qpid.server.model.Broker;
import org.apache.qpid.server.model.Port;
import org.apache.qpid.server.model.SystemConfig;

import java.net.URL;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Comparator;
import java.util.HashMap;
import java.util.Map;
import java.util.concurrent.atomic.AtomicReference;
import java.util.stream.Stream;

/**
 * The AMQP 0-9-1 broker the messaging tests run on, chosen once per JVM in this order — and never skipped:
 * <ol>
 *   <li>the broker at {@value #URI_PROPERTY} (system property) or {@value #URI_ENV} (environment variable), by default
 *       {@value #DEFAULT_URI}: the local RabbitMQ that {@code .ci/run} starts. The probe gives up after about a
 *       second, so an absent broker costs little;</li>
 *   <li>otherwise an in-process Apache Qpid Broker-J (memory store, AMQP 0-8/0-9/0-9-1 plugin) on an ephemeral
 *       loopback port, user guest/guest. It is a real broker on a real socket: acks, nacks and redelivery are its
 *       own, not a mock's.</li>
 * </ol>
 * If neither can be had the tests fail and say why: a redelivery test that silently skips proves nothing.
 *
 * <p>To run the embedded path while RabbitMQ is up, point the probe at a closed port, e.g.
 * {@code -Didempotency.test.amqp-uri=amqp://guest:guest@127.0.0.1:1}.
 */
final class TestAmqpBroker {

    static final String URI_PROPERTY = "idempotency.test.amqp-uri";
    static final String URI_ENV = "IDEMPOTENCY_TEST_AMQP_URI";
    static final String DEFAULT_URI = "amqp://guest:guest@127.0.0.1:5672";

    private static TestAmqpBroker instance;

    private final ConnectionFactory factory;
    private final String description;

    private TestAmqpBroker(ConnectionFactory factory, String description) {
        this.factory = factory;
        this.description = description;
    }

    /** The broker of this JVM: the configured (or local) one if reachable, else the embedded one. */
    static synchronized TestAmqpBroker get() {
        if (instance == null) {
            instance = choose();
            System.err.println("[idempotency tests] AMQP broker: " + instance.description);
        }
        return instance;
    }

    /** A new connection to the broker; the caller closes it. */
    Connection connect() throws Exception {
        return factory.newConnection("idempotency-messaging-test");
    }

    /** Which broker this is, for logs and assertion messages. */
    String description() {
        return description;
    }

    private static TestAmqpBroker choose() {
        String uri = System.getProperty(URI_PROPERTY, System.getenv(URI_ENV));
        if (uri == null || uri.isBlank()) {
            uri = DEFAULT_URI;
        }
        Exception probeFailure;
        try {
            ConnectionFactory factory = factory();
            factory.setUri(uri);
            try (Connection connection = factory.newConnection("idempotency-test-probe")) {
                return new TestAmqpBroker(factory, "external " + connection.getServerProperties().get("product")
                        + " " + connection.getServerProperties().get("version") + " at " + redacted(uri));
            }
        } catch (Exception e) {
            probeFailure = e;
        }
        try {
            return startEmbedded("(" + redacted(uri) + " not reachable: " + probeFailure + ")");
        } catch (Exception | LinkageError e) {
            IllegalStateException failure = new IllegalStateException("no AMQP broker for the tests: "
                    + redacted(uri) + " is not reachable (" + probeFailure + ") — start RabbitMQ"
                    + " (rabbitmq-server -detached) or set " + URI_PROPERTY + " / " + URI_ENV
                    + " — and the embedded Qpid Broker-J did not start (" + e + ")", e);
            failure.addSuppressed(probeFailure);
            throw failure;
        }
    }

    private static ConnectionFactory factory() {
        ConnectionFactory factory = new ConnectionFactory();
        factory.setConnectionTimeout(1_000);
        factory.setHandshakeTimeout(5_000);
        // the tests decide what is redelivered; a client-side recovery would add deliveries of its own
        factory.setAutomaticRecoveryEnabled(false);
        factory.setTopologyRecoveryEnabled(false);
        return factory;
    }

    private static String redacted(String uri) {
        return uri.replaceAll("//[^@/]*@", "//***@");
    }

    /**
     * Starts Qpid Broker-J in this JVM with the configuration {@code qpid-embedded-config.json} beside this class: a
     * memory system config and virtual host (nothing is written but the work directory's bookkeeping, in a temp
     * directory removed at exit), one AMQP port on 127.0.0.1 with port 0, read back once the broker is up.
     */
    private static TestAmqpBroker startEmbedded(String why) throws Exception {
        URL config = TestAmqpBroker.class.getResource("qpid-embedded-config.json");
        if (config == null) {
            throw new IllegalStateException("qpid-embedded-config.json is missing from the test classpath");
        }
        Path workDir = Files.createTempDirectory("qpid-test-broker");
        AtomicReference<SystemConfig<?>> system = new AtomicReference<>();
        SystemLauncher launcher = new SystemLauncher(new SystemLauncherListener.DefaultSystemLauncherListener() {
            @Override
            public void onContainerResolve(SystemConfig<?> systemConfig) {
                system.set(systemConfig);
            }
        });
        Map<String, Object> attributes = new HashMap<>();
        attributes.put(SystemConfig.TYPE, "Memory");
        attributes.put(SystemConfig.INITIAL_CONFIGURATION_LOCATION, config.toExternalForm());
        attributes.put(SystemConfig.STARTUP_LOGGED_TO_SYSTEM_OUT, false);
        attributes.put(SystemConfig.CONTEXT, Map.of(SystemConfig.QPID_WORK_DIR, workDir.toString()));
        launcher.startup(attributes);
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            launcher.shutdown();
            deleteQuietly(workDir);
        }, "stop-test-amqp-broker"));

        int port = -1;
        Broker<?> qpid = system.get().getContainer(Broker.class);
        for (Port<?> candidate : qpid.getPorts()) {
            if ("AMQP".equals(candidate.getName())) {
                port = candidate.getBoundPort();
            }
        }
        if (port <= 0) {
            throw new IllegalStateException("the embedded broker's AMQP port is not bound");
        }
        ConnectionFactory factory = factory();
        factory.setHost("127.0.0.1");
        factory.setPort(port);
        factory.setUsername("guest");
        factory.setPassword("guest");
        try (Connection connection = factory.newConnection("idempotency-test-probe")) {
            return new TestAmqpBroker(factory, "embedded " + connection.getServerProperties().get("product") + " "
                    + connection.getServerProperties().get("version") + " on 127.0.0.1:" + port + " " + why);
        }
    }

    private static void deleteQuietly(Path dir) {
        try (Stream<Path> paths = Files.walk(dir)) {
            paths.sorted(Comparator.reverseOrder()).forEach(p -> p.toFile().delete());
        } catch (Exception ignored) {
            // a temp directory: best effort at JVM exit
        }
    }
}
