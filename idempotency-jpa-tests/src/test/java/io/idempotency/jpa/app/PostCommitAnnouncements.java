package io.idempotency.jpa.app;

import org.hibernate.event.service.spi.EventListenerRegistry;
import org.hibernate.event.spi.EventType;
import org.hibernate.event.spi.PostCommitInsertEventListener;
import org.hibernate.event.spi.PostInsertEvent;
import org.hibernate.integrator.spi.Integrator;
import org.hibernate.jpa.boot.spi.IntegratorProvider;
import org.hibernate.persister.entity.EntityPersister;
import org.springframework.boot.hibernate.autoconfigure.HibernatePropertiesCustomizer;
import org.springframework.context.annotation.Bean;
import org.springframework.context.annotation.Configuration;

import javax.sql.DataSource;
import java.sql.Connection;
import java.sql.SQLException;
import java.sql.Statement;
import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;

/**
 * A Hibernate post-commit listener of the kind an application announces its new rows with (a message sent once the
 * purchase is kept). Hibernate calls it after the database committed; for a purchase noted "fails-after-commit" it
 * fails, as when the broker is down, and for one noted "fails-after-commit-in-the-database" it fails on a statement
 * the database refuses (its announcement written to a table that is not there).
 */
@Configuration(proxyBeanMethods = false)
public class PostCommitAnnouncements {

    /** The references of the purchases announced (or attempted), in order. */
    public static final List<String> ANNOUNCED = new CopyOnWriteArrayList<>();

    @Bean
    HibernatePropertiesCustomizer postCommitAnnouncer(DataSource dataSource) {
        Integrator integrator = new Integrator() {
            @Override
            public void integrate(org.hibernate.boot.Metadata metadata,
                                  org.hibernate.boot.spi.BootstrapContext bootstrapContext,
                                  org.hibernate.engine.spi.SessionFactoryImplementor sessionFactory) {
                sessionFactory.getEventListenerRegistry()
                        .appendListeners(EventType.POST_COMMIT_INSERT, new Announcer(dataSource));
            }
        };
        return properties -> properties.put("hibernate.integrator_provider",
                (IntegratorProvider) () -> List.of(integrator));
    }

    static final class Announcer implements PostCommitInsertEventListener {

        private final DataSource dataSource;

        Announcer(DataSource dataSource) {
            this.dataSource = dataSource;
        }

        @Override
        public void onPostInsert(PostInsertEvent event) {
            if (event.getEntity() instanceof Purchase purchase) {
                ANNOUNCED.add(purchase.getReference());
                if ("fails-after-commit".equals(purchase.getNote())) {
                    throw new IllegalStateException("the broker is down: purchase " + purchase.getReference()
                            + " was not announced");
                }
                if ("fails-after-commit-in-the-database".equals(purchase.getNote())) {
                    try (Connection connection = dataSource.getConnection();
                         Statement statement = connection.createStatement()) {
                        statement.executeUpdate("insert into missing_announcements (reference) values ('"
                                + purchase.getReference() + "')");
                    } catch (SQLException e) {
                        throw new IllegalStateException("purchase " + purchase.getReference()
                                + " was not announced", e);
                    }
                }
            }
        }

        @Override
        public void onPostInsertCommitFailed(PostInsertEvent event) {
        }

        @Override
        public boolean requiresPostCommitHandling(EntityPersister persister) {
            return true;
        }
    }
}
