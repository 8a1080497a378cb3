package dev.lagwatch.interceptor;

import java.lang.management.ManagementFactory;
import javax.management.InstanceNotFoundException;
import javax.management.JMException;
import javax.management.ObjectName;
import org.apache.kafka.common.utils.Sanitizer;
import org.slf4j.LoggerFactory;

/**
 * Reads the consumer's own {@code last-poll-seconds-ago} metric (KIP-517) from JMX, where
 * Kafka's JmxReporter publishes it by default. An interceptor gets no handle on its consumer;
 * the metric, unlike {@code onConsume}, also counts polls that returned nothing.
 */
final class PollClock {
    private final ObjectName name;
    private boolean saidMissing;

    PollClock(String clientId) throws JMException {
        name = new ObjectName("kafka.consumer:type=consumer-metrics,client-id=" + Sanitizer.jmxSanitize(clientId));
    }

    /** Whole seconds since the consumer's last {@code poll()} started; -1 when unknown. */
    double secondsAgo() {
        try {
            Object v = ManagementFactory.getPlatformMBeanServer().getAttribute(name, "last-poll-seconds-ago");
            double d = v instanceof Number ? ((Number) v).doubleValue() : -1;
            return d >= 0 && !Double.isInfinite(d) ? d : -1; // -1 before the first poll
        } catch (InstanceNotFoundException e) {
            if (!saidMissing) {
                saidMissing = true;
                LoggerFactory.getLogger("dev.lagwatch.interceptor").info(
                        "lagwatch interceptor: no {} in JMX (metric.reporters without JmxReporter?): the last poll"
                                + " reported is the last one that returned records", name);
            }
            return -1;
        } catch (JMException | RuntimeException e) {
            return -1; // the consumer is closing
        }
    }
}
