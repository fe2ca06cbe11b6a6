package io.idempotency.jdbc;

import com.zaxxer.hikari.HikariDataSource;
import io.idempotency.core.DownstreamKeys;
import io.idempotency.core.IdempotencyEngine;
import io.idempotency.core.IdempotencyMode;
import io.idempotency.core.IdempotencyTemplate;
import io.idempotency.core.RecordStatus;
import io.idempotency.core.ReplayCache;
import io.idempotency.core.ScopedKey;
import io.idempotency.core.StaleClaimResolver;
import io.idempotency.core.StoredResponse;
import io.idempotency.core.StoragePolicy;
import io.idempotency.jdbc.flyway.IdempotencySchemaMigrator;
import io.idempotency.testkit.TestPostgres;
import io.idempotency.core.CommitFailedException;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;
import org.junit.jupiter.params.provider.ValueSource;
import org.springframework.jdbc.core.JdbcTemplate;
import org.springframework.jdbc.datasource.DataSourceTransactionManager;
import org.springframework.transaction.TransactionDefinition;
import org.springframework.transaction.TransactionTimedOutException;
import org.springframework.transaction.support.AbstractPlatformTransactionManager;
import org.springframework.transaction.support.TransactionSynchronization;
import org.springframework.transaction.support.TransactionSynchronizationManager;
import org.springframework.transaction.support.TransactionTemplate;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.UUID;
import java.util.concurrent.Callable;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/** {@link SpringTransactions} on transaction managers set up in ways the thread's transaction flags do not show. */
class SpringTransactionsIntegrationTest {

    /**
     * A transaction manager that keeps no synchronization ({@code SYNCHRONIZATION_NEVER}) binds its connection to the
     * thread without marking a transaction active there. Work started inside such a transaction must still be refused:
     * joined, its claim and writes would commit (or roll back) with the caller's, while the execution reported them
     * committed and kept its result in memory, so that a redelivery after the caller rolled back would be answered
     * from memory and the work would never run. Also when the executions run on another transaction manager of the
     * DataSource, one that keeps synchronization: the thread is left as the caller's transaction had it.
     */
    @ParameterizedTest(name = "executions on the caller''s transaction manager: {0}")
    @ValueSource(booleans = {true, false})
    void workInsideATransactionOfAManagerWithoutSynchronizationIsRefusedBeforeAnythingIsClaimed(boolean same)
            throws Exception {
        try (HikariDataSource dataSource = databaseWithEffects("bigserial")) {
            JdbcTemplate jdbc = new JdbcTemplate(dataSource);
            DataSourceTransactionManager transactionManager = new DataSourceTransactionManager(dataSource);
            transactionManager.setTransactionSynchronization(AbstractPlatformTransactionManager.SYNCHRONIZATION_NEVER);
            IdempotencyEngine engine = new IdempotencyEngine(
                    new PostgresIdempotencyStore(dataSource, "idempotency_keys"),
                    new SpringTransactions(same ? transactionManager : new DataSourceTransactionManager(dataSource),
                            true), StoragePolicy.DEFAULT, Duration.ofDays(1),
                    Duration.ofMillis(300), StaleClaimResolver.RERUN, new DownstreamKeys("secret"),
                    new ReplayCache(100, 64 * 1024, 1024 * 1024, Duration.ofMinutes(10), 1000));
            IdempotencyTemplate template = new IdempotencyTemplate(engine);
            ScopedKey key = new ScopedKey("", "listener", UUID.randomUUID().toString());
            byte[] message = "m-1".getBytes(StandardCharsets.UTF_8);
            IdempotencyTemplate.Result[] inside = new IdempotencyTemplate.Result[1];

            // a @Transactional listener on that transaction manager: it fails after the template's call
            assertThatThrownBy(() -> new TransactionTemplate(transactionManager).executeWithoutResult(status -> {
                try {
                    inside[0] = template.execute(key, message, addingAnEffect(jdbc));
                } catch (Exception e) {
                    assertThat(TransactionSynchronizationManager.isSynchronizationActive())
                            .as("no synchronization left on the caller's thread").isFalse();
                    throw new IllegalStateException(e);
                }
                throw new IllegalStateException("the listener fails after the call");
            })).hasMessage("io.idempotency.core.Transactions$AlreadyActiveException: an idempotent execution must own"
                    + " its transaction, but"
                    + " one is already active on this thread: call IdempotencyTemplate.execute outside any transaction"
                    + " (not from a @Transactional method), and order @Idempotent outside @Transactional");
            assertThat(inside[0]).as("the call inside the caller's transaction returned no result").isNull();

            // the redelivery, with no transaction open: nothing of the first call was kept, so the work runs
            IdempotencyTemplate.Result redelivery = template.execute(key, message, addingAnEffect(jdbc));
            assertThat(redelivery.replayed()).as("the redelivery runs the work").isFalse();
            assertThat(jdbc.queryForObject("select count(*) from effects", Integer.class)).isEqualTo(1);
            engine.shutdown();
        }
    }

