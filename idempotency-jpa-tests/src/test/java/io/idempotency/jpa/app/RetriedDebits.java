package io.idempotency.jpa.app;

import io.idempotency.core.Idempotent;
import jakarta.persistence.EntityManager;
import jakarta.persistence.PersistenceContext;
import org.springframework.context.annotation.Configuration;
import org.springframework.dao.OptimisticLockingFailureException;
import org.springframework.resilience.annotation.EnableResilientMethods;
import org.springframework.resilience.annotation.Retryable;
import org.springframework.transaction.annotation.Transactional;
import org.springframework.web.bind.annotation.PathVariable;
import org.springframework.web.bind.annotation.PostMapping;
import org.springframework.web.bind.annotation.RequestBody;
import org.springframework.web.bind.annotation.RestController;

import javax.sql.DataSource;
import java.sql.Connection;
import java.sql.SQLException;
import java.sql.Statement;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;

/**
 * A debit retried by Spring's {@code @Retryable} when Hibernate's versioned UPDATE, at the flush after the handler
 * returned, finds the account changed: the usual answer to optimistic locking.
 */
@RestController
public class RetriedDebits {

    @Configuration(proxyBeanMethods = false)
    @EnableResilientMethods
    static class Resilience {
    }

    /** Accounts changed concurrently once, during their first debit. */
    private final Set<Long> changedOnce = ConcurrentHashMap.newKeySet();
    private final DataSource dataSource;

    @PersistenceContext
    private EntityManager entityManager;

    public RetriedDebits(DataSource dataSource) {
        this.dataSource = dataSource;
    }

    /** Debits an account; during the first attempt for it another transaction takes 5 from it first. */
    @PostMapping("/retried/accounts/{id}/debit")
    @Retryable(includes = OptimisticLockingFailureException.class, maxRetries = 2, delay = 0)
    @Idempotent
    @Transactional
    public Map<String, Object> debit(@PathVariable long id, @RequestBody Map<String, Long> request) {
        Account account = entityManager.find(Account.class, id);
        account.setBalance(account.getBalance() - request.get("amount"));
        if (changedOnce.add(id)) {
            try (Connection other = dataSource.getConnection(); Statement statement = other.createStatement()) {
                statement.executeUpdate("update accounts set balance = balance - 5, version = version + 1"
                        + " where id = " + id);
            } catch (SQLException e) {
                throw new IllegalStateException(e);
            }
        }
        return Map.of("id", id, "balance", account.getBalance());
    }
}
