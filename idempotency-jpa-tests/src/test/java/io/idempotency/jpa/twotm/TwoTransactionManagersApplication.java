package io.idempotency.jpa.twotm;

import io.idempotency.core.Idempotent;
import jakarta.persistence.EntityManagerFactory;
import org.springframework.boot.autoconfigure.SpringBootApplication;
import org.springframework.context.annotation.Bean;
import org.springframework.context.annotation.Primary;
import org.springframework.http.ResponseEntity;
import org.springframework.jdbc.core.JdbcTemplate;
import org.springframework.jdbc.datasource.DataSourceTransactionManager;
import org.springframework.orm.jpa.JpaTransactionManager;
import org.springframework.transaction.annotation.Transactional;
import org.springframework.web.bind.annotation.PostMapping;
import org.springframework.web.bind.annotation.RequestBody;
import org.springframework.web.bind.annotation.RestController;

import javax.sql.DataSource;
import java.util.Map;

/**
 * A JPA application that also defines a JDBC transaction manager on the same DataSource (for JDBC work elsewhere),
 * JPA's being the primary one; its {@code @Idempotent} handler writes through JDBC in a transaction of JPA's, which it
 * names.
 */
@SpringBootApplication
public class TwoTransactionManagersApplication {

    @Bean
    @Primary
    JpaTransactionManager transactionManager(EntityManagerFactory entityManagerFactory) {
        return new JpaTransactionManager(entityManagerFactory);
    }

    @Bean
    DataSourceTransactionManager jdbcTransactionManager(DataSource dataSource) {
        return new DataSourceTransactionManager(dataSource);
    }

    @RestController
    static class Purchases {

        private final JdbcTemplate jdbc;

        Purchases(JdbcTemplate jdbc) {
            this.jdbc = jdbc;
        }

        /** Writes a purchase through JDBC, then answers 503 (an answer that is not stored: the request rolls back). */
        @PostMapping("/purchases")
        @Idempotent
        @Transactional("transactionManager")
        public ResponseEntity<String> purchase(@RequestBody Map<String, String> purchase) {
            jdbc.update("insert into purchases (id, reference, note) values (nextval('purchases_seq'), ?, 'jdbc')",
                    purchase.get("reference"));
            return ResponseEntity.status(503).body("unavailable");
        }
    }
}