    /**
     * A callback before the commit calls a {@code @Transactional} service (here: a template on the same transaction
     * manager, which joins the request's transaction) that writes and then fails; the callback catches the failure.
     * The service's failure marked the transaction rollback-only, which Spring reads only after the callbacks, and a
     * JDBC transaction manager then asks the database to commit all the same, reporting a rollback. Nothing may be
     * kept, the answer not reported stored, and the redelivery must run the work.
     */
    @Test
    void aTransactionACallbackBeforeTheCommitMarkedRollbackOnlyKeepsNothing() throws Exception {
        aCallbackBeforeTheCommitFailsItAndKeepsNothing((jdbc, transactionManager) -> {
            try {
                new TransactionTemplate(transactionManager).executeWithoutResult(status -> {
                    jdbc.update("insert into effects values (2)"); // the outbox row
                    throw new IllegalStateException("the broker refused the event");
                });
            } catch (IllegalStateException ignored) {
                // "published later": swallowed, the transaction marked rollback-only all the same
            }
        });
    }

    /**
     * A callback that runs before the commit (a {@code @TransactionalEventListener(phase = BEFORE_COMMIT)} writing to
     * an outbox) whose statement fails, and which swallows the failure, leaves PostgreSQL's transaction aborted: its
     * commit then rolls everything back without an error. The answer must not be reported stored — sent with a 2xx,
     * kept in memory and replayed — for work of which nothing was kept: the stored answer is written last, after such
     * callbacks, where it fails on the aborted transaction and the execution ends as a failed commit.
     */
    @Test
    void aCommitThatABeforeCommitCallbackLeftToRollBackIsAFailedCommit() throws Exception {
        aCallbackBeforeTheCommitFailsItAndKeepsNothing((jdbc, transactionManager) -> {
            try {
                jdbc.update("insert into effects values (1)"); // the outbox row was there already
            } catch (org.springframework.dao.DuplicateKeyException ignored) {
                // "already published": swallowed, the transaction aborted all the same
            }
        });
    }

    /** What a callback before the commit does, on the request's JDBC and transaction manager. */
    private interface BeforeCommit {
        void run(JdbcTemplate jdbc, DataSourceTransactionManager transactionManager);
    }

