package io.idempotency.sample.payment;

import com.zaxxer.hikari.HikariDataSource;
import org.springframework.boot.autoconfigure.condition.ConditionOutcome;
import org.springframework.boot.autoconfigure.condition.SpringBootCondition;
import org.springframework.boot.context.properties.ConfigurationProperties;
import org.springframework.context.annotation.Bean;
import org.springframework.context.annotation.ConditionContext;
import org.springframework.context.annotation.Conditional;
import org.springframework.context.annotation.Configuration;
import org.springframework.core.type.AnnotatedTypeMetadata;
import org.springframework.util.StringUtils;

import java.io.IOException;

/**
 * The zero-configuration database: when {@code spring.datasource.url} is not set, an embedded PostgreSQL is started on
 * {@code sample.embedded.data-dir} and exposed as the application's {@code DataSource}. With the URL set, this
 * configuration stays out of the way and Spring Boot builds the DataSource from {@code spring.datasource.*} as usual.
 *
 * <p>Pool settings under {@code spring.datasource.hikari.*} apply to the embedded database too.
 */
@Configuration(proxyBeanMethods = false)
@Conditional(EmbeddedPostgresConfiguration.NoDataSourceUrl.class)
public class EmbeddedPostgresConfiguration {

    /** The server; stopped when the context closes, after the pool (which depends on it) has been closed. */
    @Bean(destroyMethod = "close")
    public EmbeddedPostgresServer embeddedPostgresServer(EmbeddedPostgresProperties properties) throws IOException {
        return EmbeddedPostgresServer.start(properties.dataDir(), properties.port());
    }

    /** The application's DataSource, on the embedded server. */
    @Bean
    @ConfigurationProperties("spring.datasource.hikari")
    public HikariDataSource dataSource(EmbeddedPostgresServer server) {
        HikariDataSource dataSource = new HikariDataSource();
        dataSource.setJdbcUrl(server.jdbcUrl());
        dataSource.setUsername(server.username());
        dataSource.setPoolName("embedded-postgres");
        return dataSource;
    }

    /** Matches when no {@code spring.datasource.url} is configured (absent or blank). */
    static class NoDataSourceUrl extends SpringBootCondition {

        @Override
        public ConditionOutcome getMatchOutcome(ConditionContext context, AnnotatedTypeMetadata metadata) {
            String url = context.getEnvironment().getProperty("spring.datasource.url");
            return StringUtils.hasText(url)
                    ? ConditionOutcome.noMatch("spring.datasource.url is set")
                    : ConditionOutcome.match("spring.datasource.url is not set");
        }
    }
}
