import java.time.Duration;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

/**
 * A plain KafkaConsumer with one behaviour, for lagwatch's JVM tests, demo and benchmark.
 *
 *   java -cp KAFKA_LIBS/*:INTERCEPTOR_JAR:CLASSES LagConsumer mode=blocked bootstrap=H:P group=G
 *       topic=T [after=N] [count=N] [linger=S] [prop.interceptor.classes=...] [prop.K=V ...]
 *
 * Modes: healthy (consume, commit every batch), blocked (after `after` records the handler
 * wedges while the consumer's heartbeat thread keeps it in the group; it commits what it read
 * first unless `precommit=false`: a consumer wedged on its very first batch commits nothing),
 * drain (consume `count`
 * records as fast as possible, then keep polling for `linger` seconds), exposure (consume
 * `count` records of a one-partition topic, commit offset `commitat` of it unless it is -1,
 * print EXPOSED position committed, then keep polling without committing anything else
 * unless the consumer's own automatic commits do).
 * Prints READY once assigned, BLOCKED epoch position, STAT epoch records errors sent every
 * half second, DRAINED seconds records cpu-seconds (measured from `warmup` seconds after the
 * first record), and EXIT records errors sent.
 */
public final class LagConsumer {
    static void say(String s) {
        System.out.println(s);
        System.out.flush();
    }

    static double now() {
        return System.currentTimeMillis() / 1000.0;
    }

    static long interceptorErrors() {
        return dev.lagwatch.interceptor.LagwatchConsumerInterceptor.errorsTotal();
    }

    static long interceptorSent() {
        return dev.lagwatch.interceptor.LagwatchConsumerInterceptor.reportsSentTotal();
    }

    /** CPU time of the whole JVM: the consumer's threads, the interceptor's, GC and JIT. */
    static double cpuSeconds() {
        return ((com.sun.management.OperatingSystemMXBean) java.lang.management.ManagementFactory
                .getOperatingSystemMXBean()).getProcessCpuTime() / 1e9;
    }

    public static void main(String[] argv) throws Exception {
        Map<String, String> a = new HashMap<>();
        Properties p = new Properties();
        for (String arg : argv) {
            int eq = arg.indexOf('=');
            String k = arg.substring(0, eq), v = arg.substring(eq + 1);
            if (k.startsWith("prop.")) {
                p.put(k.substring(5), v);
            } else {
                a.put(k, v);
            }
        }
        String mode = a.get("mode");
        long after = Long.parseLong(a.getOrDefault("after", "20"));
        long count = Long.parseLong(a.getOrDefault("count", "0"));
        double linger = Double.parseDouble(a.getOrDefault("linger", "0"));
        double warmup = Double.parseDouble(a.getOrDefault("warmup", "0"));
        boolean precommit = Boolean.parseBoolean(a.getOrDefault("precommit", "true"));
        long commitAt = Long.parseLong(a.getOrDefault("commitat", "-1"));
        boolean exposed = false;
        p.putIfAbsent("bootstrap.servers", a.get("bootstrap"));
        p.putIfAbsent("group.id", a.get("group"));
        p.putIfAbsent("auto.offset.reset", "earliest");
        p.putIfAbsent("enable.auto.commit", "false");
        if (mode.equals("blocked")) {
            p.putIfAbsent("max.poll.interval.ms", "600000"); // stays in the group while wedged
            p.putIfAbsent("max.poll.records", "5");
        }
        KafkaConsumer<byte[], byte[]> c = new KafkaConsumer<>(p, new ByteArrayDeserializer(), new ByteArrayDeserializer());
        c.subscribe(List.of(a.get("topic")));
        boolean ready = false;
        long records = 0;
        double firstRecord = 0, started = 0, startedCpu = 0, lastStat = 0, drained = 0;
        long startedRecords = 0;
        while (true) {
            ConsumerRecords<byte[], byte[]> batch = c.poll(Duration.ofMillis(100));
            if (!ready && !c.assignment().isEmpty()) {
                ready = true;
                say("READY " + now());
            }
            if (firstRecord == 0 && !batch.isEmpty()) {
                firstRecord = now();
            }
            if (started == 0 && firstRecord > 0 && now() - firstRecord >= warmup) {
                started = now();
                startedCpu = cpuSeconds();
                startedRecords = records;
            }
            for (ConsumerRecord<byte[], byte[]> r : batch) {
                records++;
                if (mode.equals("blocked") && records >= after) {
                    if (precommit) {
                        c.commitSync();
                    }
                    TopicPartition tp = new TopicPartition(r.topic(), r.partition());
                    say("BLOCKED " + now() + " " + c.position(tp));
                    while (true) {
                        Thread.sleep(200); // wedged: the consumer's heartbeat thread carries on
                    }
                }
            }
            if (!batch.isEmpty() && !mode.equals("drain") && !mode.equals("exposure")) {
                c.commitSync();
            }
            if (mode.equals("exposure") && !exposed && records >= count) {
                exposed = true;
                TopicPartition tp = new TopicPartition(a.get("topic"), 0);
                if (commitAt >= 0) {
                    c.commitSync(Map.of(tp, new OffsetAndMetadata(commitAt)));
                }
                say("EXPOSED " + c.position(tp) + " " + commitAt);
            }
            double t = now();
            if (t - lastStat >= 0.5) {
                lastStat = t;
                say("STAT " + t + " " + records + " " + interceptorErrors() + " " + interceptorSent());
            }
            if (mode.equals("drain") && drained == 0 && records >= count) {
                drained = t;
                say(started == 0 ? "DRAINED 0 0 0" // done before the warm-up was
                        : "DRAINED " + (t - started) + " " + (records - startedRecords) + " " + (cpuSeconds() - startedCpu));
            }
            if (drained > 0 && t - drained >= linger) {
                break;
            }
        }
        c.close();
        say("EXIT " + records + " " + interceptorErrors() + " " + interceptorSent());
    }
}