    /**
     * Runs a work that writes an effect and registers {@code beforeCommit} to run before the commit, which must then
     * fail (a failed commit whose outcome is known) and keep nothing; the redelivery runs the work again.
     */
    private void aCallbackBeforeTheCommitFailsItAndKeepsNothing(BeforeCommit beforeCommit) throws Exception {
        try (HikariDataSource dataSource = databaseWithEffects("bigint")) {
            JdbcTemplate jdbc = new JdbcTemplate(dataSource);
            DataSourceTransactionManager transactionManager = new DataSourceTransactionManager(dataSource);
            IdempotencyEngine engine = new IdempotencyEngine(
                    new PostgresIdempotencyStore(dataSource, "idempotency_keys"),
                    new SpringTransactions(transactionManager, true), StoragePolicy.DEFAULT,
                    Duration.ofDays(1), Duration.ofMillis(300), StaleClaimResolver.RERUN, new DownstreamKeys("secret"),
                    new ReplayCache(100, 64 * 1024, 1024 * 1024, Duration.ofMinutes(10), 1000));
            IdempotencyTemplate template = new IdempotencyTemplate(engine);
            ScopedKey key = new ScopedKey("", "listener", UUID.randomUUID().toString());
            byte[] message = "m-1".getBytes(StandardCharsets.UTF_8);

            assertThatThrownBy(() -> template.execute(key, message, () -> {
                jdbc.update("insert into effects values (1)");
                TransactionSynchronizationManager.registerSynchronization(new TransactionSynchronization() {
                    @Override
                    public void beforeCommit(boolean readOnly) {
                        beforeCommit.run(jdbc, transactionManager);
                    }
                });
                return "applied".getBytes(StandardCharsets.UTF_8);
            })).isInstanceOf(CommitFailedException.class)
                    .satisfies(e -> assertThat(((CommitFailedException) e).outcomeUnknown()).isFalse());
            assertThat(jdbc.queryForObject("select count(*) from effects", Integer.class)).isZero();
            assertThat(jdbc.queryForObject("select count(*) from idempotency_keys", Integer.class)).isZero();

            IdempotencyTemplate.Result redelivery = template.execute(key, message, () -> {
                jdbc.update("insert into effects values (1)");
                return "applied".getBytes(StandardCharsets.UTF_8);
            });
            assertThat(redelivery.replayed()).as("the redelivery runs the work, not a replay from memory").isFalse();
            assertThat(jdbc.queryForObject("select count(*) from effects", Integer.class)).isEqualTo(1);
            engine.shutdown();
        }
    }

    /**
     * An error while the answer is written (no memory left for a large one) fails the execution, and its transaction
     * must still end. On a transaction manager that keeps no synchronization nothing else rolls it back: left open, it
     * stays bound to the thread with its connection, and every later execution on that thread is refused as if called
     * inside a transaction of the caller's.
     */
    @Test
    void anErrorWritingTheAnswerLeavesNoTransactionOnTheThread() throws Exception {
        try (HikariDataSource dataSource = databaseWithEffects("bigserial")) {
            JdbcTemplate jdbc = new JdbcTemplate(dataSource);
            DataSourceTransactionManager transactionManager = new DataSourceTransactionManager(dataSource);
            transactionManager.setTransactionSynchronization(AbstractPlatformTransactionManager.SYNCHRONIZATION_NEVER);
            OutOfMemoryError failure = new OutOfMemoryError("Java heap space");
            boolean[] failed = new boolean[1];
            PostgresIdempotencyStore store = new PostgresIdempotencyStore(dataSource, "idempotency_keys") {
                @Override
                public boolean complete(ScopedKey key, String fencingToken, StoredResponse response) {
                    if (!failed[0]) {
                        failed[0] = true;
                        throw failure;
                    }
                    return super.complete(key, fencingToken, response);
                }
            };
            IdempotencyEngine engine = new IdempotencyEngine(store, new SpringTransactions(transactionManager, true),
                    StoragePolicy.DEFAULT, Duration.ofDays(1), Duration.ofMillis(300), StaleClaimResolver.RERUN,
                    new DownstreamKeys("secret"));
            IdempotencyTemplate template = new IdempotencyTemplate(engine);
            ScopedKey key = new ScopedKey("", "listener", UUID.randomUUID().toString());
            byte[] message = "m-1".getBytes(StandardCharsets.UTF_8);

            assertThatThrownBy(() -> template.execute(key, message, addingAnEffect(jdbc))).isSameAs(failure);
            assertThat(TransactionSynchronizationManager.getResourceMap())
                    .as("no connection left bound to the thread").isEmpty();
            assertThat(jdbc.queryForObject("select count(*) from effects", Integer.class)).isZero();
            assertThat(jdbc.queryForObject("select count(*) from idempotency_keys", Integer.class)).isZero();

            // the redelivery, on the same thread: nothing of the first attempt was kept, so the work runs
            IdempotencyTemplate.Result redelivery = template.execute(key, message, addingAnEffect(jdbc));
            assertThat(redelivery.replayed()).as("the redelivery runs the work").isFalse();
            assertThat(jdbc.queryForObject("select count(*) from effects", Integer.class)).isEqualTo(1);
            engine.shutdown();
        }
    }

