package io.idempotency.benchmarks.instrument;

import io.idempotency.testkit.TestPostgres;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.util.Properties;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * The counting sockets on a real pgjdbc connection to a real PostgreSQL: the round trips the benchmark reports (a
 * plain request's 2) are the driver's turns on the wire, whatever pgjdbc pipelines, and the pool's liveness check is
 * not the request's.
 */
class CountingSocketFactoryTest {

    private Connection connection;

    @BeforeEach
    void connect() throws SQLException {
        TestPostgres.Database database = TestPostgres.newDatabase();
        Properties properties = new Properties();
        if (database.user() != null) {
            properties.setProperty("user", database.user());
        }
        if (database.password() != null) {
            properties.setProperty("password", database.password());
        }
        // the same parameters as the application under test's URL (BenchDatabase.applicationUrl)
        properties.setProperty("sslmode", "disable");
        properties.setProperty("gssEncMode", "disable");
        properties.setProperty("socketFactory", CountingSocketFactory.class.getName());
        connection = DriverManager.getConnection(database.url(), properties);
        try (Statement statement = connection.createStatement()) {
            statement.execute("CREATE TABLE orders (id bigserial PRIMARY KEY, reference text NOT NULL)");
        }
    }

    @AfterEach
    void close() throws SQLException {
        RequestRecord.unbind();
        connection.close();
    }

    @Test
    void aTransactionOfOneInsertIsTwoRoundTripsEachTimeThoughPgjdbcPipelinesItsBegin() throws SQLException {
        // pgjdbc sends BEGIN and the INSERT in one write (2 Syncs), then COMMIT: 2 turns. From the fifth execution
        // on it uses a named server-side statement (prepareThreshold), which changes the messages, not the turns.
        for (int i = 0; i < 8; i++) {
            RequestRecord request = new RequestRecord("plain", true);
            RequestRecord.bind(request);
            connection.setAutoCommit(false);
            try (PreparedStatement insert = connection.prepareStatement(
                    "INSERT INTO orders (reference) VALUES (?) RETURNING id")) {
                insert.setString(1, "order-" + i);
                try (ResultSet rs = insert.executeQuery()) {
                    assertThat(rs.next()).isTrue();
                }
            }
            connection.commit();
            connection.setAutoCommit(true);
            RequestRecord.unbind();

            assertThat(request.roundTrips()).as("execution %d: %s", i, request.trace()).isEqualTo(2);
            assertThat(request.syncs()).as("execution %d", i).isEqualTo(3); // BEGIN (Q), the INSERT's S, COMMIT
            assertThat(request.trace().get(0)).as("execution %d", i)
                    .contains("BEGIN", "INSERT INTO orders (reference) VALUES ($1) RETURNING id");
        }
        assertThat(WireTraffic.unreadable()).isNull();
    }

    @Test
    void thePoolsLivenessCheckOnARequestsThreadIsNotTheRequests() throws SQLException {
        RequestRecord request = new RequestRecord("plain", true);
        RequestRecord.bind(request);
        long outside = WireTraffic.outsideRequests();

        assertThat(connection.isValid(5)).isTrue(); // what Hikari calls before lending a connection idle for 0.5 s
        try (Statement statement = connection.createStatement(); ResultSet rs = statement.executeQuery("SELECT 1")) {
            assertThat(rs.next()).isTrue();
        }

        assertThat(request.roundTrips()).isEqualTo(1);
        assertThat(request.trace()).hasSize(1);
        assertThat(request.trace().get(0)).contains("SELECT 1");
        assertThat(WireTraffic.outsideRequests() - outside).isEqualTo(1);
    }

    @Test
    void roundTripsOutsideARequestAreCountedApart() throws SQLException {
        long outside = WireTraffic.outsideRequests();
        long total = WireTraffic.roundTrips();

        try (Statement statement = connection.createStatement(); ResultSet rs = statement.executeQuery("SELECT 1")) {
            assertThat(rs.next()).isTrue();
        }

        assertThat(WireTraffic.outsideRequests() - outside).isEqualTo(1);
        assertThat(WireTraffic.roundTrips() - total).isEqualTo(1);
    }
}
