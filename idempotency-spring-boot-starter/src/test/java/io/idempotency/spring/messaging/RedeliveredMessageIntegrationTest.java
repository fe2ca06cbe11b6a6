package io.idempotency.spring.messaging;

import com.rabbitmq.client.AMQP;
import com.rabbitmq.client.Channel;
import com.rabbitmq.client.Connection;
import com.rabbitmq.client.DefaultConsumer;
import com.rabbitmq.client.Envelope;
import io.idempotency.core.IdempotencyTemplate;
import io.idempotency.core.ScopedKey;
import io.idempotency.spring.TestDatabases;
import io.idempotency.testkit.TestPostgres;
import org.junit.jupiter.api.Test;
import org.springframework.boot.test.context.runner.ApplicationContextRunner;
import org.springframework.context.annotation.Bean;
import org.springframework.context.annotation.Configuration;
import org.springframework.jdbc.core.JdbcTemplate;

import javax.sql.DataSource;
import java.io.IOException;
import java.math.BigDecimal;
import java.nio.charset.StandardCharsets;
import java.util.List;
import java.util.UUID;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicReference;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.fail;

/**
 * The promise for code that is not an HTTP endpoint: a listener fed the same message three times performs its
 * effect once. The three deliveries are real redeliveries by a real AMQP broker (see {@link TestAmqpBroker}: the local
 * RabbitMQ, else an embedded Qpid Broker-J; never skipped), the listener runs in a non-web Spring Boot context whose
 * {@link IdempotencyTemplate} comes from the starter's auto-configuration, on real PostgreSQL.
 *
 * <p>The business table {@code ledger} deliberately has no unique constraint: only the idempotency layer stands
 * between a redelivery and a second row.
 */
class RedeliveredMessageIntegrationTest {

    private static final String BODY = "{\"payment\":\"p-1\",\"amount\":\"12.50\"}";
    private static final long DELIVERY_TIMEOUT_SECONDS = 10;

    /**
     * Delivery 1 is nacked with requeue (the listener container gave the message back), delivery 2 is never acked
     * and its channel is closed (the consumer died after the commit, before the ack reached the broker): the two ways
     * a broker redelivers a message whose effect already happened. Delivery 3 is acked.
     */
    @Test
    void aMessageDeliveredThreeTimesIsBookedOnce() throws Exception {
        TestPostgres.Database database = databaseWithLedger();
        TestAmqpBroker broker = TestAmqpBroker.get();
        runner(database).run(context -> {
            assertThat(context).hasNotFailed();
            LedgerListener listener = context.getBean(LedgerListener.class);
            BlockingQueue<Observed> observed = new LinkedBlockingQueue<>();
            String queue = "idempotency-test-" + UUID.randomUUID();
            String messageId = "msg-" + UUID.randomUUID();

            try (Connection connection = broker.connect()) {
                Channel first = connection.createChannel();
                declare(first, queue);
                publish(first, queue, messageId);
                consume(first, queue, listener, observed, List.of(Ack.NACK_REQUEUE, Ack.NONE));

                Observed d1 = next(observed, 1, broker);
                Observed d2 = next(observed, 2, broker);
                first.close(); // delivery 2 was never acked: the broker takes it back and redelivers it

                Channel second = connection.createChannel();
                consume(second, queue, listener, observed, List.of(Ack.ACK));
                Observed d3 = next(observed, 3, broker);

                assertThat(observed.poll(300, TimeUnit.MILLISECONDS))
                        .as("no fourth delivery after the ack").isNull();
                assertThat(second.queueDeclarePassive(queue).getMessageCount()).as("queue drained").isZero();
                second.queueDelete(queue);

                assertThat(List.of(d1.redelivered(), d2.redelivered(), d3.redelivered()))
                        .as("the broker's redelivered flags (%s)", broker.description())
                        .containsExactly(false, true, true);
                assertThat(List.of(d1.messageId(), d2.messageId(), d3.messageId())).containsOnly(messageId);

                assertThat(d1.failure()).isNull();
                assertThat(d1.result().replayed()).as("first delivery runs the work").isFalse();
                assertThat(d1.result().value()).asString(StandardCharsets.UTF_8).isEqualTo("booked " + messageId);
                for (Observed redelivery : List.of(d2, d3)) {
                    assertThat(redelivery.failure()).isNull();
                    assertThat(redelivery.result().replayed()).as("redelivery %d is a replay", redelivery.number())
                            .isTrue();
                    assertThat(redelivery.result().value()).isEqualTo(d1.result().value());
                }
            }

            assertThat(listener.workRuns()).as("the work ran once").isEqualTo(1);
            assertThat(database.queryLong("select count(*) from ledger")).as("ledger rows").isEqualTo(1);
            assertThat(database.queryString("select message_id || ' ' || amount from ledger"))
                    .isEqualTo(messageId + " 12.50");
            assertThat(database.queryString("select status from idempotency_keys where scope = 'ledger-listener'"
                    + " and idempotency_key = '" + messageId + "'")).isEqualTo("SUCCEEDED");
        });
    }