    /**
     * A callback before the commit written in Kotlin (a {@code BEFORE_COMMIT} listener writing to an outbox) may throw
     * a checked exception undeclared. Spring's transaction manager rolls back on neither that nor anything else then:
     * it only ends the transaction, and restoring the connection's auto-commit commits it — the claim and the work's
     * writes, without the answer. Such a record, PROCESSING with no lease, would answer every redelivery "in progress"
     * for ever (no sweep resolves it, no cleanup removes it), for work that was done: its answer is recorded, and the
     * redelivery replays it.
     */
    @Test
    void workCommittedWithoutItsAnswerByACallbacksUndeclaredCheckedExceptionIsReplayed() throws Exception {
        try (HikariDataSource dataSource = databaseWithEffects("bigserial")) {
            JdbcTemplate jdbc = new JdbcTemplate(dataSource);
            IdempotencyEngine engine = new IdempotencyEngine(
                    new PostgresIdempotencyStore(dataSource, "idempotency_keys"),
                    new SpringTransactions(new DataSourceTransactionManager(dataSource), true), StoragePolicy.DEFAULT,
                    Duration.ofDays(1), Duration.ofMillis(300));
            IdempotencyTemplate template = new IdempotencyTemplate(engine);
            ScopedKey key = new ScopedKey("", "listener", UUID.randomUUID().toString());
            byte[] message = "m-1".getBytes(StandardCharsets.UTF_8);
            java.io.IOException failure = new java.io.IOException("the outbox is not reachable");

            assertThatThrownBy(() -> template.execute(key, message, () -> {
                jdbc.update("insert into effects default values");
                TransactionSynchronizationManager.registerSynchronization(new TransactionSynchronization() {
                    @Override
                    public void beforeCommit(boolean readOnly) {
                        SpringTransactionsIntegrationTest.<RuntimeException>sneakyThrow(failure);
                    }
                });
                return "applied".getBytes(StandardCharsets.UTF_8);
            })).isSameAs(failure);

            IdempotencyTemplate.Result redelivery = template.execute(key, message, () -> {
                jdbc.update("insert into effects default values");
                return "applied again".getBytes(StandardCharsets.UTF_8);
            });
            assertThat(jdbc.queryForObject("select count(*) from effects", Integer.class))
                    .as("the work's effect, once").isEqualTo(1);
            assertThat(redelivery.replayed()).as("the redelivery is answered with the work's result").isTrue();
            assertThat(new String(redelivery.value(), StandardCharsets.UTF_8)).isEqualTo("applied");
            engine.shutdown();
        }
    }

