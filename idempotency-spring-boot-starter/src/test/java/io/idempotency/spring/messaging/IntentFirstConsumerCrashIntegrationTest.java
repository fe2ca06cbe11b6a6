package io.idempotency.spring.messaging;

import com.rabbitmq.client.AMQP;
import com.rabbitmq.client.Channel;
import com.rabbitmq.client.Connection;
import com.rabbitmq.client.DefaultConsumer;
import com.rabbitmq.client.Envelope;
import io.idempotency.core.IdempotencyMode;
import io.idempotency.core.IdempotencyTemplate;
import io.idempotency.core.ScopedKey;
import io.idempotency.core.StaleClaimResolver;
import io.idempotency.core.StoredResponse;
import io.idempotency.spring.TestDatabases;
import io.idempotency.testkit.TestPostgres;
import org.junit.jupiter.api.Test;
import org.springframework.jdbc.core.JdbcTemplate;

import javax.sql.DataSource;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.UUID;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * Intent-first work behind a real broker: the consumer charges a gateway (which deduplicates on the downstream key),
 * then dies before its local write commits and before its ack — its connection is gone, so the broker redelivers at
 * once. The death is simulated in this JVM: the consumer's broker connection is aborted and its work ends with an
 * exception, which leaves the database as a killed process would (its local write rolled back, the committed claim
 * PROCESSING under a lease nobody renews); the sample application's crash tests kill real JVMs. Redeliveries within the claim's lease are told "in progress" and given back; the first one after the lease
 * takes the stale claim over, and the resolver, which finds the charge at the gateway, completes it: every later
 * redelivery replays that answer. The gateway is charged once, and the work never runs a second time.
 */
class IntentFirstConsumerCrashIntegrationTest {

    private static final String BODY = "{\"payment\":\"p-1\",\"amount\":\"12.50\"}";
    private static final Duration LEASE = Duration.ofSeconds(3);

