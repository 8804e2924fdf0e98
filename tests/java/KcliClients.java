/*
 * Apache Kafka's Java clients (kafka-clients, kafka-streams) against a broker, for tests/test_java_clients.py.
 * Compiled at test time against the pinned jars; prints one JSON object per line for the test to judge.
 *
 *   java KcliClients clients BOOTSTRAP PREFIX REPLICATION   Admin, idempotent producers of every codec,
 *                                                         a transactional producer, a read_committed
 *                                                         classic-group consumer, Admin again
 *   java KcliClients streams BOOTSTRAP PREFIX STATE_DIR GUARANTEE...   a word count per processing guarantee
 *   java KcliClients txnv2 BOOTSTRAP PREFIX REPLICATION   transactions (commit, abort, commit, each with
 *                                                         the group's offsets) and, after each, the
 *                                                         producer id and epoch DescribeTransactions shows
 *   java KcliClients txnv2-failover BOOTSTRAP PREFIX RESUME_FILE   a transaction that pauses (prints
 *                                                         {"event": "paused"}) until RESUME_FILE exists,
 *                                                         then commits; an aborted one after it
 *   java KcliClients consumerProtocol BOOTSTRAP GROUP TOPIC   one group.protocol=consumer member: what
 *                                                         it reads, or the message it is refused with
 *   java KcliClients consumerGroup BOOTSTRAP GROUP TOPIC COUNT   two group.protocol=consumer members
 *                                                         read COUNT records, Admin describes the group,
 *                                                         a third member resumes from the commits
 *   java KcliClients mixedGroup BOOTSTRAP GROUP TOPIC COUNT   a classic member, then a consumer-protocol
 *                                                         one (KIP-848's upgrade), read COUNT records;
 *                                                         the second leaves (downgrade)
 *   java KcliClients members BOOTSTRAP GROUP TOPIC COUNT COMMIT_MS RECORD_US JOIN   COUNT
 *                                                         group.protocol=consumer members, a thread each,
 *                                                         committing in batches, that join at once (JOIN
 *                                                         now) or on a line "join" on stdin (JOIN stdin),
 *                                                         until a line "stop" there (see members)
 *   java KcliClients sessionReader BOOTSTRAP TOPIC PARTITIONS COUNT   a consumer with no group assigned every
 *                                                         partition reads COUNT records from the beginning
 *                                                         (printing them), prints {"event": "read"}, and
 *                                                         closes on a line "close" on stdin (its fetch
 *                                                         sessions closed with it, as KafkaConsumer.close does)
 *   java KcliClients produce BOOTSTRAP TOPIC PARTITIONS COUNT SIZE LINGER_MS   for tests/bench/bench_partitions.py:
 *                                                         an idempotent acks=all producer prints
 *                                                         {"event": "ready"} once it knows the topic, writes
 *                                                         COUNT records of SIZE bytes round-robin over the
 *                                                         partitions on a line "go" on stdin, and prints
 *                                                         {"records": COUNT, "seconds": ..., "errors": ...}
 *
 * A step that throws prints {"step": NAME, "error": ...} and the next step still runs, so one run shows
 * every failure at once. Timeouts are generous: the brokers share two cores with other processes.
 */

import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collection;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Properties;
import java.util.TreeMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.Future;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.Config;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.ConsumerGroupDescription;
import org.apache.kafka.clients.admin.DescribeClusterResult;
import org.apache.kafka.clients.admin.FinalizedVersionRange;
import org.apache.kafka.clients.admin.GroupListing;
import org.apache.kafka.clients.admin.ListOffsetsResult;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.admin.RecordsToDelete;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.admin.TransactionDescription;
import org.apache.kafka.clients.admin.TransactionListing;
import org.apache.kafka.clients.consumer.CommitFailedException;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerGroupMetadata;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.TopicPartitionInfo;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.errors.UnsupportedVersionException;
import org.apache.kafka.common.serialization.ByteArraySerializer;
import org.apache.kafka.common.serialization.LongDeserializer;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Grouped;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.state.Stores;

public final class KcliClients {
    static final ObjectMapper JSON = new ObjectMapper();
    static final String[] CODECS = {"none", "gzip", "snappy", "lz4", "zstd"};
    static final int PER_CODEC = 20;
    static final int DATA_PARTITIONS = 3;
    static final int TXN_BATCH = 5;
    static final Duration WAIT = Duration.ofSeconds(120);

    interface Step {
        void run() throws Exception;
    }

    /** Client properties every client here starts from (security.protocol, ssl.*, sasl.*), read from the
     * file after a leading --command-config: the same file Kafka's tools and kcli's --command-config read. */
    static final Properties COMMAND_CONFIG = new Properties();

    public static void main(String[] argv) throws Exception {
        String[] args = argv;
        if (args.length > 1 && args[0].equals("--command-config")) {
            try (var in = java.nio.file.Files.newInputStream(java.nio.file.Path.of(args[1]))) {
                COMMAND_CONFIG.load(in);
            }
            args = Arrays.copyOfRange(args, 2, args.length);
        }
        run(args);
        emit("event", "done");
    }