    /**
     * Work that outlives its transaction's timeout ({@code spring.transaction.default-timeout}) without a statement
     * after it: the next statement of the transaction is refused with {@code TransactionTimedOutException} before it
     * runs — the stored answer's, or that of a callback before the commit (an outbox's {@code BEFORE_COMMIT} listener).
     * That is a {@code TransactionException}, which Spring's commit takes for a failure of the commit itself and does
     * not roll back: restoring the connection's auto-commit would commit the claim and the work's writes without the
     * answer, while the execution reports a failed commit of which nothing was kept. Nothing of the run may be kept:
     * in the default mode the redelivery runs the work, where a claim committed without its answer, with no lease,
     * would answer it "in progress" until the record expires, and then run the work a second time; in intent-first
     * mode the claim stays PROCESSING for the resolver, whose rerun would otherwise make the work's writes twice.
     */
    @ParameterizedTest(name = "{0}, the deadline met by the write of the {1}")
    @CsvSource({"ONE_TRANSACTION, answer", "ONE_TRANSACTION, callback", "INTENT_FIRST, answer",
            "INTENT_FIRST, callback"})
    void workOutlivingItsTransactionsTimeoutKeepsNothingOfItsRun(IdempotencyMode mode, String lastWrite)
            throws Exception {
        try (HikariDataSource dataSource = databaseWithEffects("bigserial")) {
            JdbcTemplate jdbc = new JdbcTemplate(dataSource);
            jdbc.execute("create table outbox (id bigserial primary key)");
            DataSourceTransactionManager transactionManager = new DataSourceTransactionManager(dataSource);
            transactionManager.setDefaultTimeout(2); // the claim and the work's write meet it on a loaded machine too
            PostgresIdempotencyStore store = new PostgresIdempotencyStore(dataSource, "idempotency_keys");
            IdempotencyEngine engine = new IdempotencyEngine(store, new SpringTransactions(transactionManager, true),
                    StoragePolicy.DEFAULT, Duration.ofDays(1), Duration.ofMillis(300), StaleClaimResolver.RERUN,
                    new DownstreamKeys("secret"));
            IdempotencyTemplate template = new IdempotencyTemplate(engine);
            ScopedKey key = new ScopedKey("", "listener", UUID.randomUUID().toString());
            byte[] message = "m-1".getBytes(StandardCharsets.UTF_8);

            assertThatThrownBy(() -> template.execute(key, message, mode, Duration.ofMinutes(5), () -> {
                jdbc.update("insert into effects default values");
                if (lastWrite.equals("callback")) {
                    TransactionSynchronizationManager.registerSynchronization(new TransactionSynchronization() {
                        @Override
                        public void beforeCommit(boolean readOnly) {
                            jdbc.update("insert into outbox default values");
                        }
                    });
                }
                Thread.sleep(2200); // a third party answers slowly
                return "applied".getBytes(StandardCharsets.UTF_8);
            })).isInstanceOfSatisfying(CommitFailedException.class,
                    failed -> assertThat(failed.outcomeUnknown()).isFalse())
                    .hasRootCauseInstanceOf(TransactionTimedOutException.class);

            assertThat(jdbc.queryForObject("select count(*) from effects", Integer.class))
                    .as("the work's write was rolled back").isZero();
            if (mode == IdempotencyMode.INTENT_FIRST) {
                assertThat(store.find(key).orElseThrow().status()).as("left to the resolver")
                        .isEqualTo(RecordStatus.PROCESSING);
            } else {
                assertThat(store.find(key)).as("the claim was rolled back").isEmpty();
                transactionManager.setDefaultTimeout(TransactionDefinition.TIMEOUT_DEFAULT); // the redelivery is quick
                IdempotencyTemplate.Result redelivery = template.execute(key, message, addingAnEffect(jdbc));
                assertThat(redelivery.replayed()).as("the redelivery runs the work").isFalse();
                assertThat(jdbc.queryForObject("select count(*) from effects", Integer.class)).isEqualTo(1);
            }
            engine.shutdown();
        }
    }

    /**
     * A record may be read on a connection of its own only while the thread holds nothing the next transaction would
     * run on: not in a transaction, not in a transaction scope without one (propagation SUPPORTS), and not while a
     * resource bound to the thread holds a connection; a resource the predicate says holds none (an EntityManager
     * that has read nothing yet) does not stand in the way.
     */
    @Test
    void aRecordMayBeReadApartOnlyWhileTheThreadHoldsNothingTheTransactionWouldRunOn() throws Exception {
        try (HikariDataSource dataSource = databaseWithEffects("bigint")) {
            DataSourceTransactionManager transactionManager = new DataSourceTransactionManager(dataSource);
            Object idle = new Object();
            SpringTransactions transactions = new SpringTransactions(transactionManager, true,
                    resource -> resource == idle);

            assertThat(transactions.mayReadApart()).as("nothing bound").isTrue();
            new TransactionTemplate(transactionManager).executeWithoutResult(status ->
                    assertThat(transactions.mayReadApart()).as("in a transaction").isFalse());
            TransactionTemplate supports = new TransactionTemplate(transactionManager);
            supports.setPropagationBehavior(TransactionDefinition.PROPAGATION_SUPPORTS);
            supports.executeWithoutResult(status ->
                    assertThat(transactions.mayReadApart()).as("in a scope without a transaction").isFalse());

            TransactionSynchronizationManager.bindResource("idle", idle);
            try {
                assertThat(transactions.mayReadApart()).as("a resource that holds no connection").isTrue();
                TransactionSynchronizationManager.bindResource("busy", new Object());
                try {
                    assertThat(transactions.mayReadApart()).as("a resource that holds a connection").isFalse();
                } finally {
                    TransactionSynchronizationManager.unbindResource("busy");
                }
            } finally {
                TransactionSynchronizationManager.unbindResource("idle");
            }
        }
    }

