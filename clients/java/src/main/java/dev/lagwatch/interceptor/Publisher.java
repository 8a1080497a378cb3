package dev.lagwatch.interceptor;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Future;
import java.util.concurrent.ScheduledFuture;
import java.util.concurrent.ScheduledThreadPoolExecutor;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.CreateTopicsOptions;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.errors.ClusterAuthorizationException;
import org.apache.kafka.common.errors.PolicyViolationException;
import org.apache.kafka.common.errors.TopicAuthorizationException;
import org.apache.kafka.common.errors.TopicExistsException;
import org.apache.kafka.common.serialization.ByteArraySerializer;

/**
 * One daemon thread and one producer per reports destination, shared by every interceptor
 * in the JVM that reports there (a Kafka Streams instance has one consumer per stream
 * thread). Each interceptor is reported on its own interval; sends never pile up (fixed
 * delay, one thread) and the producer's buffer is small, so when Kafka is unreachable
 * reports are dropped and counted, never queued without bound.
 */
final class Publisher {
    /** Same partitions and settings as the Python reporters (exporter/reports/decode.py). */
    static final int TOPIC_PARTITIONS = 3;
    static final Map<String, String> TOPIC_CONFIG = Map.of(
            "cleanup.policy", "compact", "min.compaction.lag.ms", "60000", "segment.ms", "3600000");
    /** Longest wait for the topic's creation: one report interval, within 1 to 5 seconds. */
    private static final long TOPIC_WAIT_MIN_MS = 1000;
    private static final long TOPIC_WAIT_MAX_MS = 5000;
    private static final long CLOSE_WAIT_MS = 1000;
    private static final Map<List<Object>, Publisher> SHARED = new HashMap<>();
    private static final AtomicInteger IDS = new AtomicInteger();

    private final List<Object> key;
    private final Settings settings;
    private final String clientId = "lagwatch-reporter-" + IDS.incrementAndGet();
    private final ScheduledThreadPoolExecutor thread;
    private final Map<LagwatchConsumerInterceptor<?, ?>, ScheduledFuture<?>> tasks = new HashMap<>();
    private int refs;
    // reporter thread only:
    private KafkaProducer<byte[], byte[]> producer;
    private Admin admin;
    private boolean topicReady;

    private Publisher(List<Object> key, Settings settings) {
        this.key = key;
        this.settings = settings;
        thread = new ScheduledThreadPoolExecutor(1, r -> {
            Thread t = new Thread(r, clientId);
            t.setDaemon(true);
            return t;
        });
        thread.setRemoveOnCancelPolicy(true);
    }

    static Publisher acquire(Settings s) {
        List<Object> key = List.of(s.topic, s.producer);
        synchronized (SHARED) {
            Publisher p = SHARED.computeIfAbsent(key, k -> new Publisher(k, s));
            p.refs++;
            return p;
        }
    }

    void register(LagwatchConsumerInterceptor<?, ?> i) {
        long every = i.settings().intervalMs;
        ScheduledFuture<?> f = thread.scheduleWithFixedDelay(() -> publish(i, false), every, every,
                TimeUnit.MILLISECONDS);
        synchronized (tasks) {
            tasks.put(i, f);
        }
    }

    /** Cancels the interceptor's reports, sends its closed report; the last one out closes the producer. */
    void unregister(LagwatchConsumerInterceptor<?, ?> i) throws InterruptedException {
        ScheduledFuture<?> f;
        synchronized (tasks) {
            f = tasks.remove(i);
        }
        if (f != null) {
            f.cancel(false);
        }
        boolean last;
        synchronized (SHARED) {
            last = --refs == 0;
            if (last) {
                SHARED.remove(key);
            }
        }
        Future<?> done = thread.submit(() -> {
            publish(i, true);
            if (last) {
                closeClients();
            }
        });
        if (last) {
            thread.shutdown();
        }
        try {
            done.get(CLOSE_WAIT_MS, TimeUnit.MILLISECONDS);
        } catch (TimeoutException | ExecutionException e) {
            // the consumer's close does not wait longer; the daemon thread carries on
        }
    }

    private void publish(LagwatchConsumerInterceptor<?, ?> i, boolean closed) {
        try {
            if (!topicReady) {
                try {
                    createTopic();
                } catch (Exception e) {
                    i.problem("creating the reports topic", e); // this report is dropped
                    return;
                }
            }
            if (producer == null) {
                producer = new KafkaProducer<>(settings.producerProps(clientId), new ByteArraySerializer(),
                        new ByteArraySerializer());
            }
            byte[] k = i.reportKey().getBytes(StandardCharsets.UTF_8);
            byte[] v = i.report(closed, System.currentTimeMillis()).getBytes(StandardCharsets.UTF_8);
            producer.send(new ProducerRecord<>(settings.topic, k, v), (md, e) -> {
                if (e == null) {
                    i.sent();
                } else {
                    i.problem("sending a report", e);
                }
            });
        } catch (Exception | LinkageError e) {
            i.problem("sending a report", e);
        }
    }

    /**
     * Creates the compacted reports topic before the first send: a producer asking for a
     * missing topic's metadata makes a broker with auto.create.topics.enable create it
     * uncompacted. Until that is settled no report is sent (each one counts as an error).
     */
    private void createTopic() throws Exception {
        if (admin == null) {
            admin = Admin.create(settings.adminProps(clientId + "-admin"));
        }
        try {
            NewTopic t = new NewTopic(settings.topic, Optional.of(TOPIC_PARTITIONS), Optional.empty())
                    .configs(TOPIC_CONFIG);
            int wait = (int) Math.min(TOPIC_WAIT_MAX_MS, Math.max(TOPIC_WAIT_MIN_MS, settings.intervalMs));
            admin.createTopics(List.of(t), new CreateTopicsOptions().timeoutMs(wait))
                    .all().get(wait + 500, TimeUnit.MILLISECONDS);
            topicReady = true;
        } catch (ExecutionException e) {
            Throwable c = e.getCause();
            if (c instanceof TopicExistsException) {
                topicReady = true;
            } else if (c instanceof TopicAuthorizationException || c instanceof ClusterAuthorizationException
                    || c instanceof PolicyViolationException) {
                topicReady = true; // someone else manages topics: send to whatever exists
                Problems.log("creating the reports topic (reports are sent anyway)", c, settings.logIntervalMs);
            } else {
                throw e;
            }
        }
        if (topicReady) {
            admin.close(Duration.ZERO);
            admin = null;
        }
    }

    private void closeClients() {
        if (admin != null) {
            admin.close(Duration.ZERO);
            admin = null;
        }
        if (producer != null) {
            producer.close(Duration.ofMillis(CLOSE_WAIT_MS));
            producer = null;
        }
    }
}
