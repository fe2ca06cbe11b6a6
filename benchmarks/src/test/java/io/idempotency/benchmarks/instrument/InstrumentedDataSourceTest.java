package io.idempotency.benchmarks.instrument;

import jakarta.servlet.http.HttpServletRequest;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.springframework.web.context.request.RequestContextHolder;
import org.springframework.web.context.request.ServletRequestAttributes;

import javax.sql.DataSource;
import java.lang.reflect.Proxy;
import java.sql.Connection;
import java.util.Map;
import java.util.concurrent.CyclicBarrier;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * The peak of pool connections held at once by requests with the same key ({@code storm_max_connections_per_key}),
 * without an application: request threads are made by hand (a request with the key in its header, the record of its
 * scenario), and the pool by a DataSource whose connections do nothing.
 */
class InstrumentedDataSourceTest {

    private final BenchStats stats = new BenchStats();
    private final InstrumentedDataSource dataSource = new InstrumentedDataSource(pool(), stats);
    private final ExecutorService threads = Executors.newFixedThreadPool(2);

    @AfterEach
    void stop() {
        threads.shutdownNow();
    }

    @Test
    void twoRequestsWithTheSameKeyHoldingAConnectionAtOnceCountTwo() throws Exception {
        CyclicBarrier bothHold = new CyclicBarrier(2);
        Future<?> one = threads.submit(() -> request("storm", "storm-a", bothHold));
        Future<?> other = threads.submit(() -> request("storm", "storm-a", bothHold));
        one.get(10, TimeUnit.SECONDS);
        other.get(10, TimeUnit.SECONDS);

        assertThat(maxConnectionsPerKey("storm")).isEqualTo(2);
    }

    @Test
    void twoRequestsWithTheSameKeyHoldingAConnectionOneAfterTheOtherCountOne() throws Exception {
        threads.submit(() -> request("storm", "storm-a", null)).get(10, TimeUnit.SECONDS);
        threads.submit(() -> request("storm", "storm-a", null)).get(10, TimeUnit.SECONDS);

        assertThat(maxConnectionsPerKey("storm")).isEqualTo(1);
    }

    @Test
    void requestsWithOtherKeysHoldingConnectionsAtOnceCountOneEach() throws Exception {
        CyclicBarrier bothHold = new CyclicBarrier(2);
        Future<?> one = threads.submit(() -> request("storm", "storm-a", bothHold));
        Future<?> other = threads.submit(() -> request("storm", "storm-b", bothHold));
        one.get(10, TimeUnit.SECONDS);
        other.get(10, TimeUnit.SECONDS);

        assertThat(maxConnectionsPerKey("storm")).isEqualTo(1);
    }

    /**
     * A request on this thread: takes a connection, waits at {@code whileHeld} (when given) until the other request
     * holds one too, and gives it back.
     */
    private Void request(String scenario, String key, CyclicBarrier whileHeld) throws Exception {
        RequestContextHolder.setRequestAttributes(new ServletRequestAttributes(withKey(key)));
        RequestRecord.bind(new RequestRecord(scenario, false));
        try (Connection ignored = dataSource.getConnection()) {
            if (whileHeld != null) {
                whileHeld.await(10, TimeUnit.SECONDS);
            }
        } finally {
            RequestRecord.unbind();
            RequestContextHolder.resetRequestAttributes();
        }
        return null;
    }

    private int maxConnectionsPerKey(String scenario) {
        Map<?, ?> scenarios = (Map<?, ?>) stats.toMap().get("scenarios");
        return (Integer) ((Map<?, ?>) scenarios.get(scenario)).get("maxConnectionsPerKey");
    }

    private static HttpServletRequest withKey(String key) {
        return (HttpServletRequest) Proxy.newProxyInstance(HttpServletRequest.class.getClassLoader(),
                new Class<?>[]{HttpServletRequest.class}, (proxy, method, args) -> {
                    if (method.getName().equals("getHeader")) {
                        return InstrumentedDataSource.KEY_HEADER.equalsIgnoreCase((String) args[0]) ? key : null;
                    }
                    throw new UnsupportedOperationException(method.getName());
                });
    }

    /** A pool whose connections do nothing: the instrument counts what is borrowed and given back, not what is sent. */
    private static DataSource pool() {
        return (DataSource) Proxy.newProxyInstance(DataSource.class.getClassLoader(), new Class<?>[]{DataSource.class},
                (proxy, method, args) -> {
                    if (method.getName().equals("getConnection")) {
                        return Proxy.newProxyInstance(Connection.class.getClassLoader(),
                                new Class<?>[]{Connection.class}, (connection, call, arguments) -> null);
                    }
                    throw new UnsupportedOperationException(method.getName());
                });
    }
}
