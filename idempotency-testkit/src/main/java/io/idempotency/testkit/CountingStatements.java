package io.idempotency.testkit;

import org.springframework.jdbc.datasource.DelegatingDataSource;

import javax.sql.DataSource;
import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Proxy;
import java.sql.Connection;
import java.sql.SQLException;
import java.util.List;
import java.util.concurrent.atomic.AtomicInteger;

/** Counts the statements a store sends, for tests of what the docs say a claim costs. */
public final class CountingStatements {

    private static final List<String> STATEMENTS = List.of("prepareStatement", "createStatement", "prepareCall");

    private CountingStatements() {
    }

    /** {@code dataSource}, counting the statements prepared or created on its connections in {@code statements}. */
    public static DataSource dataSource(DataSource dataSource, AtomicInteger statements) {
        return new DelegatingDataSource(dataSource) {
            @Override
            public Connection getConnection() throws SQLException {
                Connection connection = super.getConnection();
                return (Connection) Proxy.newProxyInstance(CountingStatements.class.getClassLoader(),
                        new Class<?>[] {Connection.class}, (proxy, method, args) -> {
                            if (STATEMENTS.contains(method.getName())) {
                                statements.incrementAndGet();
                            }
                            try {
                                return method.invoke(connection, args);
                            } catch (InvocationTargetException e) {
                                throw e.getCause();
                            }
                        });
            }
        };
    }
}
