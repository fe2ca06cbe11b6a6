package io.idempotency.jpa;

import io.idempotency.core.IdempotencyStore;
import io.idempotency.core.IdempotencyTemplate;
import io.idempotency.core.ScopedKey;
import io.idempotency.jdbc.PostgresIdempotencyStore;
import io.idempotency.jpa.records.IdempotencyKeyRow;
import io.idempotency.testkit.TestPostgres;
import jakarta.persistence.EntityManagerFactory;
import org.junit.jupiter.api.Test;
import org.springframework.boot.persistence.autoconfigure.EntityScan;
import org.springframework.context.annotation.Bean;
import org.springframework.context.annotation.Configuration;

import javax.sql.DataSource;
import java.util.UUID;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * The library creates its table before the application's JPA starts: an application that maps the table as an entity,
 * with Hibernate validating the mapping, starts on a fresh database (Hibernate looked for the table before the library
 * had made it). The library's migration is a database initializer, as Flyway's is; a store of the application's may
 * itself need JPA, and then its table is made after JPA, without a cycle.
 */
class RecordsMappedAsAnEntityTest {

    @Test
    void anEntityOfTheTableIsValidatedAfterTheLibraryCreatedItOnAFreshDatabase() {
        TestPostgres.Database fresh = TestPostgres.newDatabase();
        JpaContexts.contextRunner(fresh)
                .withUserConfiguration(MappedRecords.class)
                .withPropertyValues("spring.jpa.hibernate.ddl-auto=validate")
                .run(context -> {
                    assertThat(context).hasNotFailed();
                    String key = UUID.randomUUID().toString();
                    assertThat(context.getBean(IdempotencyTemplate.class).execute(new ScopedKey("", "entity", key),
                            key.getBytes(), () -> "done".getBytes()).replayed()).isFalse();
                    IdempotencyKeyRow row = context.getBean(EntityManagerFactory.class).createEntityManager()
                            .createQuery("select r from IdempotencyKeyRow r where r.key = :key",
                                    IdempotencyKeyRow.class)
                            .setParameter("key", key).getSingleResult();
                    assertThat(row.status()).isEqualTo("SUCCEEDED");
                });
    }

    /**
     * Hibernate told to create its entities' tables drops the library's table, made before it, and makes it again in
     * the entity's shape: the start stops, saying so, rather than every claim failing on the columns the entity lacks
     * (and every start dropping the records).
     */
    @Test
    void anEntityOfTheTableThatHibernateCreatesAgainStopsTheStart() {
        assertThat(startupFailure(MappedRecords.class, "spring.jpa.hibernate.ddl-auto=create"))
                .hasStackTraceContaining("The idempotency table was dropped and made again while the application"
                        + " started");
    }

    /**
     * A table made again in the library's very shape (Hibernate with an entity that maps every column, a bean of the
     * application's) holds none of the records: the start stops too, as the shape alone would not tell.
     */
    @Test
    void aTableMadeAgainInTheLibrarysShapeStopsTheStart() {
        assertThat(startupFailure(TableMadeAgain.class))
                .hasStackTraceContaining("The idempotency table was dropped and made again while the application"
                        + " started")
                .hasStackTraceContaining("are gone");
    }

    /** A table changed in place (a column dropped) while the application starts stops the start, naming what lacks. */
    @Test
    void aTableChangedInPlaceStopsTheStart() {
        assertThat(startupFailure(TableChangedInPlace.class))
                .hasStackTraceContaining("The idempotency table was changed while the application started")
                .hasStackTraceContaining("locked_until");
    }

    /** Why the start of an application with {@code configuration} on a fresh database failed; it must have failed. */
    private static Throwable startupFailure(Class<?> configuration, String... properties) {
        Throwable[] failure = new Throwable[1];
        JpaContexts.contextRunner(TestPostgres.newDatabase())
                .withUserConfiguration(configuration)
                .withPropertyValues(properties)
                .run(context -> {
                    assertThat(context).hasFailed();
                    failure[0] = context.getStartupFailure();
                });
        return failure[0];
    }

    @Configuration(proxyBeanMethods = false)
    static class TableChangedInPlace {
        @Bean
        @org.springframework.context.annotation.DependsOn("idempotencySchemaInitializer")
        Object tableChangedInPlace(DataSource dataSource) {
            new org.springframework.jdbc.core.JdbcTemplate(dataSource)
                    .execute("alter table idempotency_keys drop column locked_until");
            return new Object();
        }
    }

    @Configuration(proxyBeanMethods = false)
    static class TableMadeAgain {
        @Bean
        @org.springframework.context.annotation.DependsOn("idempotencySchemaInitializer")
        Object tableMadeAgain(DataSource dataSource) {
            new org.springframework.jdbc.core.JdbcTemplate(dataSource).execute("drop table idempotency_keys");
            new org.springframework.jdbc.datasource.init.ResourceDatabasePopulator(
                    new org.springframework.core.io.ClassPathResource("io/idempotency/jdbc/postgresql/schema.sql"))
                    .execute(dataSource);
            return new Object();
        }
    }

    /**
     * The library's store is its own: a store the application defines — even of the library's class — may need
     * what needs the database initialized (JPA here), and the table is then made after it, not before.
     */
    @Test
    void aStoreOfTheApplicationsThatNeedsJpaStillStarts() {
        TestPostgres.Database fresh = TestPostgres.newDatabase();
        JpaContexts.contextRunner(fresh)
                .withUserConfiguration(StoreNeedingJpa.class)
                .run(context -> {
                    assertThat(context).hasNotFailed();
                    assertThat(fresh.queryString("select to_regclass('idempotency_keys')::text"))
                            .isEqualTo("idempotency_keys");
                });
    }

    @Configuration(proxyBeanMethods = false)
    @EntityScan(basePackageClasses = IdempotencyKeyRow.class)
    static class MappedRecords {
    }

    @Configuration(proxyBeanMethods = false)
    static class StoreNeedingJpa {
        @Bean
        IdempotencyStore idempotencyStore(DataSource dataSource, EntityManagerFactory entityManagerFactory) {
            return new PostgresIdempotencyStore(dataSource, "idempotency_keys");
        }
    }
}
