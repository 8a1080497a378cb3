package dev.lagwatch.interceptor;

import java.lang.management.ManagementFactory;
import java.lang.reflect.Method;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicLong;
import javax.management.ObjectName;
import org.apache.kafka.clients.consumer.ConsumerInterceptor;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.utils.Sanitizer;

/**
 * Reports a JVM consumer's positions, committed offsets and last poll to lagwatch, from
 * configuration alone: {@code interceptor.classes=dev.lagwatch.interceptor.LagwatchConsumerInterceptor}.
 *
 * <p>A consumer whose record handler is wedged keeps heartbeating from its background thread,
 * so Kafka thinks it is fine; its reports, sent from yet another thread, keep arriving with an
 * ever older last-poll time, and lagwatch calls it {@code livelocked}, naming its client id.
 *
 * <p>The consumer's own threads only write a few fields here ({@link #onConsume},
 * {@link #onCommit}); building and sending reports happens on the daemon thread of a
 * {@link Publisher}, through a producer with a small bounded buffer. Every failure is caught,
 * counted ({@link #errorsTotal()}, JMX {@code dev.lagwatch:type=consumer-interceptor}) and
 * logged at most once per distinct problem per log interval. A consumer without a
 * {@code group.id} (Kafka Streams' restore consumers, say) is left alone.
 */
public final class LagwatchConsumerInterceptor<K, V> implements ConsumerInterceptor<K, V> {
    /** A partition absent from polls and commits this long, while others were seen, was revoked. */
    static final long FORGET_AFTER_MS = 300_000;
    private static final AtomicLong ERRORS_TOTAL = new AtomicLong();
    private static final AtomicLong SENT_TOTAL = new AtomicLong();
    /** {@code ConsumerRecords.nextOffsets()} (Kafka 4.0+, KIP-1094): exact positions past control records. */
    private static final Method NEXT_OFFSETS = nextOffsetsMethod();

    private final Map<TopicPartition, PartitionState> partitions = new ConcurrentHashMap<>();
    private final InterceptorStats stats = new InterceptorStats();
    private volatile long lastConsumeMs = System.currentTimeMillis();
    private volatile long newestSeenMs;
    private Settings settings;
    private Publisher publisher;
    private PollClock pollClock;
    private RebalanceCount rebalances;
    private ObjectName mbean;
    private String host; // reporter thread only

    /** Errors counted by every interceptor in this JVM. */
    public static long errorsTotal() {
        return ERRORS_TOTAL.get();
    }

    /** Reports acknowledged by Kafka, from every interceptor in this JVM. */
    public static long reportsSentTotal() {
        return SENT_TOTAL.get();
    }

    public long errors() {
        return stats.getErrors();
    }

    public long reportsSent() {
        return stats.getReportsSent();
    }

    @Override
    public void configure(Map<String, ?> configs) {
        try {
            settings = Settings.from(configs);
            if (settings.groupId.isEmpty()) {
                return;
            }
            pollClock = new PollClock(settings.clientId);
            rebalances = new RebalanceCount(settings.clientId);
            publisher = Publisher.acquire(settings);
            publisher.register(this);
            registerMBean();
        } catch (Exception | LinkageError e) {
            problem("configure", e);
        }
    }

    @Override
    public ConsumerRecords<K, V> onConsume(ConsumerRecords<K, V> records) {
        try {
            long now = System.currentTimeMillis();
            Map<TopicPartition, OffsetAndMetadata> next = nextOffsets(records);
            if (next != null) {
                for (Map.Entry<TopicPartition, OffsetAndMetadata> e : next.entrySet()) {
                    state(e.getKey()).consumed(e.getValue().offset(), now);
                }
            } else {
                for (TopicPartition tp : records.partitions()) {
                    List<ConsumerRecord<K, V>> batch = records.records(tp);
                    if (!batch.isEmpty()) {
                        state(tp).consumed(batch.get(batch.size() - 1).offset() + 1, now);
                    }
                }
            }
            lastConsumeMs = now;
            newestSeenMs = now;
        } catch (Exception | LinkageError e) {
            problem("onConsume", e);
        }
        return records;
    }

    @Override
    public void onCommit(Map<TopicPartition, OffsetAndMetadata> offsets) {
        try {
            long now = System.currentTimeMillis();
            for (Map.Entry<TopicPartition, OffsetAndMetadata> e : offsets.entrySet()) {
                if (e.getValue() != null) {
                    state(e.getKey()).committed(e.getValue().offset(), now);
                }
            }
            newestSeenMs = now;
        } catch (Exception | LinkageError e) {
            problem("onCommit", e);
        }
    }