    static void run(String[] args) throws Exception {
        switch (args[0]) {
            case "clients" -> clients(args[1], args[2], Short.parseShort(args[3]));
            case "txnv2" -> transactionsV2(args[1], args[2], Short.parseShort(args[3]));
            case "txnv2-failover" -> transactionsV2Failover(args[1], args[2], java.nio.file.Path.of(args[3]));
            case "streams" -> {
                for (String guarantee : Arrays.copyOfRange(args, 4, args.length)) {
                    step("streams-" + guarantee, () -> wordCount(args[1], args[2] + "-" + guarantee.replace('_', '-'),
                            args[3], guarantee));
                }
            }
            case "consumerProtocol" -> step("consumerProtocol", () -> consumerProtocol(args[1], args[2], args[3]));
            case "consumerGroup" -> step("consumerGroup",
                    () -> consumerGroup(args[1], args[2], args[3], Integer.parseInt(args[4])));
            case "mixedGroup" -> step("mixedGroup",
                    () -> mixedGroup(args[1], args[2], args[3], Integer.parseInt(args[4])));
            case "members" -> members(args[1], args[2], args[3], Integer.parseInt(args[4]), Long.parseLong(args[5]),
                    Long.parseLong(args[6]), args[7].equals("stdin"));
            case "sessionReader" -> sessionReader(args[1], args[2], Integer.parseInt(args[3]), Integer.parseInt(args[4]));
            case "produce" -> produce(args[1], args[2], Integer.parseInt(args[3]), Long.parseLong(args[4]),
                    Integer.parseInt(args[5]), args[6]);
            default -> throw new IllegalArgumentException("unknown command " + args[0]);
        }
    }

    /** Print one JSON line from alternating keys and values. */
    static void emit(Object... keysAndValues) {
        Map<String, Object> line = new LinkedHashMap<>();
        for (int i = 0; i < keysAndValues.length; i += 2) {
            line.put((String) keysAndValues[i], keysAndValues[i + 1]);
        }
        try {
            System.out.println(JSON.writeValueAsString(line));
            System.out.flush();
        } catch (Exception e) {
            throw new RuntimeException(e);
        }
    }

    /** Run one step; an exception becomes an error line (with its causes), and the run goes on. */
    static void step(String name, Step step) {
        try {
            step.run();
        } catch (Throwable t) {
            List<String> causes = new ArrayList<>();
            for (Throwable c = t; c != null && causes.size() < 5; c = c.getCause()) {
                causes.add(c.getClass().getName() + ": " + c.getMessage());
            }
            emit("step", name, "error", String.join(" <- ", causes));
        }
    }

    static Properties common(String bootstrap) {
        Properties p = new Properties();
        p.putAll(COMMAND_CONFIG);
        p.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(AdminClientConfig.REQUEST_TIMEOUT_MS_CONFIG, "60000");
        p.put(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, "120000");
        return p;
    }

