package io.idempotency.core;

import static org.assertj.core.api.Assertions.assertThat;

import org.junit.jupiter.api.Test;

import java.util.logging.Level;

class DownstreamKeysTest {

    private final DownstreamKeys keys = new DownstreamKeys("secret");

    @Test
    void theSameRequestAlwaysDerivesTheSameKey() {
        ScopedKey key = new ScopedKey("alice", "POST /charges", "k-1");

        assertThat(keys.derive(key)).isEqualTo(new DownstreamKeys("secret").derive(
                new ScopedKey("alice", "POST /charges", "k-1"))).hasSize(43);
    }

    @Test
    void theKeyIsTheDocumentedHmacAndStaysTheSameAcrossVersions() {
        // computed outside the library: HMAC-SHA256 with the secret's UTF-8 bytes over each of caller, scope and key as
        // its UTF-8 length (four bytes, big-endian) and its bytes, in unpadded base64url. A claim left PROCESSING by one
        // version is resolved or rerun by the next: a key derived otherwise would be a new call to the third party
        assertThat(keys.derive(new ScopedKey("alice", "POST /charges", "k-1")))
                .isEqualTo("-HEk6-c05DQhUgkzKNwc_OsRVvoSkMst_75K7qJo7K0");
        assertThat(keys.derive(new ScopedKey("", "POST /charges", "6f1c1f0e-3b4e-4a8e-9a57-1d2b7d1c9a01")))
                .isEqualTo("OdnoliJf4x1dClX7qv27GCZAfZ6qrkpUuwQNZjKEUuA");
        assertThat(keys.derive(new ScopedKey("zo\u00eb", "POST /charges", "k-\u20ac")))
                .isEqualTo("gL91wupLN07Bd1y8DhRRyjw-XPq_jgaDPjThSfbrTZ8")
                .matches("[A-Za-z0-9_-]{43}");
    }

    @Test
    void twoCallersUsingOneKeyDoNotCollideDownstream() {
        String alice = keys.derive(new ScopedKey("alice", "POST /charges", "k-1"));
        String bob = keys.derive(new ScopedKey("bob", "POST /charges", "k-1"));
        String anonymous = keys.derive(new ScopedKey("", "POST /charges", "k-1"));

        assertThat(alice).isNotEqualTo(bob).isNotEqualTo(anonymous);
        assertThat(bob).isNotEqualTo(anonymous);
    }

    @Test
    void twoScopesUsingOneKeyDoNotCollideDownstream() {
        assertThat(keys.derive(new ScopedKey("alice", "POST /charges", "k-1")))
                .isNotEqualTo(keys.derive(new ScopedKey("alice", "POST /refunds", "k-1")));
    }

    @Test
    void thePartsCannotBeShiftedIntoOneAnother() {
        assertThat(keys.derive(new ScopedKey("ab", "c", "k")))
                .isNotEqualTo(keys.derive(new ScopedKey("a", "bc", "k")));
        assertThat(keys.derive(new ScopedKey("a", "bc", "k")))
                .isNotEqualTo(keys.derive(new ScopedKey("a", "b", "ck")));
    }

    @Test
    void theKeyIsNeitherTheClientsKeyNorDerivableWithoutTheSecret() {
        ScopedKey key = new ScopedKey("alice", "POST /charges", "k-1");

        assertThat(keys.derive(key)).doesNotContain("k-1")
                .isNotEqualTo(new DownstreamKeys("another secret").derive(key));
    }

    @Test
    void theFirstKeyDerivedWithThePublicDefaultSecretIsWarnedOfOnce() {
        // whoever derives it (an IdempotencyTemplate call, a message consumer), not only the endpoints a startup
        // check can see
        try (CapturedLog log = CapturedLog.of(DownstreamKeys.class)) {
            new DownstreamKeys("secret").derive(new ScopedKey("", "charges", "k-1"));
            assertThat(log.records()).as("an application's own secret").isEmpty();

            DownstreamKeys defaults = new DownstreamKeys(IdempotencyEngine.DEFAULT_DOWNSTREAM_SECRET);
            defaults.derive(new ScopedKey("", "charges", "k-1"));
            defaults.derive(new ScopedKey("", "refunds", "k-2"));

            assertThat(log.records()).hasSize(1);
            assertThat(log.records().get(0).getLevel()).isEqualTo(Level.WARNING);
            assertThat(log.records().get(0).getMessage()).contains("public default secret", "'charges'",
                    "idempotency.downstream-key-secret").doesNotContain("k-1");
        }
    }

    /** A resolver that logs the claim it is given, or a record, shows neither the downstream key nor the fencing token. */
    @Test
    void theClaimAndTheRecordAResolverMayLogShowNeitherTheDownstreamKeyNorTheToken() {
        ScopedKey key = new ScopedKey("alice", "POST /charges", "k-1");
        String downstreamKey = new DownstreamKeys("secret").derive(key);
        StaleClaimResolver.StaleClaim claim = new StaleClaimResolver.StaleClaim(key, downstreamKey, "hash-1",
                java.time.Instant.EPOCH, java.time.Instant.EPOCH, true);
        IdempotencyRecord record = new IdempotencyRecord(key, RecordStatus.PROCESSING, "hash-1", "token-secret-1", null,
                java.time.Instant.EPOCH, java.time.Instant.EPOCH, java.time.Instant.EPOCH, true);

        assertThat(claim.toString()).doesNotContain(downstreamKey).contains("k-1", "hash-1", "retryWaiting=true");
        assertThat(record.toString()).doesNotContain("token-secret-1").contains("k-1", "PROCESSING", "hash-1");
    }
}
