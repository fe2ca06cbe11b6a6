package io.idempotency.spring;

import jakarta.persistence.EntityManager;
import org.hibernate.engine.spi.SharedSessionContractImplementor;
import org.springframework.orm.jpa.EntityManagerHolder;

/**
 * Whether an EntityManager bound to the thread outside any transaction — JPA's open-in-view — holds a JDBC connection
 * yet. Until it has read something it holds none, and a replay may be read on a connection of its own without taking
 * a second one where the claim would take one. JPA has no standard way to ask; Hibernate's session can tell. Referred
 * to only when Hibernate and Spring's JPA support are on the class path.
 */
final class HibernateSessions {

    private HibernateSessions() {
    }

    /** True only of Hibernate's EntityManager, open, whose session has no physical connection. */
    static boolean holdsNoConnection(Object resource) {
        if (!(resource instanceof EntityManagerHolder holder) || holder.getEntityManager() == null) {
            return false;
        }
        EntityManager entityManager = holder.getEntityManager();
        try {
            SharedSessionContractImplementor session = entityManager.unwrap(SharedSessionContractImplementor.class);
            return session.isOpen() && !session.getJdbcCoordinator().getLogicalConnection().isPhysicallyConnected();
        } catch (RuntimeException e) { // not Hibernate's, or closed: say nothing it cannot tell
            return false;
        }
    }
}
