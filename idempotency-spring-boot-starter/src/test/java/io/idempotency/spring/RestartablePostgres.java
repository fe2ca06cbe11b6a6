package io.idempotency.spring;

import io.idempotency.spring.app.TestApplication;
import io.idempotency.testkit.FreePorts;
import io.zonky.test.db.postgres.embedded.EmbeddedPostgres;
import org.springframework.boot.builder.SpringApplicationBuilder;
import org.springframework.context.ConfigurableApplicationContext;

import java.io.IOException;
import java.nio.file.Path;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.util.ArrayList;
import java.util.List;

/**
 * An embedded PostgreSQL of a test's own (zonky: a real PostgreSQL process on a data directory of the test's), for
 * tests that restart the database under load and so cannot use the configured or shared server. It is stopped with a
 * fast shutdown and started again on the same directory and port, with durable commits as on a production server (the
 * embedded default turns {@code synchronous_commit} off).
 */
final class RestartablePostgres implements AutoCloseable {

    private final Path dataDirectory;
    private final int port;
    private EmbeddedPostgres postgres;

    RestartablePostgres(Path dataDirectory) throws IOException {
        this.dataDirectory = dataDirectory;
        this.port = FreePorts.outsideEphemeralRange(); // kept across restarts
        this.postgres = start();
    }

    String url() {
        return "jdbc:postgresql://localhost:" + port + "/postgres?user=postgres";
    }

    /**
     * The test application on this database, with its orders tables, a pool of {@code poolSize} connections that
     * gives up on a connection after a second, and a one-second in-flight wait.
     */
    ConfigurableApplicationContext startApplication(int poolSize) throws SQLException {
        try (Connection connection = DriverManager.getConnection(url());
             Statement statement = connection.createStatement()) {
            statement.execute("create table orders (id bigserial primary key, note text not null)");
            statement.execute("create table order_audit (order_id bigint not null references orders (id)"
                    + " deferrable initially deferred)");
        }
        return new SpringApplicationBuilder(TestApplication.class).properties(
                "server.port=0",
                "spring.datasource.url=" + url(),
                "spring.datasource.hikari.maximum-pool-size=" + poolSize,
                "spring.datasource.hikari.connection-timeout=1000",
                "spring.datasource.hikari.validation-timeout=500",
                "idempotency.in-flight-wait=1s").run();
    }

    /**
     * Lets the load run for a moment, shuts the database down — a fast shutdown: every session ends now, whatever it
     * was doing — starts it again a second later, and lets the load run on after it.
     */
    void restartUnderLoad() throws IOException, InterruptedException {
        Thread.sleep(1500);
        postgres.close();
        Thread.sleep(1000);
        postgres = start();
        Thread.sleep(2500);
    }

    /** The ids of the orders kept with {@code note}. */
    static List<Long> orderIds(Statement statement, String note) throws SQLException {
        List<Long> ids = new ArrayList<>();
        try (ResultSet rs = statement.executeQuery("select id from orders where note = '" + note + "'")) {
            while (rs.next()) {
                ids.add(rs.getLong(1));
            }
        }
        return ids;
    }

    @Override
    public void close() throws IOException {
        postgres.close();
    }

    private EmbeddedPostgres start() throws IOException {
        return EmbeddedPostgres.builder().setDataDirectory(dataDirectory.toFile()).setCleanDataDirectory(false)
                .setPort(port).setServerConfig("synchronous_commit", "on").start();
    }
}
