package dev.lagwatch.interceptor;

import java.util.Comparator;
import java.util.List;

/**
 * Consumer reports in the JSON lagwatch decodes (exporter/reports/decode.py, version 1), written by
 * hand so the jar needs nothing but kafka-clients. A report stays under the exporter's size
 * and partition limits: partitions past them are left out (the last-poll time, which is what
 * livelock detection needs, is always there).
 */
final class ReportJson {
    static final int MAX_PARTITIONS = 10_000;
    static final int MAX_CHARS = 240 * 1024; // the exporter drops reports over 256 KiB

    record Partition(String topic, int partition, long position, long committed) {
    }

    private ReportJson() {
    }

    static String consumer(String cluster, String group, String clientId, String host, long sentAtMs,
                           long lastPollMs, long intervalMs, List<Partition> partitions, boolean closed,
                           long rebalances, long autoCommitIntervalMs) {
        StringBuilder b = new StringBuilder(256 + 64 * partitions.size());
        b.append("{\"v\":1,\"kind\":\"consumer\"");
        if (cluster != null && !cluster.isEmpty()) {
            field(b, "cluster", cluster);
        }
        field(b, "group", group);
        field(b, "client_id", clientId);
        field(b, "member_id", ""); // an interceptor cannot know it: lagwatch matches client id and host
        field(b, "host", host);
        b.append(",\"sent_at\":").append(seconds(sentAtMs));
        b.append(",\"last_poll\":").append(seconds(lastPollMs));
        b.append(",\"interval\":").append(seconds(intervalMs));
        b.append(",\"partitions\":[");
        partitions.sort(Comparator.comparing(Partition::topic).thenComparingInt(Partition::partition));
        int n = 0;
        for (Partition p : partitions) {
            if (n == MAX_PARTITIONS || b.length() > MAX_CHARS) {
                break;
            }
            b.append(n++ == 0 ? "{" : ",{");
            b.append("\"topic\":");
            string(b, p.topic());
            b.append(",\"partition\":").append(p.partition());
            if (p.position() >= 0) {
                b.append(",\"position\":").append(p.position());
            }
            if (p.committed() >= 0) {
                b.append(",\"committed\":").append(p.committed());
            }
            b.append('}');
        }
        b.append("],\"closed\":").append(closed);
        if (rebalances >= 0) { // the consumer's own rebalance-total; left out when unknown
            b.append(",\"rebalances\":").append(rebalances);
        }
        // the consumer's own configuration: automatic commits every so often (< 0: manual)
        if (autoCommitIntervalMs >= 0) {
            b.append(",\"commit_mode\":\"auto\",\"auto_commit_interval\":").append(seconds(autoCommitIntervalMs));
        } else {
            b.append(",\"commit_mode\":\"manual\"");
        }
        b.append('}');
        return b.toString();
    }

    private static void field(StringBuilder b, String name, String value) {
        b.append(",\"").append(name).append("\":");
        string(b, value == null ? "" : value);
    }

    /** Epoch milliseconds as seconds with three decimals. */
    static String seconds(long ms) {
        String frac = Long.toString(1000 + Math.floorMod(ms, 1000L)).substring(1);
        return Math.floorDiv(ms, 1000L) + "." + frac;
    }

    static void string(StringBuilder b, String s) {
        b.append('"');
        for (int i = 0; i < s.length(); i++) {
            char c = s.charAt(i);
            switch (c) {
                case '"' -> b.append("\\\"");
                case '\\' -> b.append("\\\\");
                case '\n' -> b.append("\\n");
                case '\r' -> b.append("\\r");
                case '\t' -> b.append("\\t");
                default -> {
                    if (c < 0x20 || Character.isSurrogate(c) && !validSurrogate(s, i)) {
                        b.append(String.format("\\u%04x", (int) (c < 0x20 ? c : 0xfffd)));
                    } else {
                        b.append(c);
                    }
                }
            }
        }
        b.append('"');
    }

    /** A lone surrogate is no character: UTF-8 cannot carry it, so it becomes U+FFFD. */
    private static boolean validSurrogate(String s, int i) {
        char c = s.charAt(i);
        if (Character.isHighSurrogate(c)) {
            return i + 1 < s.length() && Character.isLowSurrogate(s.charAt(i + 1));
        }
        return i > 0 && Character.isHighSurrogate(s.charAt(i - 1));
    }
}