    /**
     * The listener's work inserts the row and then throws on the first delivery (a crash between the effect and the
     * end of the work): the template rolls the insert back together with its claim, the listener nacks, and the
     * redelivery runs the work again — it is not a replay of a failure. A further redelivery is a replay.
     */
    @Test
    void aFailedFirstDeliveryLeavesNothingAndItsRedeliveryBooksOnce() throws Exception {
        TestPostgres.Database database = databaseWithLedger();
        TestAmqpBroker broker = TestAmqpBroker.get();
        runner(database).run(context -> {
            assertThat(context).hasNotFailed();
            LedgerListener listener = context.getBean(LedgerListener.class);
            listener.failNextRunAfterInsert();
            BlockingQueue<Observed> observed = new LinkedBlockingQueue<>();
            String queue = "idempotency-test-" + UUID.randomUUID();
            String messageId = "msg-" + UUID.randomUUID();

            try (Connection connection = broker.connect()) {
                Channel channel = connection.createChannel();
                declare(channel, queue);
                publish(channel, queue, messageId);
                consume(channel, queue, listener, observed, List.of(Ack.NACK_REQUEUE, Ack.NACK_REQUEUE, Ack.ACK));

                Observed d1 = next(observed, 1, broker);
                Observed d2 = next(observed, 2, broker);
                Observed d3 = next(observed, 3, broker);
                assertThat(observed.poll(300, TimeUnit.MILLISECONDS))
                        .as("no fourth delivery after the ack").isNull();
                channel.queueDelete(queue);

                assertThat(List.of(d1.redelivered(), d2.redelivered(), d3.redelivered()))
                        .as("the broker's redelivered flags (%s)", broker.description())
                        .containsExactly(false, true, true);
                assertThat(d1.failure()).hasMessage("simulated crash after the insert");
                assertThat(d2.failure()).isNull();
                assertThat(d2.result().replayed()).as("the failed run left nothing to replay").isFalse();
                assertThat(d3.failure()).isNull();
                assertThat(d3.result().replayed()).isTrue();
                assertThat(d3.result().value()).isEqualTo(d2.result().value());
            }

            // each run counted the committed rows in its own transaction before inserting: the second run saw none,
            // so the first run's insert was rolled back, not merely hidden
            assertThat(listener.rowsSeenBeforeInsert()).containsExactly(0L, 0L);
            assertThat(database.queryLong("select count(*) from ledger")).as("ledger rows").isEqualTo(1);
        });
    }

