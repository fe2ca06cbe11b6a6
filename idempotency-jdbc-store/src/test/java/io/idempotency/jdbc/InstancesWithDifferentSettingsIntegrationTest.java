package io.idempotency.jdbc;

import com.zaxxer.hikari.HikariDataSource;
import io.idempotency.core.DownstreamKeys;
import io.idempotency.core.IdempotencyEngine;
import io.idempotency.core.IdempotencyMode;
import io.idempotency.core.IdempotencyRecord;
import io.idempotency.core.RecordStatus;
import io.idempotency.core.ScopedKey;
import io.idempotency.core.StaleClaimResolver;
import io.idempotency.core.StaleClaimSweeper;
import io.idempotency.core.StoragePolicy;
import io.idempotency.core.StoredResponse;
import io.idempotency.jdbc.flyway.IdempotencySchemaMigrator;
import io.idempotency.testkit.TestPostgres;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.springframework.dao.DataAccessException;
import org.springframework.dao.DataRetrievalFailureException;
import org.springframework.jdbc.core.JdbcTemplate;
import org.springframework.jdbc.datasource.DataSourceTransactionManager;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.UUID;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicInteger;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/**
 * Instances that share one table while their settings differ, as during a rolling deploy or a configuration change:
 * the record decides what its claimer set (expiry, lease), a default-mode instance never takes over another one's
 * intent-first claim, and a resolver of an instance with a new downstream key secret finds work done under the
 * previous one only by asking for its key too.
 */
@Tag("engine")
class InstancesWithDifferentSettingsIntegrationTest {

    private static final String HASH = "9".repeat(64);
    private static final Duration SHORT_LEASE = Duration.ofMillis(200);
    private static final StoredResponse CHARGED = new StoredResponse(201, List.of(),
            "charged".getBytes(StandardCharsets.UTF_8));

    /**
     * An endpoint moved from intent-first to the default mode: an instance of the new release meets the stale claim an
     * instance of the old one left. It never takes the claim over (it has no resolver to ask, and no lease of its own):
     * 409 until a sweeper resolved it, then the resolver's answer replayed, or, after a rerun, the request run again.
     */
    @Test
    void aDefaultModeInstanceLeavesAnotherInstancesStaleIntentClaimToTheSweeper() throws Exception {
        try (HikariDataSource dataSource = database()) {
            PostgresIdempotencyStore store = new PostgresIdempotencyStore(dataSource, "idempotency_keys");
            ScopedKey completed = key();
            ScopedKey rerun = key();
            IdempotencyEngine intentFirst = engine(dataSource, store, Duration.ofDays(1), "secret",
                    StaleClaimResolver.RERUN);
            for (ScopedKey key : List.of(completed, rerun)) {
                ((IdempotencyEngine.Proceed) intentFirst.start(key, HASH, IdempotencyMode.INTENT_FIRST, SHORT_LEASE))
                        .execution().abandon(); // outcome unknown, then the instance is gone
            }
            intentFirst.shutdown();
            Thread.sleep(SHORT_LEASE.toMillis() + 300);

            IdempotencyEngine defaultMode = engine(dataSource, store, Duration.ofDays(1), "secret",
                    StaleClaimResolver.RERUN);
            for (ScopedKey key : List.of(completed, rerun)) {
                String token = store.find(key).orElseThrow().fencingToken();
                assertThat(defaultMode.start(key, HASH)).as("a retry in the default mode past the lease")
                        .isInstanceOf(IdempotencyEngine.InProgress.class);
                IdempotencyRecord record = store.find(key).orElseThrow();
                assertThat(record.status()).isEqualTo(RecordStatus.PROCESSING);
                assertThat(record.fencingToken()).as("not taken over").isEqualTo(token);
            }

            StaleClaimResolver gateway = claim -> claim.key().equals(completed)
                    ? StaleClaimResolver.Resolution.complete(CHARGED) : StaleClaimResolver.Resolution.rerun();
            assertThat(new StaleClaimSweeper(store, gateway, new DownstreamKeys("secret"), Duration.ofSeconds(30), 100)
                    .sweep().resolved()).isEqualTo(2);

            IdempotencyEngine.Start replayed = defaultMode.start(completed, HASH);
            assertThat(replayed).isInstanceOf(IdempotencyEngine.Replay.class);
            assertThat(((IdempotencyEngine.Replay) replayed).response()).isEqualTo(CHARGED);
            IdempotencyEngine.Start again = defaultMode.start(rerun, HASH);
            assertThat(again).as("the request of a claim the sweeper marked FAILED")
                    .isInstanceOf(IdempotencyEngine.Proceed.class);
            ((IdempotencyEngine.Proceed) again).execution().finish(CHARGED);
            assertThat(store.find(rerun).orElseThrow().status()).isEqualTo(RecordStatus.SUCCEEDED);
            defaultMode.shutdown();
        }
    }

