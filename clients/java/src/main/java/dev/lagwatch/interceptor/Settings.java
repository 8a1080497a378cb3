package dev.lagwatch.interceptor;

import java.util.ArrayList;
import java.util.Collection;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.producer.ProducerConfig;

/**
 * The interceptor's settings, read from the consumer's own configuration. All optional:
 *
 * <ul>
 *   <li>{@code lagwatch.bootstrap.servers}: where reports go (default: the consumer's cluster);
 *   <li>{@code lagwatch.reports.topic} (default {@code __lagwatch_reports});
 *   <li>{@code lagwatch.report.interval.ms} (default 5000);
 *   <li>{@code lagwatch.cluster}: lagwatch's name for the cluster, when it watches several;
 *   <li>{@code lagwatch.log.interval.ms}: one log line per distinct problem per this (default 60000);
 *   <li>{@code lagwatch.producer.*}: any producer property, e.g. security for another cluster.
 * </ul>
 *
 * The reporter's producer takes the consumer's connection and security properties
 * ({@code bootstrap.servers}, {@code security.protocol}, {@code sasl.*}, {@code ssl.*}, ...).
 */
final class Settings {
    static final String PREFIX = "lagwatch.";
    static final String DEFAULT_TOPIC = "__lagwatch_reports";
    static final long DEFAULT_INTERVAL_MS = 5000;
    static final long DEFAULT_LOG_INTERVAL_MS = 60_000;
    private static final Set<String> COPIED = Set.of(
            "bootstrap.servers", "security.protocol", "client.dns.lookup", "security.providers",
            "socket.connection.setup.timeout.ms", "socket.connection.setup.timeout.max.ms");
    /**
     * A small bounded producer that never waits long: reports are dropped, not queued. Its
     * reconnection backoff grows to a minute, so an unreachable cluster costs the application's
     * log about one line of Kafka's own a minute, not ten a second.
     */
    private static final Map<String, Object> PRODUCER_DEFAULTS = Map.of(
            ProducerConfig.RECONNECT_BACKOFF_MS_CONFIG, "1000",
            ProducerConfig.RECONNECT_BACKOFF_MAX_MS_CONFIG, "60000",
            ProducerConfig.ACKS_CONFIG, "1",
            ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "false",
            ProducerConfig.BUFFER_MEMORY_CONFIG, "1048576",
            ProducerConfig.MAX_BLOCK_MS_CONFIG, "1000",
            ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, "15000",
            ProducerConfig.REQUEST_TIMEOUT_MS_CONFIG, "10000",
            ProducerConfig.LINGER_MS_CONFIG, "20");

    final String groupId;
    final String clientId;
    final String cluster;
    final String topic;
    final long intervalMs;
    final long logIntervalMs;
    final List<String> consumerBootstrap;
    /** The consumer's own {@code enable.auto.commit} (default true), reported as its commit mode. */
    final boolean autoCommit;
    /** The consumer's {@code auto.commit.interval.ms} (default 5000). */
    final long autoCommitIntervalMs;
    /** Producer properties, sorted: equal maps share one {@link Publisher}. */
    final Map<String, Object> producer;

    private Settings(Map<String, ?> c) {
        groupId = text(c.get("group.id"));
        clientId = text(c.get("client.id"));
        cluster = text(c.get(PREFIX + "cluster"));
        String t = text(c.get(PREFIX + "reports.topic"));
        topic = t.isEmpty() ? DEFAULT_TOPIC : t;
        intervalMs = Math.max(100, number(c.get(PREFIX + "report.interval.ms"), DEFAULT_INTERVAL_MS));
        logIntervalMs = Math.max(0, number(c.get(PREFIX + "log.interval.ms"), DEFAULT_LOG_INTERVAL_MS));
        consumerBootstrap = list(c.get("bootstrap.servers"));
        Object auto = c.get("enable.auto.commit");
        autoCommit = auto == null || text(auto).isEmpty() || Boolean.parseBoolean(text(auto));
        autoCommitIntervalMs = Math.max(0, number(c.get("auto.commit.interval.ms"), 5000));
        Map<String, Object> p = new TreeMap<>(PRODUCER_DEFAULTS);
        for (Map.Entry<String, ?> e : c.entrySet()) {
            String k = e.getKey();
            if (e.getValue() != null && (COPIED.contains(k) || k.startsWith("sasl.") || k.startsWith("ssl."))) {
                p.put(k, e.getValue());
            }
        }
        for (Map.Entry<String, ?> e : c.entrySet()) {
            if (e.getKey().startsWith(PREFIX + "producer.") && e.getValue() != null) {
                p.put(e.getKey().substring((PREFIX + "producer.").length()), e.getValue());
            }
        }
        Object own = c.get(PREFIX + "bootstrap.servers");
        if (own != null) {
            p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, own);
        }
        producer = p;
    }

    static Settings from(Map<String, ?> configs) {
        return new Settings(configs);
    }

    Map<String, Object> producerProps(String clientId) {
        Map<String, Object> p = new TreeMap<>(producer);
        p.putIfAbsent(ProducerConfig.CLIENT_ID_CONFIG, clientId);
        return p;
    }

    Map<String, Object> adminProps(String clientId) {
        Map<String, Object> p = new TreeMap<>();
        Set<String> known = AdminClientConfig.configNames();
        for (Map.Entry<String, Object> e : producer.entrySet()) {
            if (known.contains(e.getKey())) {
                p.put(e.getKey(), e.getValue());
            }
        }
        p.put(AdminClientConfig.CLIENT_ID_CONFIG, clientId);
        return p;
    }

    private static String text(Object v) {
        return v == null ? "" : v.toString().trim();
    }

    private static long number(Object v, long dflt) {
        if (v == null || v.toString().isBlank()) {
            return dflt;
        }
        try {
            return v instanceof Number n ? n.longValue() : Long.parseLong(v.toString().trim());
        } catch (NumberFormatException e) {
            return dflt;
        }
    }

    private static List<String> list(Object v) {
        List<String> out = new ArrayList<>();
        if (v instanceof Collection<?> items) {
            for (Object o : items) {
                out.add(o.toString());
            }
        } else if (v != null) {
            for (String s : v.toString().split(",")) {
                if (!s.isBlank()) {
                    out.add(s.trim());
                }
            }
        }
        return out;
    }
}