    /**
     * The consumer's channel is lost while its work is still running (a network blip, a consumer timeout): the broker
     * redelivers the message to another consumer at once, before the first run has committed. That redelivery must not
     * run the work a second time: it waits for the first run, and is told "in progress" when the first takes longer
     * than {@code idempotency.in-flight-wait}, so its consumer gives it back. The first run then commits, although its
     * ack can no longer reach the broker, and the next redelivery replays its result.
     */
    @Test
    void aRedeliveryWhileTheFirstDeliveryStillWorksIsNotRunAgain() throws Exception {
        TestPostgres.Database database = databaseWithLedger();
        TestAmqpBroker broker = TestAmqpBroker.get();
        runner(database).withPropertyValues("idempotency.in-flight-wait=1s").run(context -> {
            assertThat(context).hasNotFailed();
            LedgerListener listener = context.getBean(LedgerListener.class);
            CountDownLatch working = new CountDownLatch(1);
            CountDownLatch finish = new CountDownLatch(1);
            listener.holdNextRunAfterInsert(working, finish);
            BlockingQueue<Observed> observed = new LinkedBlockingQueue<>();
            String queue = "idempotency-test-" + UUID.randomUUID();
            String messageId = "msg-" + UUID.randomUUID();

            try (Connection connection = broker.connect()) {
                Channel first = connection.createChannel();
                declare(first, queue);
                consume(first, queue, listener, observed, List.of(Ack.NONE));
                publish(first, queue, messageId);
                assertThat(working.await(DELIVERY_TIMEOUT_SECONDS, TimeUnit.SECONDS)).as("the first run started")
                        .isTrue();
                Channel second = connection.createChannel();
                consume(second, queue, listener, observed, List.of(Ack.NACK_REQUEUE, Ack.ACK));
                // the first consumer's channel is gone while it works: the broker gives the message to the second
                first.abort();

                Observed d2 = next(observed, 2, broker);
                finish.countDown();
                // the first run's end and the next redelivery's replay of it race to be observed
                List<Observed> last = List.of(next(observed, 1, broker), next(observed, 3, broker));
                assertThat(d2.redelivered()).as("the broker's redelivered flag (%s)", broker.description()).isTrue();
                assertThat(last).extracting(Observed::redelivered).containsExactlyInAnyOrder(false, true);
                Observed d1 = last.stream().filter(delivery -> !delivery.redelivered()).findFirst().orElseThrow();
                Observed d3 = last.stream().filter(Observed::redelivered).findFirst().orElseThrow();
                assertThat(observed.poll(300, TimeUnit.MILLISECONDS))
                        .as("no fourth delivery after the ack").isNull();
                second.queueDelete(queue);

                assertThat(d2.failure()).as("the redelivery during the first run")
                        .isInstanceOf(IdempotencyTemplate.InProgressException.class);
                assertThat(d1.failure()).isNull();
                assertThat(d1.result().replayed()).isFalse();
                assertThat(d3.failure()).isNull();
                assertThat(d3.result().replayed()).as("the redelivery after the first run committed").isTrue();
                assertThat(d3.result().value()).isEqualTo(d1.result().value());
            }

            assertThat(listener.workRuns()).as("the work ran once").isEqualTo(1);
            assertThat(database.queryLong("select count(*) from ledger")).as("ledger rows").isEqualTo(1);
        });
    }

    // ------------------------------------------------------------------------------------------------------------

    private static TestPostgres.Database databaseWithLedger() {
        TestPostgres.Database database = TestPostgres.newDatabase();
        // no unique constraint on message_id, on purpose
        database.queryString("create table ledger (id bigserial primary key, message_id text not null,"
                + " amount numeric not null)");
        return database;
    }

    /** A non-web Spring Boot application: DataSource, transactions and the starter, and the listener bean. */
    private static ApplicationContextRunner runner(TestPostgres.Database database) {
        return TestDatabases.nonWebRunner(database)
                .withUserConfiguration(ListenerConfig.class);
    }

    @Configuration(proxyBeanMethods = false)
    static class ListenerConfig {
        @Bean
        LedgerListener ledgerListener(IdempotencyTemplate template, DataSource dataSource) {
            return new LedgerListener(template, new JdbcTemplate(dataSource));
        }
    }

    /**
     * What an application's listener looks like: the message id is the idempotency key, the body is the input (the
     * same id with another body would be refused), and the effect — one ledger row — is the template's work, so it
     * commits in the template's transaction together with the record of it.
     */
    static final class LedgerListener {

        private static final Pattern AMOUNT = Pattern.compile("\"amount\"\\s*:\\s*\"([0-9.]+)\"");

        private final IdempotencyTemplate template;
        private final JdbcTemplate jdbc;
        private final AtomicInteger workRuns = new AtomicInteger();
        private final AtomicBoolean failNextRun = new AtomicBoolean();
        private final AtomicReference<CountDownLatch[]> holdNextRun = new AtomicReference<>();
        private final List<Long> rowsSeenBeforeInsert = new CopyOnWriteArrayList<>();

        LedgerListener(IdempotencyTemplate template, JdbcTemplate jdbc) {
            this.template = template;
            this.jdbc = jdbc;
        }

