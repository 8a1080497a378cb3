import java.nio.file.Files;
import java.util.Properties;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler;

/**
 * A Kafka Streams application whose processor wedges after `after` records (and 2 s), for lagwatch's
 * JVM tests and demo. The interceptor comes from configuration alone:
 * prop.main.consumer.interceptor.classes=dev.lagwatch.interceptor.LagwatchConsumerInterceptor.
 *
 *   java -cp STREAMS_LIBS/*:INTERCEPTOR_JAR:CLASSES StreamsApp bootstrap=H:P app=ID topic=T after=N
 *       [delay=MS]  (a slow processor: MS per record)
 *       [prop.K=V ...]
 *
 * Prints READY when the instance runs, FIRST epoch once it processed its first record and
 * BLOCKED epoch when the processor wedges. If the client
 * fails (a stream thread died: DIED and the exception), it exits with status 3.
 */
public final class StreamsApp {
    static void say(String s) {
        System.out.println(s);
        System.out.flush();
    }

    public static void main(String[] argv) throws Exception {
        Properties p = new Properties();
        String bootstrap = null, app = null, topic = null;
        long after = 20;
        long delayMs = 0;
        for (String arg : argv) {
            int eq = arg.indexOf('=');
            String k = arg.substring(0, eq), v = arg.substring(eq + 1);
            switch (k) {
                case "bootstrap" -> bootstrap = v;
                case "app" -> app = v;
                case "topic" -> topic = v;
                case "after" -> after = Long.parseLong(v);
                case "delay" -> delayMs = Long.parseLong(v);
                default -> p.put(k.substring(5), v); // prop.K=V
            }
        }
        p.putIfAbsent(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.putIfAbsent(StreamsConfig.APPLICATION_ID_CONFIG, app);
        p.putIfAbsent(StreamsConfig.STATE_DIR_CONFIG, Files.createTempDirectory("streams-").toString());
        p.putIfAbsent(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, "100");
        p.putIfAbsent(StreamsConfig.consumerPrefix("auto.offset.reset"), "earliest");
        // A wedged stream thread stays in the group: the classic protocol heartbeats from a
        // background thread, and the poll timeout is far away.
        p.putIfAbsent(StreamsConfig.mainConsumerPrefix("max.poll.interval.ms"), "600000");
        StreamsBuilder b = new StreamsBuilder();
        AtomicLong seen = new AtomicLong();
        AtomicLong first = new AtomicLong();
        long limit = after;
        long delay = delayMs;
        b.stream(topic, org.apache.kafka.streams.kstream.Consumed.with(Serdes.ByteArray(), Serdes.ByteArray()))
                .foreach((k, v) -> {
                    if (delay > 0) {
                        try {
                            Thread.sleep(delay); // a slow processor
                        } catch (InterruptedException e) {
                            Thread.currentThread().interrupt();
                            return;
                        }
                    }
                    if (first.compareAndSet(0, System.currentTimeMillis())) {
                        say("FIRST " + first.get() / 1000.0); // its first record, processed
                    }
                    // ...and not before the thread has had time to commit (every 100 ms between
                    // polls): lagwatch evaluates committed partitions
                    if (seen.incrementAndGet() >= limit && System.currentTimeMillis() - first.get() > 2000) {
                        say("BLOCKED " + System.currentTimeMillis() / 1000.0);
                        while (true) {
                            try {
                                Thread.sleep(200); // wedged processor
                            } catch (InterruptedException e) {
                                Thread.currentThread().interrupt();
                                return;
                            }
                        }
                    }
                });
        KafkaStreams streams = new KafkaStreams(b.build(), p);
        streams.setUncaughtExceptionHandler(e -> {
            say("DIED " + e); // why the client shuts down (the SLF4J logger prints nothing)
            return StreamsUncaughtExceptionHandler.StreamThreadExceptionResponse.SHUTDOWN_CLIENT;
        });
        streams.setStateListener((now, before) -> {
            if (now == KafkaStreams.State.RUNNING) {
                say("READY " + System.currentTimeMillis() / 1000.0);
            } else if (now == KafkaStreams.State.ERROR) {
                // No stream thread is left: exit, so that whoever runs this sees it died
                // instead of a live process that no longer consumes.
                say("EXIT error");
                Runtime.getRuntime().halt(3);
            }
        });
        Runtime.getRuntime().addShutdownHook(new Thread(() -> say("EXIT")));
        streams.start();
        Thread.currentThread().join();
    }
}