    @Test
    void aConsumerThatDiesAfterTheChargeIsResolvedNotRunAgain() throws Exception {
        TestPostgres.Database database = TestPostgres.newDatabase();
        database.queryString("create table ledger (id bigserial primary key, message_id text not null)");
        Map<String, String> gateway = new ConcurrentHashMap<>(); // downstream key -> charge id
        AtomicInteger charges = new AtomicInteger();
        StaleClaimResolver resolver = claim -> {
            String charge = gateway.get(claim.downstreamKey());
            return charge == null ? StaleClaimResolver.Resolution.rerun()
                    : StaleClaimResolver.Resolution.complete(new StoredResponse(200, List.of(),
                    ("charged " + charge).getBytes(StandardCharsets.UTF_8)));
        };
        TestAmqpBroker broker = TestAmqpBroker.get();
        TestDatabases.nonWebRunner(database)
                .withPropertyValues("idempotency.sweeper.enabled=false", "idempotency.in-flight-wait=100ms")
                .withBean(StaleClaimResolver.class, () -> resolver)
                .run(context -> {
                    assertThat(context).hasNotFailed();
                    IdempotencyTemplate template = context.getBean(IdempotencyTemplate.class);
                    JdbcTemplate jdbc = new JdbcTemplate(context.getBean(DataSource.class));
                    AtomicInteger workRuns = new AtomicInteger();
                    CountDownLatch charged = new CountDownLatch(1);
                    CountDownLatch dying = new CountDownLatch(1);
                    String queue = "idempotency-test-" + UUID.randomUUID();
                    String messageId = "msg-" + UUID.randomUUID();
                    BlockingQueue<Object> outcomes = new LinkedBlockingQueue<>();

                    try (Connection survivor = broker.connect()) {
                        Channel channel = survivor.createChannel();
                        // not auto-delete: the dead consumer was the only one, and the message must survive it
                        channel.queueDeclare(queue, false, false, false, null);
                        Connection doomed = broker.connect();
                        Channel first = doomed.createChannel();
                        first.basicQos(1);
                        first.basicConsume(queue, false, new DefaultConsumer(first) {
                            @Override
                            public void handleDelivery(String tag, Envelope envelope, AMQP.BasicProperties properties,
                                                       byte[] body) {
                                try {
                                    template.execute(key(properties), body, IdempotencyMode.INTENT_FIRST, LEASE,
                                            () -> {
                                                workRuns.incrementAndGet();
                                                charges.incrementAndGet();
                                                gateway.put(io.idempotency.core.IdempotencyContext.require()
                                                        .downstreamKey(), "ch-1");
                                                jdbc.update("insert into ledger (message_id) values (?)",
                                                        properties.getMessageId());
                                                charged.countDown();
                                                // the process dies here: nothing after the charge completes
                                                dying.await(10, TimeUnit.SECONDS);
                                                throw new IllegalStateException("killed");
                                            });
                                } catch (Exception e) {
                                    outcomes.add("first: " + e.getMessage());
                                }
                            }
                        });
                        channel.basicPublish("", queue, new AMQP.BasicProperties.Builder().messageId(messageId)
                                .build(), BODY.getBytes(StandardCharsets.UTF_8));
                        assertThat(charged.await(10, TimeUnit.SECONDS)).as("the first delivery charged").isTrue();

                        // the consumer's connection dies before the ack: the broker redelivers to the next consumer
                        doomed.abort();
                        dying.countDown();
                        Channel second = survivor.createChannel();
                        second.basicQos(1);
                        second.basicConsume(queue, false, new DefaultConsumer(second) {
                            @Override
                            public void handleDelivery(String tag, Envelope envelope, AMQP.BasicProperties properties,
                                                       byte[] body) throws java.io.IOException {
                                try {
                                    IdempotencyTemplate.Result result = template.execute(key(properties), body,
                                            IdempotencyMode.INTENT_FIRST, LEASE, () -> {
                                                workRuns.incrementAndGet();
                                                charges.incrementAndGet();
                                                return "charged again".getBytes(StandardCharsets.UTF_8);
                                            });
                                    outcomes.add(result);
                                    getChannel().basicAck(envelope.getDeliveryTag(), false);
                                } catch (IdempotencyTemplate.InProgressException e) {
                                    outcomes.add(e);
                                    try {
                                        Thread.sleep(100);
                                    } catch (InterruptedException interrupted) {
                                        Thread.currentThread().interrupt();
                                    }
                                    getChannel().basicNack(envelope.getDeliveryTag(), false, true);
                                } catch (Exception e) {
                                    outcomes.add(e);
                                    getChannel().basicNack(envelope.getDeliveryTag(), false, false);
                                }
                            }
                        });

                        IdempotencyTemplate.Result answered = null;
                        int inProgress = 0;
                        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(15);
                        while (answered == null && System.nanoTime() < deadline) {
                            Object outcome = outcomes.poll(1, TimeUnit.SECONDS);
                            if (outcome instanceof IdempotencyTemplate.Result result) {
                                answered = result;
                            } else if (outcome instanceof IdempotencyTemplate.InProgressException) {
                                inProgress++;
                            } else if (outcome instanceof Exception e) {
                                throw new AssertionError("a redelivery failed", e);
                            }
                        }
                        assertThat(answered).as("a redelivery after the lease got an answer").isNotNull();
                        assertThat(answered.replayed()).isTrue();
                        assertThat(answered.value()).asString(StandardCharsets.UTF_8).isEqualTo("charged ch-1");
                        assertThat(inProgress).as("redeliveries within the lease were given back").isPositive();
                        assertThat(channel.queueDeclarePassive(queue).getMessageCount()).as("queue drained")
                                .isZero();
                    } finally {
                        try (Connection cleanup = broker.connect()) {
                            cleanup.createChannel().queueDelete(queue);
                        }
                    }

                    assertThat(workRuns).as("the work ran once").hasValue(1);
                    assertThat(charges).as("the gateway was charged once").hasValue(1);
                    assertThat(database.queryLong("select count(*) from ledger"))
                            .as("the dead consumer's local write rolled back").isZero();
                    assertThat(database.queryString("select status from idempotency_keys")).isEqualTo("SUCCEEDED");
                });
    }

    private static ScopedKey key(AMQP.BasicProperties properties) {
        return new ScopedKey("", "payment-listener", properties.getMessageId());
    }
}