    /**
     * An endpoint in the default mode on one instance and intent-first on another: each replays what the other
     * completed, and a definite failure recorded intent-first is run again by its own request in the default mode.
     */
    @Test
    void answersCompletedInOneModeAreReplayedInTheOther() throws Exception {
        try (HikariDataSource dataSource = database()) {
            PostgresIdempotencyStore store = new PostgresIdempotencyStore(dataSource, "idempotency_keys");
            IdempotencyEngine intentFirst = engine(dataSource, store, Duration.ofDays(1), "secret",
                    StaleClaimResolver.RERUN);
            IdempotencyEngine defaultMode = engine(dataSource, store, Duration.ofDays(1), "secret",
                    StaleClaimResolver.RERUN);
            ScopedKey byIntent = key();
            ScopedKey byDefault = key();
            ScopedKey failed = key();
            ((IdempotencyEngine.Proceed) intentFirst.start(byIntent, HASH, IdempotencyMode.INTENT_FIRST,
                    Duration.ofMinutes(5))).execution().finish(CHARGED);
            ((IdempotencyEngine.Proceed) defaultMode.start(byDefault, HASH)).execution().finish(CHARGED);
            ((IdempotencyEngine.Proceed) intentFirst.start(failed, HASH, IdempotencyMode.INTENT_FIRST,
                    Duration.ofMinutes(5))).execution().abandonDefinitely();

            assertThat(defaultMode.start(byIntent, HASH)).isInstanceOf(IdempotencyEngine.Replay.class);
            assertThat(intentFirst.start(byDefault, HASH, IdempotencyMode.INTENT_FIRST, Duration.ofMinutes(5)))
                    .isInstanceOf(IdempotencyEngine.Replay.class);
            assertThat(defaultMode.start(failed, "8".repeat(64))).as("another request under the FAILED record's key")
                    .isInstanceOf(IdempotencyEngine.Mismatch.class);
            IdempotencyEngine.Start again = defaultMode.start(failed, HASH);
            assertThat(again).isInstanceOf(IdempotencyEngine.Proceed.class);
            ((IdempotencyEngine.Proceed) again).execution().finish(CHARGED);
            assertThat(intentFirst.start(failed, HASH, IdempotencyMode.INTENT_FIRST, Duration.ofMinutes(5)))
                    .isInstanceOf(IdempotencyEngine.Replay.class);
            intentFirst.shutdown();
            defaultMode.shutdown();
        }
    }

