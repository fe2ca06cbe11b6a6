package io.idempotency.sample.payment;

import org.springframework.boot.context.properties.ConfigurationProperties;
import org.springframework.boot.context.properties.bind.DefaultValue;

import java.nio.file.Path;

/**
 * Settings of the embedded PostgreSQL that the sample starts when {@code spring.datasource.url} is not set.
 *
 * @param dataDir where the database files live; kept across restarts (relative paths resolve against the working
 *                directory)
 * @param port    the TCP port on 127.0.0.1; 0 picks a free port at every start
 */
@ConfigurationProperties("sample.embedded")
public record EmbeddedPostgresProperties(@DefaultValue("./data/postgres") Path dataDir, @DefaultValue("0") int port) {
}