    /** Sends a last report saying the consumer closed; waits for it at most about a second. */
    @Override
    public void close() {
        try {
            if (publisher != null) {
                publisher.unregister(this);
            }
            if (mbean != null) {
                ManagementFactory.getPlatformMBeanServer().unregisterMBean(mbean);
            }
        } catch (Exception | LinkageError e) {
            problem("close", e);
        }
    }

    // -- for the Publisher (reporter thread) ---------------------------------------------

    Settings settings() {
        return settings;
    }

    /** Compaction key {@code consumer/<group>/<client id>@<host>#<pid>}: one per consumer process. */
    String reportKey() {
        return "consumer/" + settings.groupId + "/" + settings.clientId + "@" + host() + "#"
                + ProcessHandle.current().pid();
    }

    String report(boolean closed, long now) {
        List<ReportJson.Partition> items = new ArrayList<>();
        long forgetBefore = newestSeenMs - FORGET_AFTER_MS;
        partitions.entrySet().removeIf(e -> e.getValue().seenMs < forgetBefore);
        for (Map.Entry<TopicPartition, PartitionState> e : partitions.entrySet()) {
            PartitionState s = e.getValue();
            items.add(new ReportJson.Partition(e.getKey().topic(), e.getKey().partition(),
                    s.position, s.committed));
        }
        return ReportJson.consumer(settings.cluster, settings.groupId, settings.clientId, host(),
                now, lastPollMs(now), settings.intervalMs, items, closed, rebalances.total(),
                settings.autoCommit ? settings.autoCommitIntervalMs : -1);
    }

    void sent() {
        stats.sent.incrementAndGet();
        SENT_TOTAL.incrementAndGet();
    }

    void problem(String where, Throwable e) {
        stats.errors.incrementAndGet();
        ERRORS_TOTAL.incrementAndGet();
        Problems.log(where, e, settings == null ? Settings.DEFAULT_LOG_INTERVAL_MS : settings.logIntervalMs);
    }

    /**
     * The consumer's own {@code last-poll-seconds-ago} (KIP-517) counts polls that return nothing,
     * which {@link #onConsume} never sees; it has whole seconds, so the time of the last poll that
     * returned records refines it.
     */
    long lastPollMs(long now) {
        long t = lastConsumeMs;
        double ago = pollClock.secondsAgo();
        if (ago >= 0) {
            t = Math.max(t, now - (long) (ago * 1000) - 500);
        }
        return Math.min(t, now);
    }

    private String host() {
        if (host == null) {
            host = LocalHost.describe(settings.consumerBootstrap);
        }
        return host;
    }

    // -- internals ------------------------------------------------------------------------

    private PartitionState state(TopicPartition tp) {
        PartitionState s = partitions.get(tp);
        return s != null ? s : partitions.computeIfAbsent(tp, k -> new PartitionState());
    }

    private void registerMBean() {
        try {
            ObjectName name = new ObjectName("dev.lagwatch:type=consumer-interceptor,client-id="
                    + Sanitizer.jmxSanitize(settings.clientId));
            ManagementFactory.getPlatformMBeanServer().registerMBean(stats, name);
            mbean = name;
        } catch (Exception e) {
            problem("JMX registration", e); // two consumers with one client id in one JVM
        }
    }

    @SuppressWarnings("unchecked")
    private Map<TopicPartition, OffsetAndMetadata> nextOffsets(ConsumerRecords<K, V> records)
            throws ReflectiveOperationException {
        return NEXT_OFFSETS == null ? null : (Map<TopicPartition, OffsetAndMetadata>) NEXT_OFFSETS.invoke(records);
    }

    private static Method nextOffsetsMethod() {
        try {
            return ConsumerRecords.class.getMethod("nextOffsets");
        } catch (NoSuchMethodException | SecurityException e) {
            return null; // kafka-clients 3.x
        }
    }

    /** Written by the consumer's threads, read by the reporter thread. */
    private static final class PartitionState {
        volatile long position = -1;
        volatile long committed = -1;
        volatile long seenMs;

        void consumed(long offset, long now) {
            position = offset;
            seenMs = now;
        }

        void committed(long offset, long now) {
            committed = offset;
            seenMs = now;
        }
    }
}