    /**
     * Two instances with other leases and TTLs: whether a claim is stale is told by the lease its holder took, not by
     * the retrying instance's, and each record keeps the expiry of the instance that claimed it.
     */
    @Test
    void theLeaseAndTheExpiryAreTheClaimingInstancesWhateverTheOthersSay() throws Exception {
        try (HikariDataSource dataSource = database()) {
            PostgresIdempotencyStore store = new PostgresIdempotencyStore(dataSource, "idempotency_keys");
            IdempotencyEngine longer = engine(dataSource, store, Duration.ofDays(30), "secret",
                    StaleClaimResolver.RERUN);
            IdempotencyEngine shorter = engine(dataSource, store, Duration.ofDays(2), "secret",
                    StaleClaimResolver.RERUN);

            ScopedKey heldLong = key();
            ((IdempotencyEngine.Proceed) longer.start(heldLong, HASH, IdempotencyMode.INTENT_FIRST,
                    Duration.ofMinutes(10))).execution().abandon();
            Thread.sleep(SHORT_LEASE.toMillis() + 300);
            assertThat(shorter.start(heldLong, HASH, IdempotencyMode.INTENT_FIRST, SHORT_LEASE))
                    .as("a retry with a lease shorter than the time the claim is held")
                    .isInstanceOf(IdempotencyEngine.InProgress.class);
            assertThat(store.find(heldLong).orElseThrow().status()).isEqualTo(RecordStatus.PROCESSING);

            ScopedKey heldShort = key();
            ((IdempotencyEngine.Proceed) shorter.start(heldShort, HASH, IdempotencyMode.INTENT_FIRST, SHORT_LEASE))
                    .execution().abandon();
            Thread.sleep(SHORT_LEASE.toMillis() + 300);
            IdempotencyEngine.Start takenOver = longer.start(heldShort, HASH, IdempotencyMode.INTENT_FIRST,
                    Duration.ofMinutes(10));
            assertThat(takenOver).as("a retry with a longer lease, once the holder's ran out")
                    .isInstanceOf(IdempotencyEngine.Proceed.class);
            ((IdempotencyEngine.Proceed) takenOver).execution().finish(CHARGED);

            ScopedKey byLonger = key();
            ScopedKey byShorter = key();
            ((IdempotencyEngine.Proceed) longer.start(byLonger, HASH)).execution().finish(CHARGED);
            ((IdempotencyEngine.Proceed) shorter.start(byShorter, HASH)).execution().finish(CHARGED);
            JdbcTemplate jdbc = new JdbcTemplate(dataSource);
            assertThat(days(jdbc, byLonger)).isEqualTo(30);
            assertThat(days(jdbc, byShorter)).isEqualTo(2);
            assertThat(shorter.start(byLonger, HASH)).isInstanceOf(IdempotencyEngine.Replay.class);
            assertThat(longer.start(byShorter, HASH)).isInstanceOf(IdempotencyEngine.Replay.class);
            longer.shutdown();
            shorter.shutdown();
        }
    }

    /**
     * The downstream key secret changed while a claim made under the old one went stale. The instance with the new
     * secret derives another downstream key for the claim: a resolver that asks the third party by that key alone
     * finds nothing and reruns, and the work is done a second time under the new key. One that asks by the previous
     * secret's key too, as the documentation shows, finds the work and completes the claim with it.
     */
    @Test
    void aResolverWithTheNewSecretFindsWorkDoneUnderThePreviousOneOnlyByAskingForItsKeyToo() throws Exception {
        try (HikariDataSource dataSource = database()) {
            PostgresIdempotencyStore store = new PostgresIdempotencyStore(dataSource, "idempotency_keys");
            Map<String, String> charges = new ConcurrentHashMap<>(); // the third party, by downstream key
            ScopedKey askedByTheNewKey = key();
            ScopedKey askedByBoth = key();
            IdempotencyEngine before = engine(dataSource, store, Duration.ofDays(1), "previous-secret",
                    StaleClaimResolver.RERUN);
            for (ScopedKey key : List.of(askedByTheNewKey, askedByBoth)) {
                IdempotencyEngine.Execution execution = ((IdempotencyEngine.Proceed) before.start(key, HASH,
                        IdempotencyMode.INTENT_FIRST, SHORT_LEASE)).execution();
                charges.put(execution.context().downstreamKey(), "charge of " + key.key());
                execution.abandon(); // the call went through; the instance stopped before its answer was recorded
            }
            before.shutdown();
            Thread.sleep(SHORT_LEASE.toMillis() + 300);

            DownstreamKeys previous = new DownstreamKeys("previous-secret");
            AtomicInteger reruns = new AtomicInteger();
            StaleClaimResolver resolver = claim -> {
                Optional<String> charged = Optional.ofNullable(charges.get(claim.downstreamKey()));
                if (claim.key().equals(askedByBoth)) {
                    charged = charged.or(() -> Optional.ofNullable(charges.get(previous.derive(claim.key()))));
                }
                if (charged.isPresent()) {
                    return StaleClaimResolver.Resolution.complete(CHARGED);
                }
                reruns.incrementAndGet();
                return StaleClaimResolver.Resolution.rerun();
            };
            IdempotencyEngine after = engine(dataSource, store, Duration.ofDays(1), "new-secret", resolver);

            IdempotencyEngine.Start naive = after.start(askedByTheNewKey, HASH, IdempotencyMode.INTENT_FIRST,
                    Duration.ofMinutes(5));
            assertThat(naive).as("asked by the new key alone").isInstanceOf(IdempotencyEngine.Proceed.class);
            IdempotencyEngine.Execution rerun = ((IdempotencyEngine.Proceed) naive).execution();
            charges.put(rerun.context().downstreamKey(), "second charge of " + askedByTheNewKey.key());
            rerun.finish(CHARGED);
            assertThat(charges.values().stream().filter(charge -> charge.contains(askedByTheNewKey.key())))
                    .as("the third party saw two calls under two keys").hasSize(2);

            IdempotencyEngine.Start found = after.start(askedByBoth, HASH, IdempotencyMode.INTENT_FIRST,
                    Duration.ofMinutes(5));
            assertThat(found).as("asked by the previous secret's key too").isInstanceOf(IdempotencyEngine.Replay.class);
            assertThat(charges.values().stream().filter(charge -> charge.contains(askedByBoth.key()))).hasSize(1);
            assertThat(reruns).hasValue(1);
            after.shutdown();
        }
    }

