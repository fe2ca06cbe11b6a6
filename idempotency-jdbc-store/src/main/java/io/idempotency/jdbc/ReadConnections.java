package io.idempotency.jdbc;

import javax.sql.DataSource;
import java.lang.reflect.InvocationHandler;
import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Proxy;
import java.sql.Connection;
import java.sql.SQLException;

/**
 * Connections for what the library reads outside any transaction of its own (at startup: the isolation level, the
 * table's layout, its columns; the partitions): one that the pool hands out without auto-commit
 * ({@code defaultAutoCommit=false}) begins a transaction with the first statement, which closing it does not end.
 * HikariCP and Commons DBCP2 roll back a connection given back; Tomcat JDBC does not by default
 * ({@code rollbackOnReturn=false}), nor does a pool of one's own. Left in the pool inside a transaction, the connection
 * sits "idle in transaction" (which {@code idle_in_transaction_session_timeout} ends), and the next borrower's
 * transaction that asks for an isolation level fails: PostgreSQL's driver cannot change it in the middle of a
 * transaction. So the connection's transaction, if any, is rolled back before it goes back: it wrote nothing.
 */
public final class ReadConnections {

    private ReadConnections() {
    }

    /**
     * A connection of {@code dataSource} whose {@code close()} first rolls back what it read, when it is not in
     * auto-commit mode. Only for reads: a write made on it without a commit is lost.
     */
    public static Connection borrow(DataSource dataSource) throws SQLException {
        Connection connection = dataSource.getConnection();
        InvocationHandler handler = (proxy, method, args) -> {
            if (method.getName().equals("close") && method.getParameterCount() == 0) {
                try {
                    if (!connection.isClosed() && !connection.getAutoCommit()) {
                        connection.rollback();
                    }
                } catch (SQLException e) {
                    // a lost connection: the database ended its transaction with the session, and the pool discards it
                } finally {
                    connection.close();
                }
                return null;
            }
            try {
                return method.invoke(connection, args);
            } catch (InvocationTargetException e) {
                throw e.getCause();
            }
        };
        return (Connection) Proxy.newProxyInstance(ReadConnections.class.getClassLoader(),
                new Class<?>[] {Connection.class}, handler);
    }
}