    static Properties producerConfig(String bootstrap) {
        Properties p = common(bootstrap);
        p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        p.put(ProducerConfig.ACKS_CONFIG, "all");
        p.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "true");
        p.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, "180000");
        p.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, "120000");
        p.put(ProducerConfig.LINGER_MS_CONFIG, "20");
        return p;
    }

    static Properties consumerConfig(String bootstrap, String group) {
        Properties p = common(bootstrap);
        p.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        p.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        p.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        p.put(ConsumerConfig.GROUP_PROTOCOL_CONFIG, "classic");
        p.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed");
        p.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        p.put(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG, "30000");
        p.put(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG, "3000");
        return p;
    }

    // --- clients --------------------------------------------------------------------------------------

    static void clients(String bootstrap, String prefix, short replication) throws Exception {
        String data = prefix + "-data", txn = prefix + "-txn", group = prefix + "-group", txnId = prefix + "-tid";
        try (Admin admin = Admin.create(common(bootstrap))) {
            step("createTopics", () -> {
                Map<String, String> configs = Map.of("min.insync.replicas", replication > 1 ? "2" : "1");
                admin.createTopics(List.of(
                        new NewTopic(data, DATA_PARTITIONS, replication).configs(configs),
                        new NewTopic(txn, 1, replication).configs(configs))).all().get();
                emit("step", "createTopics", "topics", List.of(data, txn));
            });
            step("describeCluster", () -> {
                DescribeClusterResult cluster = admin.describeCluster();
                List<Integer> ids = new ArrayList<>();
                cluster.nodes().get().forEach(n -> ids.add(n.id()));
                ids.sort(null);
                emit("step", "describeCluster", "clusterId", cluster.clusterId().get(), "nodes", ids,
                        "controller", cluster.controller().get().id());
            });
            step("produce", () -> produceEveryCodec(bootstrap, data));
            step("transactions", () -> transactions(bootstrap, txn, txnId));
            step("consume", () -> consume(bootstrap, group, List.of(data, txn)));
            step("describeTopics", () -> {
                Map<String, TopicDescription> topics = admin.describeTopics(List.of(data, txn)).allTopicNames().get();
                for (TopicDescription d : topics.values()) {
                    List<Map<String, Object>> partitions = new ArrayList<>();
                    for (TopicPartitionInfo p : d.partitions()) {
                        partitions.add(Map.of("partition", p.partition(), "leader", p.leader().id(),
                                "replicas", p.replicas().stream().map(n -> n.id()).toList(),
                                "isr", p.isr().stream().map(n -> n.id()).toList()));
                    }
                    emit("step", "describeTopics", "topic", d.name(), "internal", d.isInternal(),
                            "topicId", d.topicId().toString(), "partitions", partitions);
                }
            });
            step("listOffsets", () -> emit("step", "listOffsets", "earliest", offsets(admin, data, OffsetSpec.earliest()),
                    "latest", offsets(admin, data, OffsetSpec.latest()),
                    "maxTimestamp", offsets(admin, data, OffsetSpec.maxTimestamp()),
                    "txnLatest", offsets(admin, txn, OffsetSpec.latest())));
            step("describeConfigs", () -> {
                // A BROKER resource goes to that broker: each answers with its own log.dirs.
                List<ConfigResource> resources = new ArrayList<>();
                ConfigResource topic = new ConfigResource(ConfigResource.Type.TOPIC, data);
                resources.add(topic);
                for (org.apache.kafka.common.Node node : admin.describeCluster().nodes().get()) {
                    resources.add(new ConfigResource(ConfigResource.Type.BROKER, node.idString()));
                }
                Map<ConfigResource, Config> configs = admin.describeConfigs(resources).all().get();
                Map<String, Object> chosen = new TreeMap<>();
                for (String name : List.of("min.insync.replicas", "cleanup.policy", "compression.type")) {
                    ConfigEntry e = configs.get(topic).get(name);
                    chosen.put(name, List.of(e.value(), e.source().toString()));
                }
                Map<String, Object> logDirs = new TreeMap<>();
                for (ConfigResource r : resources) {
                    if (r.type() == ConfigResource.Type.BROKER) {
                        ConfigEntry e = configs.get(r).get("log.dirs");
                        logDirs.put(r.name(), List.of(configs.get(r).entries().size(), e == null ? "" : e.value()));
                    }
                }
                emit("step", "describeConfigs", "topic", chosen, "brokers", logDirs);
            });
            step("deleteRecords", () -> {
                TopicPartition tp = new TopicPartition(data, 0);
                long low = admin.deleteRecords(Map.of(tp, RecordsToDelete.beforeOffset(5))).lowWatermarks().get(tp)
                        .get().lowWatermark();
                emit("step", "deleteRecords", "lowWatermark", low,
                        "earliest", offsets(admin, data, OffsetSpec.earliest()).get("0"));
            });
            step("groups", () -> {
                List<Map<String, Object>> listed = new ArrayList<>();
                for (GroupListing g : admin.listGroups().all().get()) {
                    if (g.groupId().equals(group)) {
                        listed.add(Map.of("groupId", g.groupId(), "type", String.valueOf(g.type().orElse(null)),
                                "protocol", g.protocol(), "state", String.valueOf(g.groupState().orElse(null))));
                    }
                }
                List<String> consumerGroups = new ArrayList<>();
                admin.listConsumerGroups().all().get().forEach(g -> consumerGroups.add(g.groupId()));
                ConsumerGroupDescription d = admin.describeConsumerGroups(List.of(group)).all().get().get(group);
                Map<String, Long> committed = new TreeMap<>();
                for (Map.Entry<TopicPartition, OffsetAndMetadata> e
                        : admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata().get().entrySet()) {
                    committed.put(e.getKey().toString(), e.getValue().offset());
                }
                emit("step", "groups", "listGroups", listed, "inListConsumerGroups", consumerGroups.contains(group),
                        "describe", Map.of("state", d.groupState().toString(), "type", d.type().toString(),
                                "members", d.members().size(), "coordinator", d.coordinator().id()),
                        "committed", committed);
            });
            step("consumerProtocol", () -> consumerProtocol(bootstrap, group + "-consumer-protocol", data));
            step("transactionsAdmin", () -> {
                List<Map<String, Object>> listed = new ArrayList<>();
                for (TransactionListing t : admin.listTransactions().all().get()) {
                    if (t.transactionalId().equals(txnId)) {
                        listed.add(Map.of("id", t.transactionalId(), "state", t.state().toString()));
                    }
                }
                TransactionDescription d = admin.describeTransactions(List.of(txnId)).all().get().get(txnId);
                emit("step", "transactionsAdmin", "listed", listed, "state", d.state().toString(),
                        "topicPartitions", d.topicPartitions().size());
            });
        }
    }

    static Map<String, Long> offsets(Admin admin, String topic, OffsetSpec spec) throws Exception {
        Map<TopicPartition, OffsetSpec> request = new HashMap<>();
        int partitions = admin.describeTopics(List.of(topic)).allTopicNames().get().get(topic).partitions().size();
        for (int p = 0; p < partitions; p++) {
            request.put(new TopicPartition(topic, p), spec);
        }
        Map<String, Long> out = new TreeMap<>();
        for (Map.Entry<TopicPartition, ListOffsetsResult.ListOffsetsResultInfo> e
                : admin.listOffsets(request).all().get().entrySet()) {
            out.put(String.valueOf(e.getKey().partition()), e.getValue().offset());
        }
        return out;
    }

    /** One idempotent acks=all producer per codec, PER_CODEC records spread over the partitions. */
    static void produceEveryCodec(String bootstrap, String topic) throws Exception {
        for (String codec : CODECS) {
            Properties p = producerConfig(bootstrap);
            p.put(ProducerConfig.COMPRESSION_TYPE_CONFIG, codec);
            try (KafkaProducer<String, String> producer = new KafkaProducer<>(p)) {
                List<Future<RecordMetadata>> sent = new ArrayList<>();
                for (int i = 0; i < PER_CODEC; i++) {
                    sent.add(producer.send(new ProducerRecord<>(topic, i % DATA_PARTITIONS, codec + "-" + i,
                            codec + "-value-" + i + "-" + "x".repeat(200))));
                }
                List<Long> offsets = new ArrayList<>();
                for (Future<RecordMetadata> f : sent) {
                    offsets.add(f.get().offset());
                }
                emit("step", "produce", "codec", codec, "acked", sent.size(), "offsets", offsets);
            }
        }
    }

    /** Commit a batch, abort a batch, commit another: read_committed must see only the committed ones. */
    static void transactions(String bootstrap, String topic, String txnId) throws Exception {
        Properties p = producerConfig(bootstrap);
        p.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, txnId);
        p.put(ProducerConfig.TRANSACTION_TIMEOUT_CONFIG, "120000");
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(p)) {
            producer.initTransactions();
            for (String outcome : List.of("commit", "abort", "commit")) {
                producer.beginTransaction();
                for (int i = 0; i < TXN_BATCH; i++) {
                    producer.send(new ProducerRecord<>(topic, 0, "txn", outcome + "-" + i));
                }
                producer.flush();
                if (outcome.equals("commit")) {
                    producer.commitTransaction();
                } else {
                    producer.abortTransaction();
                }
                emit("step", "transactions", "outcome", outcome, "records", TXN_BATCH);
            }
        }
    }

    // --- transactions at transaction.version 2 ------------------------------------------------------------

    static void transactionsV2(String bootstrap, String prefix, short replication) throws Exception {
        String in = prefix + "-in", out = prefix + "-out", group = prefix + "-group", txnId = prefix + "-tid";
        try (Admin admin = Admin.create(common(bootstrap))) {
            step("createTopics", () -> {
                Map<String, String> configs = Map.of("min.insync.replicas", replication > 1 ? "2" : "1");
                admin.createTopics(List.of(
                        new NewTopic(in, 1, replication).configs(configs),
                        new NewTopic(out, 2, replication).configs(configs))).all().get();
            });
            step("features", () -> {
                FinalizedVersionRange tv = admin.describeFeatures().featureMetadata().get()
                        .finalizedFeatures().get("transaction.version");
                emit("step", "features", "transactionVersion", tv == null ? 0 : tv.maxVersionLevel());
            });
            step("transactions", () -> {
                try (KafkaProducer<String, String> producer = initTransactional(bootstrap, admin, txnId)) {
                    long round = 0;
                    for (String outcome : List.of("commit", "abort", "commit")) {
                        round++;
                        producer.beginTransaction();
                        for (int i = 0; i < TXN_BATCH; i++) {
                            producer.send(new ProducerRecord<>(out, i % 2, "txn", outcome + round + "-" + i));
                        }
                        producer.sendOffsetsToTransaction(
                                Map.of(new TopicPartition(in, 0), new OffsetAndMetadata(10 * round)),
                                new ConsumerGroupMetadata(group));
                        producer.flush();
                        if (outcome.equals("commit")) {
                            producer.commitTransaction();
                        } else {
                            producer.abortTransaction();
                        }
                        describeTxn(admin, txnId, outcome);
                    }
                }
            });
            step("readCommitted", () -> emit("step", "readCommitted", "values", readCommitted(bootstrap, out, 2)));
            step("offsets", () -> {
                OffsetAndMetadata committed = admin.listConsumerGroupOffsets(group)
                        .partitionsToOffsetAndMetadata().get().get(new TopicPartition(in, 0));
                emit("step", "offsets", "offset", committed == null ? -1 : committed.offset());
            });
        }
    }

    /** A transaction held open while the test kills its coordinator, then committed; one aborted after. */
    static void transactionsV2Failover(String bootstrap, String prefix, java.nio.file.Path resume) throws Exception {
        String out = prefix + "-out", txnId = prefix + "-tid";
        try (Admin admin = Admin.create(common(bootstrap))) {
            step("createTopics", () -> admin.createTopics(List.of(
                    new NewTopic(out, 2, (short) 3).configs(Map.of("min.insync.replicas", "2")))).all().get());
            step("failover", () -> {
                try (KafkaProducer<String, String> producer = initTransactional(bootstrap, admin, txnId)) {
                    producer.beginTransaction();
                    for (int i = 0; i < TXN_BATCH; i++) {
                        producer.send(new ProducerRecord<>(out, i % 2, "txn", "before-" + i));
                    }
                    producer.flush();
                    emit("event", "paused");
                    long deadline = System.nanoTime() + WAIT.toNanos();
                    while (!java.nio.file.Files.exists(resume) && System.nanoTime() < deadline) {
                        Thread.sleep(100);
                    }
                    for (int i = 0; i < TXN_BATCH; i++) {
                        producer.send(new ProducerRecord<>(out, i % 2, "txn", "after-" + i));
                    }
                    producer.commitTransaction();
                    describeTxn(admin, txnId, "commit");
                    producer.beginTransaction();
                    for (int i = 0; i < TXN_BATCH; i++) {
                        producer.send(new ProducerRecord<>(out, i % 2, "txn", "aborted-" + i));
                    }
                    producer.flush();
                    producer.abortTransaction();
                    describeTxn(admin, txnId, "abort");
                }
            });
            step("readCommitted", () -> emit("step", "readCommitted", "values", readCommitted(bootstrap, out, 2)));
        }
    }

    /** A transactional producer after initTransactions, its producer id and epoch printed. */
    static KafkaProducer<String, String> initTransactional(String bootstrap, Admin admin, String txnId)
            throws Exception {
        Properties p = producerConfig(bootstrap);
        p.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, txnId);
        p.put(ProducerConfig.TRANSACTION_TIMEOUT_CONFIG, "120000");
        KafkaProducer<String, String> producer = new KafkaProducer<>(p);
        producer.initTransactions();
        describeTxn(admin, txnId, "init");
        return producer;
    }

    /** DescribeTransactions once the transaction has completed: its state, producer id and epoch. */
    static void describeTxn(Admin admin, String txnId, String label) throws Exception {
        long deadline = System.nanoTime() + WAIT.toNanos();
        TransactionDescription d;
        do {
            d = admin.describeTransactions(List.of(txnId)).all().get().get(txnId);
        } while (d.state().toString().startsWith("Prepare") && System.nanoTime() < deadline);
        emit("step", "txn", "after", label, "state", d.state().toString(), "producerId", d.producerId(),
                "producerEpoch", d.producerEpoch());
    }

    /** Every record read_committed sees in the partitions of `topic`, up to their end offsets. */
    static List<String> readCommitted(String bootstrap, String topic, int partitions) {
        Properties p = consumerConfig(bootstrap, topic + "-reader");
        List<TopicPartition> tps = new ArrayList<>();
        for (int i = 0; i < partitions; i++) {
            tps.add(new TopicPartition(topic, i));
        }
        List<String> values = new ArrayList<>();
        try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(p)) {
            consumer.assign(tps);
            consumer.seekToBeginning(tps);
            Map<TopicPartition, Long> ends = consumer.endOffsets(tps);
            long deadline = System.nanoTime() + WAIT.toNanos();
            while (tps.stream().anyMatch(tp -> consumer.position(tp) < ends.get(tp)) && System.nanoTime() < deadline) {
                for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(500))) {
                    values.add(r.value());
                }
            }
        }
        values.sort(null);
        return values;
    }

    /** A classic-protocol, read_committed group member reads until every committed record is in. */
    static void consume(String bootstrap, String group, List<String> topics) throws Exception {
        int expected = CODECS.length * PER_CODEC + 2 * TXN_BATCH;
        List<String> values = new ArrayList<>();
        Map<String, Long> positions = new TreeMap<>();
        try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(consumerConfig(bootstrap, group))) {
            consumer.subscribe(topics);
            long deadline = System.nanoTime() + WAIT.toNanos();
            while (values.size() < expected && System.nanoTime() < deadline) {
                for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(500))) {
                    values.add(r.topic().endsWith("-txn") ? r.value() : r.value().split("-x")[0]);
                }
            }
            // A last poll: anything beyond `expected` (an aborted record leaking through) must show too.
            for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofSeconds(1))) {
                values.add(r.topic().endsWith("-txn") ? r.value() : r.value().split("-x")[0]);
            }
            consumer.commitSync();
            for (TopicPartition tp : consumer.assignment()) {
                positions.put(tp.toString(), consumer.position(tp));
            }
        }
        emit("step", "consume", "values", values, "positions", positions);
    }

    /**
     * A member with group.protocol=consumer (KIP-848): the records it reads, or the message it is refused
     * with where the cluster's group.version is 0 (kcli's default metadata.version leaves it there).
     */
    static void consumerProtocol(String bootstrap, String group, String topic) throws Exception {
        Properties p = consumerConfig(bootstrap, group);
        p.put(ConsumerConfig.GROUP_PROTOCOL_CONFIG, "consumer");
        p.remove(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG); // the broker's to set under this protocol
        p.remove(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG);
        int records = 0;
        String refused = null;
        try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(p)) {
            consumer.subscribe(List.of(topic));
            long deadline = System.nanoTime() + WAIT.toNanos();
            while (refused == null && records == 0 && System.nanoTime() < deadline) {
                try {
                    records += consumer.poll(Duration.ofMillis(500)).count();
                } catch (UnsupportedVersionException e) {
                    refused = e.getMessage();
                }
            }
        }
        emit("step", "consumerProtocol", "records", records, "refused", refused);
    }

    /**
     * Two members with group.protocol=consumer (KIP-848) read COUNT records between them and commit;
     * Admin describes the group (ConsumerGroupDescribe); once both left, a third member of the group
     * starts from the committed offsets and reads nothing more.
     */
    static void consumerGroup(String bootstrap, String group, String topic, int count) throws Exception {
        Properties p = consumerConfig(bootstrap, group);
        p.put(ConsumerConfig.GROUP_PROTOCOL_CONFIG, "consumer");
        p.remove(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG);
        p.remove(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG);
        List<String> values = new ArrayList<>();
        List<List<String>> assignments = new ArrayList<>();
        Map<String, Object> described = new LinkedHashMap<>();
        try (KafkaConsumer<String, String> first = new KafkaConsumer<>(p);
             KafkaConsumer<String, String> second = new KafkaConsumer<>(p);
             Admin admin = Admin.create(common(bootstrap))) {
            for (KafkaConsumer<String, String> c : List.of(first, second)) {
                c.subscribe(List.of(topic), new ConsumerRebalanceListener() {
                    @Override
                    public void onPartitionsRevoked(Collection<TopicPartition> partitions) {
                        // what it read of them, before the other member owns them: without a listener the
                        // consumer drops a revoked partition's position, possibly between a poll and the
                        // commitSync after it, and the other member reads those records again
                        c.commitSync();
                    }

                    @Override
                    public void onPartitionsAssigned(Collection<TopicPartition> partitions) {
                    }
                });
            }
            long deadline = System.nanoTime() + WAIT.toNanos();
            while (System.nanoTime() < deadline
                    && (values.size() < count || first.assignment().isEmpty() || second.assignment().isEmpty()
                        || first.assignment().size() + second.assignment().size() < 4)) {
                for (KafkaConsumer<String, String> c : List.of(first, second)) {
                    var records = c.poll(Duration.ofMillis(200));
                    records.forEach(r -> values.add(r.value()));
                    if (!records.isEmpty()) {
                        c.commitSync(); // before a later poll may hand these partitions to the other member
                    }
                }
            }
            for (KafkaConsumer<String, String> c : List.of(first, second)) {
                c.commitSync();
                List<String> partitions = new ArrayList<>();
                c.assignment().forEach(tp -> partitions.add(tp.toString()));
                partitions.sort(null);
                assignments.add(partitions);
            }
            ConsumerGroupDescription d = admin.describeConsumerGroups(List.of(group)).all().get().get(group);
            int assigned = 0;
            for (var m : d.members()) {
                assigned += m.assignment().topicPartitions().size();
            }
            described.put("type", d.type().toString());
            described.put("state", d.groupState().toString());
            described.put("members", d.members().size());
            described.put("assigned", assigned);
            described.put("assignor", d.partitionAssignor());
        }
        int resumed = 0;
        try (KafkaConsumer<String, String> third = new KafkaConsumer<>(p)) {
            third.subscribe(List.of(topic));
            long until = System.nanoTime() + Duration.ofSeconds(8).toNanos();
            while (System.nanoTime() < until) {
                resumed += third.poll(Duration.ofMillis(200)).count();
            }
            emit("step", "consumerGroup", "values", values, "assignments", assignments, "describe", described,
                    "resumed", resumed, "thirdAssignment", third.assignment().size());
        }
    }

    /**
     * KIP-848's migration with Kafka's own consumers: a classic member takes every partition; a
     * consumer-protocol member joins (the group becomes a consumer group) and the two read COUNT records,
     * committing as they go; when the consumer-protocol member has left, the group is classic again and
     * the classic member holds every partition. Admin's type of the group at each stage.
     */
    static void mixedGroup(String bootstrap, String group, String topic, int count) throws Exception {
        Properties classic = consumerConfig(bootstrap, group);
        Properties modern = consumerConfig(bootstrap, group);
        modern.put(ConsumerConfig.GROUP_PROTOCOL_CONFIG, "consumer");
        modern.remove(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG);
        modern.remove(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG);
        List<String> values = new ArrayList<>();
        List<String> types = new ArrayList<>();
        List<Integer> assignments = new ArrayList<>();
        try (KafkaConsumer<String, String> old = new KafkaConsumer<>(classic);
             Admin admin = Admin.create(common(bootstrap))) {
            old.subscribe(List.of(topic));
            long deadline = System.nanoTime() + WAIT.toNanos();
            while (System.nanoTime() < deadline && old.assignment().size() < 4) {
                old.poll(Duration.ofMillis(200)).forEach(r -> values.add(r.value()));
                old.commitSync();
            }
            types.add(admin.describeConsumerGroups(List.of(group)).all().get().get(group).type().toString());
            try (KafkaConsumer<String, String> neu = new KafkaConsumer<>(modern)) {
                neu.subscribe(List.of(topic));
                while (System.nanoTime() < deadline
                        && (values.size() < count || old.assignment().isEmpty() || neu.assignment().isEmpty())) {
                    for (KafkaConsumer<String, String> c : List.of(old, neu)) {
                        var records = c.poll(Duration.ofMillis(200));
                        records.forEach(r -> values.add(r.value()));
                        if (!records.isEmpty()) {
                            c.commitSync();
                        }
                    }
                }
                types.add(admin.describeConsumerGroups(List.of(group)).all().get().get(group).type().toString());
                assignments.add(old.assignment().size());
                assignments.add(neu.assignment().size());
                old.commitSync();
                neu.commitSync();
            }
            while (System.nanoTime() < deadline && old.assignment().size() < 4) {
                old.poll(Duration.ofMillis(200)).forEach(r -> values.add(r.value()));
            }
            types.add(admin.describeConsumerGroups(List.of(group)).all().get().get(group).type().toString());
            assignments.add(old.assignment().size());
        }
        emit("step", "mixedGroup", "values", values, "types", types, "assignments", assignments);
    }

    /** tests/test_fetch_sessions.py: Kafka's Java consumer keeps a KIP-227 session with the broker while it
     * reads (its FetchSessionHandler), and closes it when it closes; the test looks at the broker's slots
     * between the "read" line and the "close" one. */
    static void sessionReader(String bootstrap, String topic, int partitions, int count) throws Exception {
        Properties p = common(bootstrap);
        p.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        p.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        p.put(ConsumerConfig.FETCH_MAX_WAIT_MS_CONFIG, "100");
        List<TopicPartition> assigned = new ArrayList<>();
        for (int i = 0; i < partitions; i++) {
            assigned.add(new TopicPartition(topic, i));
        }
        List<List<Object>> read = new ArrayList<>();
        try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(p);
                BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8))) {
            consumer.assign(assigned);
            consumer.seekToBeginning(assigned);
            long deadline = System.nanoTime() + WAIT.toNanos();
            while (read.size() < count && System.nanoTime() < deadline) {
                for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(200))) {
                    read.add(List.of(r.partition(), r.offset(), r.value()));
                }
            }
            emit("records", read);
            consumer.poll(Duration.ofMillis(300)); // one more incremental fetch, caught up
            emit("event", "read");
            while (true) {
                String line = in.readLine();
                if (line == null || line.strip().equals("close")) {
                    break;
                }
            }
        }
        emit("event", "closed");
    }

    /** The measured phase of bench_partitions' Java rows: one producer as Kafka's own clients batch, every
     * partition led by a broker in one ProduceRequest to it (librdkafka sends one partition per request). The
     * producer is made and has the topic's metadata before "ready", so the bench times only the writes. */
    static void produce(String bootstrap, String topic, int partitions, long count, int size, String lingerMs)
            throws Exception {
        Properties p = common(bootstrap);
        p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        p.put(ProducerConfig.ACKS_CONFIG, "all");
        p.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "true");
        p.put(ProducerConfig.LINGER_MS_CONFIG, lingerMs);
        byte[] value = new byte[size];
        new java.util.Random(1).nextBytes(value);
        AtomicLong errors = new AtomicLong();
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(p);
                BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8))) {
            producer.partitionsFor(topic);
            emit("event", "ready");
            if (!"go".equals(in.readLine())) {
                return;
            }
            long began = System.nanoTime();
            for (long i = 0; i < count; i++) {
                producer.send(new ProducerRecord<>(topic, (int) (i % partitions), null, value), (meta, error) -> {
                    if (error != null) {
                        errors.incrementAndGet();
                    }
                });
            }
            producer.flush();
            emit("records", count, "seconds", (System.nanoTime() - began) / 1e9, "errors", errors.get());
        }
    }

    /**
     * COUNT members of GROUP with group.protocol=consumer (KIP-848) in this JVM, a thread and a KafkaConsumer
     * each, subscribed to TOPIC (auto.offset.reset=earliest, no auto-commit) at once or, with `onJoin`, once
     * a line "join" came on stdin (the JVM's start-up, seconds on two cores, paid before). Each commits what
     * it read with commitSync every COMMIT_MS, in onPartitionsRevoked (before the revocation is acknowledged)
     * and before it closes, once a line "stop" (or the end of stdin) has come. It spends RECORD_US on each
     * record.
     *
     * Every line a member prints carries "m": its index, and one of {"member": id} once it has a member
     * id, {"assigned": [partitions]} when its assignment changed, {"read": [partition, offset]} as each
     * record is handed to it, {"revoked": [partitions]} as onPartitionsRevoked begins (its commit follows),
     * {"committing": [[partition, next offset], ...]} before each commit, {"committed": [...]} once it
     * succeeded, {"commit_failed": message} when it did not (see commitPending), {"lost": [partitions]}
     * when partitions were lost (a fenced member: no commit), {"closed": true} once closed, {"error":
     * message} when its thread failed. As tests/group_member.py --commit-ms reports for librdkafka.
     */
    static void members(String bootstrap, String group, String topic, int count, long commitMs, long recordMicros,
                        boolean onJoin) throws Exception {
        AtomicBoolean stop = new AtomicBoolean();
        CountDownLatch join = new CountDownLatch(onJoin ? 1 : 0);
        Thread stdin = new Thread(() -> {
            try (BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8))) {
                String line;
                while ((line = in.readLine()) != null && !line.strip().equals("stop")) {
                    if (line.strip().equals("join")) {
                        join.countDown();
                    }
                }
            } catch (Exception e) {
                // the end of stdin either way
            }
            stop.set(true);
            join.countDown();
        }, "stdin");
        stdin.setDaemon(true);
        stdin.start();
        Properties p = consumerConfig(bootstrap, group);
        p.put(ConsumerConfig.GROUP_PROTOCOL_CONFIG, "consumer");
        p.remove(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG); // the broker's to set under this protocol
        p.remove(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG);
        // Small polls and partition fetches: a member reads its partitions in turns of a few dozen records
        // (a revocation finds reads to commit) and polls, so runs onPartitionsRevoked, every ~75 ms.
        p.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, "50");
        p.put(ConsumerConfig.MAX_PARTITION_FETCH_BYTES_CONFIG, "1024");
        List<Thread> threads = new ArrayList<>();
        for (int i = 0; i < count; i++) {
            int index = i;
            Properties own = new Properties();
            own.putAll(p);
            own.put(ConsumerConfig.CLIENT_ID_CONFIG, group + "-" + index);
            Thread t = new Thread(() -> {
                try {
                    member(index, own, topic, commitMs, recordMicros, join, stop);
                } catch (Throwable e) {
                    emit("m", index, "error", e.getClass().getName() + ": " + e.getMessage());
                }
            }, "member-" + index);
            t.start();
            threads.add(t);
        }
        for (Thread t : threads) {
            t.join();
        }
    }

    /** One member of `members`, on its own thread until `stop`. */
    static void member(int index, Properties p, String topic, long commitMs, long recordMicros, CountDownLatch join,
                       AtomicBoolean stop) {
        Map<Integer, Long> pending = new TreeMap<>(); // partition -> next offset, read but not yet committed
        try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(p)) {
            join.await();
            consumer.subscribe(List.of(topic), new ConsumerRebalanceListener() {
                @Override
                public void onPartitionsRevoked(Collection<TopicPartition> partitions) {
                    List<Integer> revoked = partitions.stream().map(TopicPartition::partition).sorted().toList();
                    emit("m", index, "revoked", revoked);
                    commitPending(index, consumer, topic, pending, revoked);
                    revoked.forEach(pending::remove); // never committed again once another member owns it
                }

                @Override
                public void onPartitionsAssigned(Collection<TopicPartition> partitions) {
                }

                @Override
                public void onPartitionsLost(Collection<TopicPartition> partitions) {
                    List<Integer> lost = partitions.stream().map(TopicPartition::partition).sorted().toList();
                    lost.forEach(pending::remove);
                    emit("m", index, "lost", lost);
                }
            });
            List<Integer> assigned = null;
            String memberId = "";
            long lastCommit = System.nanoTime();
            while (!stop.get()) {
                ConsumerRecords<String, String> records = consumer.poll(Duration.ofMillis(100));
                List<Integer> now = consumer.assignment().stream().map(TopicPartition::partition).sorted().toList();
                if (!now.equals(assigned)) {
                    assigned = now;
                    emit("m", index, "assigned", now);
                }
                if (memberId.isEmpty() && !consumer.groupMetadata().memberId().isEmpty()) {
                    memberId = consumer.groupMetadata().memberId();
                    emit("m", index, "member", memberId);
                }
                for (ConsumerRecord<String, String> r : records) {
                    emit("m", index, "read", List.of(r.partition(), r.offset()));
                    if (recordMicros > 0) {
                        Thread.sleep(recordMicros / 1000, (int) (recordMicros % 1000) * 1000);
                    }
                    pending.put(r.partition(), r.offset() + 1);
                    if (System.nanoTime() - lastCommit >= commitMs * 1_000_000) {
                        commitPending(index, consumer, topic, pending, List.copyOf(pending.keySet()));
                        lastCommit = System.nanoTime();
                    }
                }
                if (!pending.isEmpty() && System.nanoTime() - lastCommit >= commitMs * 1_000_000) {
                    commitPending(index, consumer, topic, pending, List.copyOf(pending.keySet()));
                    lastCommit = System.nanoTime();
                }
            }
            commitPending(index, consumer, topic, pending, List.copyOf(pending.keySet()));
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
        emit("m", index, "closed", true);
    }

    /**
     * commitSync of what `pending` holds for `partitions`; what was committed leaves `pending`. A commit
     * refused with a stale member epoch (it crossed the heartbeat answer that bumped the epoch, as Kafka's
     * coordinator refuses it too) is sent again, as the error tells the member to, once the heartbeat
     * thread has had time to take the new epoch: the partitions are still this member's until a poll
     * acknowledges their revocation.
     */
    static void commitPending(int index, KafkaConsumer<String, String> consumer, String topic,
                              Map<Integer, Long> pending, List<Integer> partitions) {
        Map<TopicPartition, OffsetAndMetadata> offsets = new LinkedHashMap<>();
        List<List<Long>> sent = new ArrayList<>();
        for (int partition : partitions) {
            Long next = pending.get(partition);
            if (next != null) {
                offsets.put(new TopicPartition(topic, partition), new OffsetAndMetadata(next));
                sent.add(List.of((long) partition, next));
            }
        }
        if (offsets.isEmpty()) {
            return;
        }
        for (int attempt = 1; ; attempt++) {
            emit("m", index, "committing", sent);
            try {
                consumer.commitSync(offsets, WAIT);
                break;
            } catch (KafkaException e) {
                emit("m", index, "commit_failed", e.getClass().getName() + ": " + e.getMessage());
                boolean stale = e instanceof CommitFailedException
                        && String.valueOf(e.getMessage()).contains("stale member epoch");
                if (!stale || attempt == 50) {
                    return;
                }
            }
            try {
                Thread.sleep(100);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                return;
            }
        }
        for (var e : offsets.entrySet()) {
            pending.remove(e.getKey().partition(), e.getValue().offset());
        }
        emit("m", index, "committed", sent);
    }

    // --- streams --------------------------------------------------------------------------------------

    /** Lines in, a word count out (through a repartition topic and a changelog); prints the final counts. */
    static void wordCount(String bootstrap, String prefix, String stateDir, String guarantee) throws Exception {
        String input = prefix + "-lines", output = prefix + "-counts";
        List<String> lines = List.of("the quick brown fox", "jumps over the lazy dog", "the dog sleeps",
                "a fox and a dog", "the end");
        try (Admin admin = Admin.create(common(bootstrap))) {
            admin.createTopics(List.of(new NewTopic(input, 2, (short) -1), new NewTopic(output, 2, (short) -1)))
                    .all().get();
        }
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(producerConfig(bootstrap))) {
            for (int i = 0; i < lines.size(); i++) {
                producer.send(new ProducerRecord<>(input, "line-" + i, lines.get(i))).get();
            }
        }
        Map<String, Long> expected = new TreeMap<>();
        for (String line : lines) {
            for (String word : line.split(" ")) {
                expected.merge(word, 1L, Long::sum);
            }
        }

        StreamsBuilder builder = new StreamsBuilder();
        builder.stream(input, Consumed.with(Serdes.String(), Serdes.String()))
                .flatMapValues(line -> Arrays.asList(line.toLowerCase(Locale.ROOT).split(" ")))
                .groupBy((key, word) -> word, Grouped.with(Serdes.String(), Serdes.String()))
                .count(Materialized.<String, Long>as(Stores.inMemoryKeyValueStore("counts"))
                        .withKeySerde(Serdes.String()).withValueSerde(Serdes.Long()))
                .toStream()
                .to(output, Produced.with(Serdes.String(), Serdes.Long()));
        Properties p = common(bootstrap);
        p.put(StreamsConfig.APPLICATION_ID_CONFIG, prefix + "-app");
        p.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, guarantee);
        p.put(StreamsConfig.STATE_DIR_CONFIG, stateDir + "/" + guarantee);
        p.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, "200");
        p.put(StreamsConfig.STATESTORE_CACHE_MAX_BYTES_CONFIG, "0");
        p.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, "1");
        p.put(StreamsConfig.consumerPrefix(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG), "30000");
        p.put(StreamsConfig.producerPrefix(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG), "180000");
        p.put(StreamsConfig.producerPrefix(ProducerConfig.TRANSACTION_TIMEOUT_CONFIG), "120000");
        List<String> failures = new ArrayList<>();
        KafkaStreams streams = new KafkaStreams(builder.build(), p);
        streams.setUncaughtExceptionHandler(e -> {
            failures.add(e.getClass().getName() + ": " + e.getMessage()
                    + (e.getCause() == null ? "" : " <- " + e.getCause()));
            return org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler.StreamThreadExceptionResponse
                    .SHUTDOWN_CLIENT;
        });
        Map<String, Long> counts = new TreeMap<>();
        List<String> states = new ArrayList<>();
        streams.setStateListener((now, before) -> states.add(now.toString()));
        streams.start();
        try {
            Properties c = consumerConfig(bootstrap, prefix + "-reader");
            c.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, LongDeserializer.class.getName());
            try (KafkaConsumer<String, Long> consumer = new KafkaConsumer<>(c)) {
                consumer.subscribe(List.of(output));
                long deadline = System.nanoTime() + WAIT.toNanos();
                while (!counts.equals(expected) && failures.isEmpty() && System.nanoTime() < deadline
                        && streams.state() != KafkaStreams.State.ERROR
                        && streams.state() != KafkaStreams.State.NOT_RUNNING) {
                    for (ConsumerRecord<String, Long> r : consumer.poll(Duration.ofMillis(500))) {
                        counts.put(r.key(), r.value());
                    }
                }
            }
        } finally {
            streams.close(Duration.ofSeconds(60));
        }
        emit("step", "streams", "guarantee", guarantee, "counts", counts, "expected", expected,
                "failures", failures, "states", states);
    }
}
