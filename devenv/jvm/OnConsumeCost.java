import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.TopicPartition;
import dev.lagwatch.interceptor.LagwatchConsumerInterceptor;

/**
 * What the interceptor adds to every poll, alone: onConsume on a batch of 500 records from 4
 * partitions (kafka-clients 4.x, so with nextOffsets), a few million times after warming up.
 * Prints "ONCONSUME ns-per-poll" for the median of 7 rounds. For bench/interceptor_overhead.
 */
public final class OnConsumeCost {
    public static void main(String[] argv) {
        Map<TopicPartition, List<ConsumerRecord<byte[], byte[]>>> batch = new HashMap<>();
        Map<TopicPartition, OffsetAndMetadata> next = new HashMap<>();
        for (int p = 0; p < 4; p++) {
            TopicPartition tp = new TopicPartition("bench", p);
            List<ConsumerRecord<byte[], byte[]>> records = new ArrayList<>();
            for (int i = 0; i < 125; i++) {
                records.add(new ConsumerRecord<>("bench", p, i, null, new byte[100]));
            }
            batch.put(tp, records);
            next.put(tp, new OffsetAndMetadata(125));
        }
        ConsumerRecords<byte[], byte[]> records = new ConsumerRecords<>(batch, next);
        LagwatchConsumerInterceptor<byte[], byte[]> interceptor = new LagwatchConsumerInterceptor<>();
        // configured as in an application, but reporting never comes round during the measurement
        interceptor.configure(Map.of("group.id", "bench", "client.id", "bench", "bootstrap.servers",
                "127.0.0.1:9", "lagwatch.report.interval.ms", "3600000"));
        long sink = 0;
        double[] rounds = new double[7];
        int n = 2_000_000;
        for (int r = -2; r < rounds.length; r++) { // two warm-up rounds
            long t0 = System.nanoTime();
            for (int i = 0; i < n; i++) {
                sink += interceptor.onConsume(records).count();
            }
            if (r >= 0) {
                rounds[r] = (System.nanoTime() - t0) / (double) n;
            }
        }
        java.util.Arrays.sort(rounds);
        System.out.println("ONCONSUME " + rounds[rounds.length / 2] + " " + (sink > 0 ? interceptor.errors() : -1));
        interceptor.close();
    }
}
