package io.idempotency.spring;

import io.idempotency.core.ScopedKey;
import io.idempotency.core.StaleClaimResolver;
import io.idempotency.core.StaleClaimSweeper;
import io.idempotency.core.StaleClaimUndecidedException;
import io.idempotency.core.StoragePolicy;
import io.idempotency.core.StoredResponse;
import io.idempotency.testkit.TestPostgres;
import org.junit.jupiter.api.Test;
import org.springframework.boot.test.context.runner.ApplicationContextRunner;
import org.springframework.context.annotation.Bean;
import org.springframework.context.annotation.Configuration;

import java.nio.charset.StandardCharsets;
import java.util.List;
import java.util.UUID;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * The sweeper stores a resolver's "complete" answer only with a status the application's {@link StoragePolicy}
 * keeps, as a handler's answer is stored: a resolver passing on a third party's 503 would otherwise have that 503
 * replayed for as long as the record is kept.
 */
class ResolverAnswerStatusIntegrationTest {

    @Test
    void theSweeperLeavesAClaimWhoseResolverAnsweredAStatusThePolicyDoesNotKeep() throws Exception {
        TestPostgres.Database database = TestPostgres.newDatabase();
        runner(database).run(context -> {
            assertThat(context).hasNotFailed();
            ScopedKey key = new ScopedKey("", "charges-listener", "msg-" + UUID.randomUUID());
            staleClaim(database, key);

            StaleClaimSweeper.Sweep sweep = context.getBean(StaleClaimSweepScheduler.class).sweepOnce();

            assertThat(sweep.completed()).isZero();
            assertThat(sweep.unresolved()).singleElement()
                    .satisfies(unresolved -> assertThat(unresolved.key()).isEqualTo(key))
                    .satisfies(unresolved -> assertThat(unresolved.error())
                            .isInstanceOf(StaleClaimUndecidedException.class))
                    .extracting(unresolved -> unresolved.error().getMessage()).asString()
                    .contains("503", "storage policy");
            assertThat(status(database, key)).as("left for a later resolution").isEqualTo("PROCESSING");
        });
    }

    @Test
    void theSweeperStoresTheStatusesTheApplicationsPolicyKeeps() throws Exception {
        TestPostgres.Database database = TestPostgres.newDatabase();
        runner(database).withUserConfiguration(KeepEverything.class).run(context -> {
            assertThat(context).hasNotFailed();
            ScopedKey key = new ScopedKey("", "charges-listener", "msg-" + UUID.randomUUID());
            staleClaim(database, key);

            StaleClaimSweeper.Sweep sweep = context.getBean(StaleClaimSweepScheduler.class).sweepOnce();

            assertThat(sweep.completed()).isEqualTo(1);
            assertThat(status(database, key)).isEqualTo("SUCCEEDED 503");
        });
    }

    private static ApplicationContextRunner runner(TestPostgres.Database database) {
        return TestDatabases.nonWebRunner(database)
                .withUserConfiguration(UnavailableResolver.class)
                .withPropertyValues("idempotency.sweeper.interval=1h");
    }

    @Configuration(proxyBeanMethods = false)
    static class UnavailableResolver {
        /** Passes on what the third party answered: "try again later". */
        @Bean
        StaleClaimResolver chargeResolver() {
            return claim -> StaleClaimResolver.Resolution.complete(new StoredResponse(503, List.of(),
                    "{\"gateway\":\"unavailable\"}".getBytes(StandardCharsets.UTF_8)));
        }
    }

    @Configuration(proxyBeanMethods = false)
    static class KeepEverything {
        @Bean
        StoragePolicy keepEverything() {
            return status -> true;
        }
    }

    /** A committed intent-first claim whose holder died: its lease has run out. */
    private static void staleClaim(TestPostgres.Database database, ScopedKey key) {
        database.queryString("insert into idempotency_keys (caller, scope, idempotency_key, status, request_hash,"
                + " fencing_token, expires_at, locked_until) values ('" + key.caller() + "', '" + key.scope() + "', '"
                + key.key() + "', 'PROCESSING', '" + "a".repeat(64) + "', gen_random_uuid(), now() + interval '1 day',"
                + " now() - interval '1 second')");
    }

    private static String status(TestPostgres.Database database, ScopedKey key) {
        return database.queryString("select status || coalesce(' ' || response_status, '') from idempotency_keys"
                + " where scope = '" + key.scope() + "' and idempotency_key = '" + key.key() + "'");
    }
}
