package io.idempotency.spring;

import com.zaxxer.hikari.HikariDataSource;
import io.idempotency.core.ExpiredRecordCleaner;
import io.idempotency.core.IdempotencyStore;
import io.idempotency.jdbc.PostgresIdempotencyStore;
import io.idempotency.jdbc.flyway.IdempotencySchemaMigrator;
import io.idempotency.testkit.TestPostgres;
import io.micrometer.core.instrument.simple.SimpleMeterRegistry;
import org.junit.jupiter.api.Test;
import org.springframework.dao.DataAccessResourceFailureException;

import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Proxy;
import java.time.Duration;
import java.util.concurrent.atomic.AtomicInteger;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatExceptionOfType;

/** What a run of the batched cleanup reports. */
class RetentionSchedulerTest {

    @Test
    void recordsRemovedBeforeARunFailsAreCounted() {
        TestPostgres.Database database = TestPostgres.newDatabase();
        try (HikariDataSource dataSource = database.dataSource(2)) {
            new IdempotencySchemaMigrator(dataSource, "idempotency_keys").migrate();
            database.queryString("insert into idempotency_keys (caller, scope, idempotency_key, status, request_hash,"
                    + " fencing_token, response_status, expires_at) select '', 'POST /x', 'k-' || i, 'SUCCEEDED',"
                    + " repeat('a', 64), gen_random_uuid(), 200, now() - interval '1 second'"
                    + " from generate_series(1, 3) i");
            IdempotencyStore postgres = new PostgresIdempotencyStore(dataSource, "idempotency_keys");
            AtomicInteger deletes = new AtomicInteger();
            // the database goes away after the first batch has been deleted and committed
            IdempotencyStore store = (IdempotencyStore) Proxy.newProxyInstance(getClass().getClassLoader(),
                    new Class<?>[] {IdempotencyStore.class}, (proxy, method, args) -> {
                        if (method.getName().equals("deleteExpired") && deletes.incrementAndGet() == 2) {
                            throw new DataAccessResourceFailureException("connection refused");
                        }
                        try {
                            return method.invoke(postgres, args);
                        } catch (InvocationTargetException e) {
                            throw e.getCause();
                        }
                    });
            SimpleMeterRegistry registry = new SimpleMeterRegistry();
            RetentionScheduler scheduler = RetentionScheduler.deleting(new ExpiredRecordCleaner(store, 1),
                    Duration.ofHours(1), new MicrometerIdempotencyMeters(registry));

            assertThatExceptionOfType(DataAccessResourceFailureException.class).isThrownBy(scheduler::runOnce);

            assertThat(database.queryLong("select count(*) from idempotency_keys")).isEqualTo(2);
            assertThat(registry.get(MicrometerIdempotencyMeters.REMOVED).tag("unit", "records").counter().count())
                    .as("the record that is gone is counted").isEqualTo(1.0);
        }
    }
}
