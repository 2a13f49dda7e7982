// Single-file probe: asks Apache Kafka's own MirrorMaker 2 client classes about a cluster.
//
//   java -cp '<kafka jars>/*' -Dlog4j2.configurationFile=log4j2-stderr.properties MirrorProbe.java CMD ...
//
//   client    <bootstrap> <upstreamAlias>             MirrorClient: heartbeat/checkpoint/remote topics,
//                                                      upstream clusters, replication hops
//   translate <bootstrap> <remoteAlias> <group> [ms]  RemoteClusterUtils.translateOffsets
//   decode    <bootstrap> <topic> heartbeat|checkpoint|offset-sync
//                                                      every record of partition 0, deserialized with
//                                                      Apache's Heartbeat / Checkpoint / OffsetSync
//
// Output: one JSON object on stdout (logs go to stderr with the properties file next to this one).
// Extra client settings (e.g. replication.policy.class, security.protocol) may follow as key=value.

import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.TreeSet;

import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.connect.mirror.Checkpoint;
import org.apache.kafka.connect.mirror.Heartbeat;
import org.apache.kafka.connect.mirror.MirrorClient;
import org.apache.kafka.connect.mirror.OffsetSync;
import org.apache.kafka.connect.mirror.RemoteClusterUtils;

public class MirrorProbe {
    public static void main(String[] args) throws Exception {
        if (args.length < 2) {
            System.err.println("usage: MirrorProbe client|translate|decode <bootstrap> ...");
            System.exit(2);
        }
        switch (args[0]) {
            case "client" -> client(props(args, 3), args[2]);
            case "translate" -> translate(props(args, args.length > 4 && !args[4].contains("=") ? 5 : 4),
                    args[2], args[3], args.length > 4 && !args[4].contains("=") ? Long.parseLong(args[4]) : 20_000L);
            case "decode" -> decode(props(args, 4), args[2], args[3]);
            default -> {
                System.err.println("unknown command " + args[0]);
                System.exit(2);
            }
        }
    }

    static Map<String, Object> props(String[] args, int extrasFrom) {
        Map<String, Object> props = new HashMap<>();
        props.put("bootstrap.servers", args[1]);
        for (int i = extrasFrom; i < args.length; i++) {
            int eq = args[i].indexOf('=');
            if (eq > 0) props.put(args[i].substring(0, eq), args[i].substring(eq + 1));
        }
        return props;
    }

    static void client(Map<String, Object> props, String upstream) throws Exception {
        try (MirrorClient client = new MirrorClient(props)) {
            StringBuilder out = new StringBuilder("{");
            out.append("\"heartbeatTopics\":").append(strings(client.heartbeatTopics()));
            out.append(",\"checkpointTopics\":").append(strings(client.checkpointTopics()));
            out.append(",\"upstreamClusters\":").append(strings(client.upstreamClusters()));
            out.append(",\"remoteTopics\":").append(strings(client.remoteTopics()));
            out.append(",\"replicationHops\":").append(client.replicationHops(upstream));
            System.out.println(out.append("}"));
        }
    }

    static void translate(Map<String, Object> props, String remote, String group, long timeoutMs) throws Exception {
        Map<TopicPartition, OffsetAndMetadata> offsets =
                RemoteClusterUtils.translateOffsets(props, remote, group, Duration.ofMillis(timeoutMs));
        Map<String, Long> sorted = new TreeMap<>();
        offsets.forEach((tp, om) -> sorted.put(tp.topic() + ":" + tp.partition(), om.offset()));
        StringBuilder out = new StringBuilder("{");
        sorted.forEach((k, v) -> out.append(out.length() > 1 ? "," : "").append(quote(k)).append(':').append(v));
        System.out.println(out.append("}"));
    }

    static void decode(Map<String, Object> props, String topic, String kind) {
        props.put("enable.auto.commit", "false");
        TopicPartition partition = new TopicPartition(topic, 0);
        List<String> records = new ArrayList<>();
        int failures = 0;
        String firstError = null;
        List<String> failedOffsets = new ArrayList<>();
        try (KafkaConsumer<byte[], byte[]> consumer =
                     new KafkaConsumer<>(props, new ByteArrayDeserializer(), new ByteArrayDeserializer())) {
            consumer.assign(List.of(partition));
            consumer.seekToBeginning(List.of(partition));
            long end = consumer.endOffsets(List.of(partition)).get(partition);
            long deadline = System.currentTimeMillis() + 30_000;
            while (consumer.position(partition) < end && System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<byte[], byte[]> record : consumer.poll(Duration.ofMillis(500))) {
                    try {
                        records.add(render(kind, record));
                    } catch (RuntimeException e) {  // SchemaException and friends: counted, reported
                        failures++;
                        failedOffsets.add(Long.toString(record.offset()));
                        if (firstError == null) firstError = record.offset() + ": " + e;
                    }
                }
            }
        }
        System.out.println("{\"topic\":" + quote(topic) + ",\"decoded\":" + records.size() + ",\"failures\":" + failures
                + ",\"firstError\":" + (firstError == null ? "null" : quote(firstError))
                + ",\"failedOffsets\":[" + String.join(",", failedOffsets) + "]"
                + ",\"records\":[" + String.join(",", records) + "]}");
    }

    static String render(String kind, ConsumerRecord<byte[], byte[]> record) {
        return switch (kind) {
            case "heartbeat" -> {
                Heartbeat h = Heartbeat.deserializeRecord(record);
                yield "{\"source\":" + quote(h.sourceClusterAlias()) + ",\"target\":" + quote(h.targetClusterAlias())
                        + ",\"timestamp\":" + h.timestamp() + "}";
            }
            case "checkpoint" -> {
                Checkpoint c = Checkpoint.deserializeRecord(record);
                yield "{\"group\":" + quote(c.consumerGroupId()) + ",\"topic\":" + quote(c.topicPartition().topic())
                        + ",\"partition\":" + c.topicPartition().partition() + ",\"upstream\":" + c.upstreamOffset()
                        + ",\"downstream\":" + c.downstreamOffset() + ",\"metadata\":" + quote(c.metadata()) + "}";
            }
            case "offset-sync" -> {
                OffsetSync s = OffsetSync.deserializeRecord(record);
                yield "{\"topic\":" + quote(s.topicPartition().topic()) + ",\"partition\":" + s.topicPartition().partition()
                        + ",\"upstream\":" + s.upstreamOffset() + ",\"downstream\":" + s.downstreamOffset() + "}";
            }
            default -> throw new IllegalArgumentException("kind must be heartbeat, checkpoint or offset-sync");
        };
    }

    static String strings(Set<String> values) {
        List<String> quoted = new ArrayList<>();
        for (String v : new TreeSet<>(values)) quoted.add(quote(v));
        return "[" + String.join(",", quoted) + "]";
    }

    static String quote(String s) {
        StringBuilder out = new StringBuilder("\"");
        for (char ch : s.toCharArray()) {
            switch (ch) {
                case '"' -> out.append("\\\"");
                case '\\' -> out.append("\\\\");
                default -> {
                    if (ch < 0x20) out.append(String.format("\\u%04x", (int) ch));
                    else out.append(ch);
                }
            }
        }
        return out.append('"').toString();
    }
}
