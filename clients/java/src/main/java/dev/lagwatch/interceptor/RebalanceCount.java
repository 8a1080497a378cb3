package dev.lagwatch.interceptor;

import java.lang.management.ManagementFactory;
import javax.management.JMException;
import javax.management.ObjectName;
import org.apache.kafka.common.utils.Sanitizer;

/**
 * Reads the consumer's own {@code rebalance-total} (its coordinator metrics: the rebalances it
 * took part in, classic and KIP-848 consumers alike) from JMX, like {@link PollClock}.
 */
final class RebalanceCount {
    private final ObjectName name;

    RebalanceCount(String clientId) throws JMException {
        name = new ObjectName("kafka.consumer:type=consumer-coordinator-metrics,client-id="
                + Sanitizer.jmxSanitize(clientId));
    }

    /** The consumer's rebalances so far; -1 when unknown (not in JMX, or not a number). */
    long total() {
        try {
            Object v = ManagementFactory.getPlatformMBeanServer().getAttribute(name, "rebalance-total");
            double d = v instanceof Number ? ((Number) v).doubleValue() : -1;
            return d >= 0 && d < Long.MAX_VALUE ? (long) d : -1;
        } catch (JMException | RuntimeException e) {
            return -1; // not registered (yet, or metric.reporters without JmxReporter), or closing
        }
    }
}
