import java.time.Duration;
import java.util.List;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaShareConsumer;
import org.apache.kafka.common.errors.InterruptException;
import org.apache.kafka.common.errors.WakeupException;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

/**
 * A share-group consumer (KIP-932, kafka-clients 4.2's KafkaShareConsumer) for lagwatch's JVM
 * tests and demo. Records are acknowledged implicitly (ACCEPT on the next poll).
 *
 *   java -cp KAFKA_LIBS/*:CLASSES ShareApp bootstrap=H:P group=G topic=T[,T2...]
 *       [mode=healthy|slow|wedged] [after=N] [delay=MS] [client=ID] [prop.K=V ...]
 *
 * healthy processes records at once; slow sleeps `delay` ms (200) per record; wedged blocks the
 * polling thread for good after `after` records (20). The share group's heartbeats go from the
 * client's background thread, so a wedged consumer stays a member until max.poll.interval.ms
 * (default 300000) runs out; its acquired records go back to the group when their acquisition
 * lock (group config share.record.lock.duration.ms, default 30000) expires.
 *
 * Prints READY epoch once the first poll returns, CONSUMED n at most once a second while records
 * come, BLOCKED epoch when it wedges and EXIT on shutdown. The group must read from the earliest
 * offset for records produced before it starts: set the group config share.auto.offset.reset.
 */
public final class ShareApp {
    static void say(String s) {
        System.out.println(s);
        System.out.flush();
    }

    static double now() {
        return System.currentTimeMillis() / 1000.0;
    }

    public static void main(String[] argv) throws Exception {
        Properties p = new Properties();
        String bootstrap = null, group = null, topic = null, mode = "healthy", client = null;
        long after = 20, delay = 200;
        for (String arg : argv) {
            int eq = arg.indexOf('=');
            String k = arg.substring(0, eq), v = arg.substring(eq + 1);
            switch (k) {
                case "bootstrap" -> bootstrap = v;
                case "group" -> group = v;
                case "topic" -> topic = v;
                case "mode" -> mode = v;
                case "after" -> after = Long.parseLong(v);
                case "delay" -> delay = Long.parseLong(v);
                case "client" -> client = v;
                default -> p.put(k.substring(5), v); // prop.K=V
            }
        }
        if (!List.of("healthy", "slow", "wedged").contains(mode)) {
            throw new IllegalArgumentException("mode must be healthy, slow or wedged: " + mode);
        }
        p.putIfAbsent(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.putIfAbsent(ConsumerConfig.GROUP_ID_CONFIG, group);
        if (client != null) {
            p.putIfAbsent(ConsumerConfig.CLIENT_ID_CONFIG, client);
        }
        if (mode.equals("slow")) {
            // Few records per poll, so that a slow batch is processed well within its lock.
            p.putIfAbsent(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, "10");
            p.putIfAbsent(ConsumerConfig.SHARE_ACQUIRE_MODE_CONFIG, "record_limit");
        }
        KafkaShareConsumer<byte[], byte[]> consumer =
                new KafkaShareConsumer<>(p, new ByteArrayDeserializer(), new ByteArrayDeserializer());

        Thread main = Thread.currentThread();
        CountDownLatch closed = new CountDownLatch(1);
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            main.interrupt(); // ends a wedge or a slow sleep
            consumer.wakeup();
            try {
                closed.await(10, TimeUnit.SECONDS);
            } catch (InterruptedException ignored) {
                // exiting anyway
            }
            say("EXIT");
        }));

        long seen = 0, reported = 0, lastReport = 0;
        boolean ready = false;
        try {
            consumer.subscribe(List.of(topic.split(",")));
            while (!main.isInterrupted()) {
                ConsumerRecords<byte[], byte[]> records = consumer.poll(Duration.ofMillis(500));
                if (!ready) {
                    ready = true;
                    say("READY " + now());
                }
                for (ConsumerRecord<byte[], byte[]> r : records) {
                    seen++;
                    if (mode.equals("slow")) {
                        Thread.sleep(delay);
                    } else if (mode.equals("wedged") && seen >= after) {
                        say("CONSUMED " + seen);
                        say("BLOCKED " + now());
                        Thread.sleep(Long.MAX_VALUE); // wedged handler: never polls again
                    }
                }
                if (seen != reported && System.currentTimeMillis() - lastReport >= 1000) {
                    say("CONSUMED " + seen);
                    reported = seen;
                    lastReport = System.currentTimeMillis();
                }
            }
        } catch (InterruptedException | InterruptException | WakeupException e) {
            // shutting down
        } finally {
            Thread.interrupted(); // close() must not see the shutdown's interrupt
            consumer.close(Duration.ofSeconds(5));
            closed.countDown();
        }
    }
}
