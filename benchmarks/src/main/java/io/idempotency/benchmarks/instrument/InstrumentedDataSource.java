package io.idempotency.benchmarks.instrument;

import jakarta.servlet.http.HttpServletRequest;
import org.springframework.jdbc.datasource.DelegatingDataSource;
import org.springframework.web.context.request.RequestAttributes;
import org.springframework.web.context.request.RequestContextHolder;
import org.springframework.web.context.request.ServletRequestAttributes;

import javax.sql.DataSource;
import java.lang.reflect.InvocationHandler;
import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Method;
import java.lang.reflect.Proxy;
import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.SQLException;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicBoolean;

/**
 * The application's DataSource, seen through two instruments:
 * <ul>
 *   <li>connections per key: {@code getConnection()} reads the current request's {@code Idempotency-Key} header
 *       (through {@link RequestContextHolder}) and counts the pool connections requests with that key hold at the
 *       same time, until {@code Connection.close()} gives them back; the peak per scenario is kept;</li>
 *   <li>claim time: the library's claim statement (recognised by its {@code ON CONFLICT} clause on the key columns)
 *       is timed around {@code executeQuery()}, one database round trip.</li>
 * </ul>
 * The transaction manager, the idempotency store and the application all use this one bean.
 */
public class InstrumentedDataSource extends DelegatingDataSource {

    static final String KEY_HEADER = "Idempotency-Key";
    /** What tells the library's claim statement from the others; the harness names it when no claim was timed. */
    public static final String CLAIM_MARK = "ON CONFLICT (caller, scope, idempotency_key) DO NOTHING";

    private final BenchStats stats;
    private final ConcurrentHashMap<String, Integer> heldByKey = new ConcurrentHashMap<>();

    public InstrumentedDataSource(DataSource target, BenchStats stats) {
        super(target);
        this.stats = stats;
    }

    @Override
    public Connection getConnection() throws SQLException {
        return track(super.getConnection());
    }

    @Override
    public Connection getConnection(String username, String password) throws SQLException {
        return track(super.getConnection(username, password));
    }

    private Connection track(Connection connection) {
        String key = currentKey();
        RequestRecord record = RequestRecord.current();
        if (key != null) {
            int held = heldByKey.merge(key, 1, Integer::sum);
            if (record != null) {
                stats.scenario(record.scenario()).connectionsHeldByKey(held);
            }
        }
        return (Connection) Proxy.newProxyInstance(Connection.class.getClassLoader(),
                new Class<?>[]{Connection.class}, new ConnectionHandler(connection, key));
    }

    private void released(String key) {
        heldByKey.computeIfPresent(key, (k, held) -> held == 1 ? null : held - 1);
    }

    private static String currentKey() {
        RequestAttributes attributes = RequestContextHolder.getRequestAttributes();
        if (attributes instanceof ServletRequestAttributes servlet) {
            HttpServletRequest request = servlet.getRequest();
            return request.getHeader(KEY_HEADER);
        }
        return null;
    }

    private final class ConnectionHandler implements InvocationHandler {

        private final Connection target;
        private final String key;
        private final AtomicBoolean closed = new AtomicBoolean();

        ConnectionHandler(Connection target, String key) {
            this.target = target;
            this.key = key;
        }

        @Override
        public Object invoke(Object proxy, Method method, Object[] args) throws Throwable {
            String name = method.getName();
            if (name.equals("close") && closed.compareAndSet(false, true) && key != null) {
                released(key);
            }
            if (name.equals("equals")) {
                return proxy == args[0];
            }
            if (name.equals("hashCode")) {
                return System.identityHashCode(proxy);
            }
            Object result = call(target, method, args);
            if (name.equals("prepareStatement") && args[0] instanceof String sql && sql.contains(CLAIM_MARK)) {
                return timedClaim((PreparedStatement) result);
            }
            return result;
        }
    }

    private static PreparedStatement timedClaim(PreparedStatement statement) {
        return (PreparedStatement) Proxy.newProxyInstance(PreparedStatement.class.getClassLoader(),
                new Class<?>[]{PreparedStatement.class}, (proxy, method, args) -> {
                    if (!method.getName().startsWith("execute")) {
                        return call(statement, method, args);
                    }
                    long start = System.nanoTime();
                    try {
                        return call(statement, method, args);
                    } finally {
                        RequestRecord record = RequestRecord.current();
                        if (record != null) {
                            record.claimTook(System.nanoTime() - start);
                        }
                    }
                });
    }

    private static Object call(Object target, Method method, Object[] args) throws Throwable {
        try {
            return method.invoke(target, args);
        } catch (InvocationTargetException e) {
            throw e.getCause();
        }
    }
}