    /**
     * A later release that stores a status this one does not know (its migration widened the table's check first):
     * this release fails the read of that record as a failed read of the database, naming the status, and leaves the
     * record as it is; a request with the key is not run (the starter answers it 503), and other keys are claimed as
     * before.
     */
    @Test
    void aStatusOfALaterReleaseFailsTheReadNamingItAndLeavesTheRecord() {
        try (HikariDataSource dataSource = database()) {
            PostgresIdempotencyStore store = new PostgresIdempotencyStore(dataSource, "idempotency_keys");
            JdbcTemplate jdbc = new JdbcTemplate(dataSource);
            jdbc.execute("alter table idempotency_keys drop constraint idempotency_keys_status_check");
            jdbc.execute("alter table idempotency_keys add constraint idempotency_keys_status_check"
                    + " check (status in ('PROCESSING', 'SUCCEEDED', 'FAILED', 'CANCELLED'))");
            ScopedKey key = key();
            IdempotencyEngine later = engine(dataSource, store, Duration.ofDays(1), "secret", StaleClaimResolver.RERUN);
            ((IdempotencyEngine.Proceed) later.start(key, HASH)).execution().finish(CHARGED);
            later.shutdown();
            jdbc.update("update idempotency_keys set status = 'CANCELLED', response_status = null,"
                    + " response_headers = null, response_body = null where idempotency_key = ?", key.key());
            String stored = "select status || ' ' || fencing_token from idempotency_keys where idempotency_key = ?";
            String before = jdbc.queryForObject(stored, String.class, key.key());

            assertThatThrownBy(() -> store.find(key)).isInstanceOf(DataRetrievalFailureException.class)
                    .hasMessageContaining("The idempotency record of " + key.describe() + " in table idempotency_keys"
                            + " has status 'CANCELLED', which this release of the library does not know");
            IdempotencyEngine earlier = engine(dataSource, store, Duration.ofDays(1), "secret",
                    StaleClaimResolver.RERUN);
            assertThatThrownBy(() -> earlier.start(key, HASH)).as("a retry reaching this release")
                    .isInstanceOf(DataAccessException.class).hasMessageContaining("'CANCELLED'");
            assertThat(jdbc.queryForObject(stored, String.class, key.key())).as("left as it was").isEqualTo(before);

            IdempotencyEngine.Start another = earlier.start(key(), HASH);
            assertThat(another).as("another key").isInstanceOf(IdempotencyEngine.Proceed.class);
            ((IdempotencyEngine.Proceed) another).execution().finish(CHARGED);
            earlier.shutdown();
        }
    }

    private static long days(JdbcTemplate jdbc, ScopedKey key) {
        return jdbc.queryForObject("select round(extract(epoch from expires_at - created_at) / 86400)"
                + " from idempotency_keys where idempotency_key = ?", Long.class, key.key());
    }

    private static ScopedKey key() {
        return new ScopedKey("", "POST /charges", UUID.randomUUID().toString());
    }

    private static IdempotencyEngine engine(HikariDataSource dataSource, PostgresIdempotencyStore store,
                                            Duration retention, String secret, StaleClaimResolver resolver) {
        return new IdempotencyEngine(store, new SpringTransactions(new DataSourceTransactionManager(dataSource)),
                StoragePolicy.DEFAULT, retention, Duration.ofMillis(500), resolver, new DownstreamKeys(secret));
    }

    private static HikariDataSource database() {
        HikariDataSource dataSource = TestPostgres.newDatabase().dataSource(6);
        new IdempotencySchemaMigrator(dataSource, "idempotency_keys").migrate();
        return dataSource;
    }
}
