package io.idempotency.spring;

import io.idempotency.core.IdempotencyStore;
import org.springframework.beans.factory.annotation.AnnotatedBeanDefinition;
import org.springframework.beans.factory.config.BeanDefinition;
import org.springframework.beans.factory.config.ConfigurableListableBeanFactory;
import org.springframework.boot.sql.init.dependency.DatabaseInitializerDetector;
import org.springframework.boot.sql.init.dependency.DependsOnDatabaseInitializationDetector;
import org.springframework.core.Ordered;
import org.springframework.core.type.MethodMetadata;

import java.util.Set;

/**
 * Makes the library's migration of its table a database initializer, as Flyway's and Liquibase's are: what depends on
 * an initialized database — JPA's EntityManagerFactory, whose Hibernate may validate an entity mapped to the table,
 * {@code JdbcTemplate}s, jOOQ — is made after the table. It runs after the application's own initializers (Flyway,
 * Liquibase, SQL scripts), which may be what creates the table when the library only checks it.
 * <p>
 * Only with the library's own store: a store the application defines may need such a bean itself (a JPA store, one
 * using a {@code JdbcTemplate}), and the initializer, which needs the store, would then be asked to come before what
 * it waits for. Its initializer only comes after the database's initializers then
 * ({@link DependsOnInitialization}), as before.
 */
class IdempotencySchemaInitializerDetector implements DatabaseInitializerDetector {

    /** After Boot's SQL script initializers ({@code Ordered.LOWEST_PRECEDENCE - 100}), so after all of Boot's. */
    static final int ORDER = Ordered.LOWEST_PRECEDENCE - 50;

    @Override
    public Set<String> detect(ConfigurableListableBeanFactory beanFactory) {
        return librarysStore(beanFactory) ? initializers(beanFactory) : Set.of();
    }

    @Override
    public int getOrder() {
        return ORDER;
    }

    /** The schema initializer comes after the database's initializers when it cannot be one of them. */
    static class DependsOnInitialization implements DependsOnDatabaseInitializationDetector {

        @Override
        public Set<String> detect(ConfigurableListableBeanFactory beanFactory) {
            return librarysStore(beanFactory) ? Set.of() : initializers(beanFactory);
        }
    }

    private static Set<String> initializers(ConfigurableListableBeanFactory beanFactory) {
        return Set.of(beanFactory.getBeanNamesForType(IdempotencySchemaInitializer.class, true, false));
    }

    /**
     * Whether the context's one store is the one the starter defines, which needs only the DataSource and the
     * settings: another context's (a parent's) or the application's may need anything.
     */
    static boolean librarysStore(ConfigurableListableBeanFactory beanFactory) {
        String[] stores = beanFactory.getBeanNamesForType(IdempotencyStore.class, true, false);
        if (stores.length != 1 || !beanFactory.containsBeanDefinition(stores[0])) {
            return false;
        }
        BeanDefinition store = beanFactory.getBeanDefinition(stores[0]);
        MethodMetadata factoryMethod = store instanceof AnnotatedBeanDefinition annotated
                ? annotated.getFactoryMethodMetadata() : null;
        return factoryMethod != null
                && IdempotencyAutoConfiguration.class.getName().equals(factoryMethod.getDeclaringClassName())
                && "idempotencyStore".equals(factoryMethod.getMethodName());
    }
}