        IdempotencyTemplate.Result onMessage(String messageId, byte[] body) throws Exception {
            return template.execute(new ScopedKey("", "ledger-listener", messageId), body, () -> {
                workRuns.incrementAndGet();
                Matcher amount = AMOUNT.matcher(new String(body, StandardCharsets.UTF_8));
                if (!amount.find()) {
                    throw new IllegalArgumentException("no amount in the message");
                }
                rowsSeenBeforeInsert.add(jdbc.queryForObject("select count(*) from ledger", Long.class));
                jdbc.update("insert into ledger (message_id, amount) values (?, ?)", messageId,
                        new BigDecimal(amount.group(1)));
                if (failNextRun.getAndSet(false)) {
                    throw new IllegalStateException("simulated crash after the insert");
                }
                CountDownLatch[] hold = holdNextRun.getAndSet(null);
                if (hold != null) {
                    hold[0].countDown();
                    if (!hold[1].await(DELIVERY_TIMEOUT_SECONDS * 2, TimeUnit.SECONDS)) {
                        throw new IllegalStateException("the test never let the run finish");
                    }
                }
                return ("booked " + messageId).getBytes(StandardCharsets.UTF_8);
            });
        }

        void failNextRunAfterInsert() {
            failNextRun.set(true);
        }

        /** The next run counts {@code working} down after its insert, then waits for {@code finish}. */
        void holdNextRunAfterInsert(CountDownLatch working, CountDownLatch finish) {
            holdNextRun.set(new CountDownLatch[] {working, finish});
        }

        int workRuns() {
            return workRuns.get();
        }

        List<Long> rowsSeenBeforeInsert() {
            return rowsSeenBeforeInsert;
        }
    }

    /** How the consumer settles one delivery after the listener returned (or threw). */
    private enum Ack { ACK, NACK_REQUEUE, NONE }

    /** One delivery as the consumer saw it. */
    private record Observed(int number, String messageId, boolean redelivered, IdempotencyTemplate.Result result,
                            Exception failure) {
    }

    private static void declare(Channel channel, String queue) throws Exception {
        // exclusive: gone with the connection even if the test fails half-way; not auto-delete, because the
        // lost-ack scenario closes the only consumer's channel and the message must survive that
        channel.queueDeclare(queue, false, true, false, null);
    }

    private static void publish(Channel channel, String queue, String messageId) throws Exception {
        AMQP.BasicProperties properties = new AMQP.BasicProperties.Builder()
                .messageId(messageId)
                .contentType("application/json")
                .build();
        channel.basicPublish("", queue, properties, BODY.getBytes(StandardCharsets.UTF_8));
    }

    /**
     * A manual-ack consumer (prefetch 1) that hands each delivery to the listener and then settles it as the script
     * says, by delivery order on this channel. Deliveries beyond the script are left unacked.
     */
    private static void consume(Channel channel, String queue, LedgerListener listener,
                                BlockingQueue<Observed> observed, List<Ack> script) throws Exception {
        channel.basicQos(1);
        AtomicInteger onThisChannel = new AtomicInteger();
        channel.basicConsume(queue, false, new DefaultConsumer(channel) {
            @Override
            public void handleDelivery(String consumerTag, Envelope envelope, AMQP.BasicProperties properties,
                                       byte[] body) throws IOException {
                IdempotencyTemplate.Result result = null;
                Exception failure = null;
                try {
                    result = listener.onMessage(properties.getMessageId(), body);
                } catch (Exception e) {
                    failure = e;
                }
                int index = onThisChannel.getAndIncrement();
                Ack ack = index < script.size() ? script.get(index) : Ack.NONE;
                // record before settling: a nack makes the broker redeliver at once, and the order must be kept
                observed.add(new Observed(0, properties.getMessageId(), envelope.isRedeliver(), result, failure));
                switch (ack) {
                    case ACK -> getChannel().basicAck(envelope.getDeliveryTag(), false);
                    case NACK_REQUEUE -> getChannel().basicNack(envelope.getDeliveryTag(), false, true);
                    case NONE -> { }
                }
            }
        });
    }

    private static Observed next(BlockingQueue<Observed> observed, int number, TestAmqpBroker broker)
            throws InterruptedException {
        Observed delivery = observed.poll(DELIVERY_TIMEOUT_SECONDS, TimeUnit.SECONDS);
        if (delivery == null) {
            fail("delivery " + number + " did not arrive within " + DELIVERY_TIMEOUT_SECONDS + " s from "
                    + broker.description());
        }
        return new Observed(number, delivery.messageId(), delivery.redelivered(), delivery.result(),
                delivery.failure());
    }
}
