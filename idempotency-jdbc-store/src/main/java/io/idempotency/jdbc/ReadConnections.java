package io.idempotency.jdbc;

import org.springframework.jdbc.datasource.DataSourceUtils;
import org.springframework.jdbc.datasource.TransactionAwareDataSourceProxy;
import org.springframework.transaction.support.TransactionSynchronizationManager;

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
 * transaction. So the connection's transaction, if any, is rolled back before it goes back: it wrote nothing. A
 * connection that refuses the rollback is aborted ({@link Connection#abort}) rather than given back inside its
 * transaction: the database ends the transaction with the session, and the pool discards a closed connection. A
 * connection that the caller's transaction holds (one a {@link TransactionAwareDataSourceProxy} hands out inside it) is
 * left as it is: its transaction, with the caller's work, is the caller's to end.
 */
public final class ReadConnections {

    private ReadConnections() {
    }

    /**
     * A connection of {@code dataSource} whose {@code close()} first rolls back what it read, when it is not in
     * auto-commit mode and not the connection of the caller's transaction. Only for reads: a write made on it without
     * a commit is lost.
     */
    public static Connection borrow(DataSource dataSource) throws SQLException {
        DataSource target = unproxied(dataSource);
        // Only through the proxy, and only when a transaction holds a connection of its DataSource, is the connection
        // the caller's. Otherwise it comes from the DataSource the proxy wraps: inside a transaction on another
        // DataSource, Spring would bind the one the proxy fetches to the thread for the rest of that transaction, and
        // the next look-up would get it back as if a transaction held it.
        boolean throughTransaction = target != dataSource
                && TransactionSynchronizationManager.isActualTransactionActive()
                && TransactionSynchronizationManager.hasResource(target);
        Connection connection = throughTransaction ? dataSource.getConnection() : target.getConnection();
        boolean callers;
        try {
            callers = throughTransaction && DataSourceUtils.isConnectionTransactional(
                    DataSourceUtils.getTargetConnection(connection), target);
        } catch (RuntimeException e) {
            connection.close();
            throw e;
        }
        InvocationHandler handler = (proxy, method, args) -> {
            if (method.getName().equals("close") && method.getParameterCount() == 0) {
                if (callers) { // its transaction, with the caller's work, is the caller's to end
                    connection.close();
                } else {
                    giveBack(connection);
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

    /**
     * The DataSource a {@link TransactionAwareDataSourceProxy} wraps, else {@code dataSource}: where the library takes
     * a connection of its own from, which Spring neither hands out from a transaction nor binds to one.
     */
    static DataSource unproxied(DataSource dataSource) {
        return dataSource instanceof TransactionAwareDataSourceProxy proxy && proxy.getTargetDataSource() != null
                ? proxy.getTargetDataSource() : dataSource;
    }

    /**
     * Closes {@code connection}, which no transaction of the caller's holds, once its read is rolled back ({@link
     * #rollBack}). A pool may report a connection aborted there as broken when it comes back; it discards it.
     *
     * @throws SQLException the rollback's failure, when the connection could not be aborted either, or the close's
     */
    private static void giveBack(Connection connection) throws SQLException {
        boolean aborted;
        try {
            aborted = rollBack(connection);
        } catch (SQLException | RuntimeException failed) {
            try {
                connection.close();
            } catch (SQLException e) {
                failed.addSuppressed(e);
            }
            throw failed;
        }
        try {
            connection.close();
        } catch (SQLException e) {
            if (!aborted) {
                throw e;
            }
        }
    }

    /**
     * Rolls back the transaction a read began on {@code connection}, if it is in one; aborts the connection when the
     * rollback fails (a lost connection, whose session the database has ended, is aborted too, which changes nothing).
     * Only for a connection that no transaction of the caller's holds.
     *
     * @return whether the connection was aborted
     * @throws SQLException the rollback's failure, when the connection could not be aborted either
     */
    private static boolean rollBack(Connection connection) throws SQLException {
        try {
            if (!connection.isClosed() && !connection.getAutoCommit()) {
                connection.rollback();
            }
            return false;
        } catch (SQLException e) {
            try {
                connection.abort(Runnable::run);
                return true;
            } catch (SQLException | RuntimeException notAborted) {
                e.addSuppressed(notAborted);
                throw e;
            }
        }
    }
}