    /**
     * A {@code TransactionException} of the work run last before the commit (the stored answer's write refused after
     * the transaction's timeout) is thrown as it is, as the contract of {@code commit(Runnable)} says, and nothing of
     * the transaction is kept.
     */
    @Test
    void aTransactionExceptionOfTheLastWorkIsThrownAsItIsAndNothingIsKept() throws Exception {
        try (HikariDataSource dataSource = databaseWithEffects("bigserial")) {
            JdbcTemplate jdbc = new JdbcTemplate(dataSource);
            SpringTransactions transactions = new SpringTransactions(new DataSourceTransactionManager(dataSource),
                    true);
            TransactionTimedOutException failure = new TransactionTimedOutException("the deadline has passed");

            io.idempotency.core.Transactions.Transaction transaction = transactions.begin();
            jdbc.update("insert into effects default values");
            assertThatThrownBy(() -> transaction.commit(() -> {
                throw failure;
            })).isSameAs(failure);
            transaction.rollback();

            assertThat(TransactionSynchronizationManager.getResourceMap()).as("nothing left bound").isEmpty();
            assertThat(jdbc.queryForObject("select count(*) from effects", Integer.class)).isZero();
        }
    }

    /**
     * A callback the application registered for after the commit that fails does not make the commit a failed one:
     * the database committed, and the transaction's writes are kept. Also when what it throws is an error (a class
     * its code needs that cannot be loaded, Kotlin's {@code TODO()}).
     */
    @ParameterizedTest
    @ValueSource(booleans = {false, true})
    void aCallbackFailingAfterTheCommitLeavesTheCommitSucceeded(boolean error) throws Exception {
        try (HikariDataSource dataSource = databaseWithEffects("bigserial")) {
            JdbcTemplate jdbc = new JdbcTemplate(dataSource);
            SpringTransactions transactions = new SpringTransactions(new DataSourceTransactionManager(dataSource),
                    true);

            io.idempotency.core.Transactions.Transaction transaction = transactions.begin();
            jdbc.update("insert into effects default values");
            TransactionSynchronizationManager.registerSynchronization(new TransactionSynchronization() {
                @Override
                public void afterCommit() {
                    if (error) {
                        throw new NoClassDefFoundError("com/example/broker/Client");
                    }
                    throw new IllegalStateException("the message broker is not reachable");
                }
            });
            transaction.commit(() -> jdbc.update("insert into effects default values"));

            assertThat(TransactionSynchronizationManager.getResourceMap()).as("nothing left bound").isEmpty();
            assertThat(jdbc.queryForObject("select count(*) from effects", Integer.class)).isEqualTo(2);
        }
    }

    /**
     * On a transaction manager that keeps no synchronization, no callback runs before the commit: the work run last
     * runs first, and the transaction is then committed, its connection no longer bound to the thread.
     */
    @Test
    void onAManagerWithoutSynchronizationTheLastWorkRunsAndTheTransactionCommits() throws Exception {
        try (HikariDataSource dataSource = databaseWithEffects("bigserial")) {
            JdbcTemplate jdbc = new JdbcTemplate(dataSource);
            DataSourceTransactionManager transactionManager = new DataSourceTransactionManager(dataSource);
            transactionManager.setTransactionSynchronization(AbstractPlatformTransactionManager.SYNCHRONIZATION_NEVER);
            SpringTransactions transactions = new SpringTransactions(transactionManager, true);

            io.idempotency.core.Transactions.Transaction transaction = transactions.begin();
            jdbc.update("insert into effects default values");
            transaction.commit(() -> jdbc.update("insert into effects default values"));

            assertThat(TransactionSynchronizationManager.getResourceMap()).as("nothing left bound").isEmpty();
            try (java.sql.Connection other = dataSource.getConnection();
                 java.sql.ResultSet rs = other.createStatement().executeQuery("select count(*) from effects")) {
                rs.next();
                assertThat(rs.getInt(1)).as("committed, as seen from another connection").isEqualTo(2);
            }
        }
    }

    /**
     * A transaction that a {@code @Transactional} method joining it marked rollback-only (it threw) says so until it
     * ends, and is not flushed meanwhile; a transaction nobody marked, or one that has ended, does not.
     */
    @Test
    void aTransactionMarkedRollbackOnlySaysSoUntilItEnds() throws Exception {
        try (HikariDataSource dataSource = databaseWithEffects("bigserial")) {
            DataSourceTransactionManager transactionManager = new DataSourceTransactionManager(dataSource);
            SpringTransactions transactions = new SpringTransactions(transactionManager, true);

            io.idempotency.core.Transactions.Transaction transaction = transactions.begin();
            assertThat(transaction.isRollbackOnly()).as("nobody marked it").isFalse();
            new TransactionTemplate(transactionManager).executeWithoutResult(joined -> joined.setRollbackOnly());
            assertThat(transaction.isRollbackOnly()).as("marked by a method that joined it").isTrue();
            transaction.flush();
            transaction.rollback();
            assertThat(transaction.isRollbackOnly()).as("ended").isFalse();
        }
    }

    /**
     * On connections that do not default to READ COMMITTED, the statement given for it runs first in each transaction
     * on the transaction's connection, which then runs at READ COMMITTED while the connection keeps its own default. A
     * statement that fails leaves no transaction bound to the thread.
     */
    @Test
    void theReadCommittedStatementRunsFirstInEachTransactionAndItsFailureLeavesNothingBound() throws Exception {
        try (HikariDataSource dataSource = TestPostgres.newDatabase().dataSource(1,
                     config -> config.setTransactionIsolation("TRANSACTION_REPEATABLE_READ"))) {
            JdbcTemplate jdbc = new JdbcTemplate(dataSource);
            DataSourceTransactionManager transactionManager = new DataSourceTransactionManager(dataSource);
            SpringTransactions transactions = new SpringTransactions(transactionManager, false, resource -> false,
                    PostgresIdempotencyStore.READ_COMMITTED);

            io.idempotency.core.Transactions.Transaction transaction = transactions.begin();
            assertThat(jdbc.queryForObject("select current_setting('transaction_isolation')", String.class))
                    .isEqualTo("read committed");
            transaction.rollback();
            assertThat(jdbc.queryForObject("select current_setting('default_transaction_isolation')",
                    String.class)).as("the connection's default, unchanged").isEqualTo("repeatable read");

            SpringTransactions refused = new SpringTransactions(transactionManager, false, resource -> false,
                    "SET TRANSACTION ISOLATION LEVEL NO SUCH LEVEL");
            assertThatThrownBy(refused::begin).isInstanceOf(org.springframework.dao.DataAccessException.class);
            assertThat(TransactionSynchronizationManager.isActualTransactionActive()).isFalse();
            assertThat(TransactionSynchronizationManager.getResourceMap()).as("nothing left bound").isEmpty();
            transactions.begin().rollback(); // the pool's one connection was given back
        }
    }

    /**
     * A database of its own with the idempotency table and a table {@code effects}, whose {@code id} is of
     * {@code idType}.
     */
    private static HikariDataSource databaseWithEffects(String idType) {
        HikariDataSource dataSource = TestPostgres.newDatabase().dataSource(4);
        new IdempotencySchemaMigrator(dataSource, "idempotency_keys").migrate();
        new JdbcTemplate(dataSource).execute("create table effects (id " + idType + " primary key)");
        return dataSource;
    }

    /** Work that inserts one row into {@code effects} and results in {@code applied}. */
    private static Callable<byte[]> addingAnEffect(JdbcTemplate jdbc) {
        return () -> {
            jdbc.update("insert into effects default values");
            return "applied".getBytes(StandardCharsets.UTF_8);
        };
    }

    @SuppressWarnings("unchecked")
    private static <E extends Throwable> void sneakyThrow(Throwable failure) throws E {
        throw (E) failure;
    }
}
