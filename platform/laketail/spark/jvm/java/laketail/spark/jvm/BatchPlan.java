package laketail.spark.jvm;

import static org.apache.spark.sql.functions.col;
import static org.apache.spark.sql.functions.lit;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.net.URI;
import java.net.URLEncoder;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.SortedMap;
import java.util.TreeMap;
import java.util.function.Supplier;
import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.Path;
import org.apache.spark.rdd.RDD;
import org.apache.spark.sql.Column;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.SQLContext;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.execution.datasources.HadoopFsRelation;
import org.apache.spark.sql.execution.datasources.parquet.ParquetFileFormat;
import org.apache.spark.sql.execution.datasources.v2.DataSourceV2Relation$;
import org.apache.spark.sql.sources.BaseRelation;
import org.apache.spark.sql.sources.TableScan;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;
import scala.Option;

/**
 * A batch read of {@code format("laketail")}, planned on the driver when Spark plans the query's
 * execution: Spark's own Parquet reader for the fully tiered ranges held in plain files, the
 * Python source for the rest.
 *
 * <p>Role: the Python source is a row-based scan (Spark turns its Arrow batches into rows, which
 * costs more than reading the Parquet itself; docs/architecture.md §10.1). Where a partition's
 * range lies in files whose statistics prove they hold neither control rows nor transactional
 * records ({@link TopicTableLog#plain}), every row of the range is a record of the read under
 * either isolation level, so those files can be read by Spark's vectorized Parquet reader with no
 * row filter but the range's bounds. The plan, per partition of the subscription:
 *
 * <ol>
 *   <li>the range {@code [start, end)} from the options and the gateway's offsets ({@code GET
 *       /v1/topics/{t}/table}, the request the Python planner makes), as the Python planner
 *       resolves it: {@code earliest} is the log start offset (the table's retention mark when that
 *       is higher), {@code latest} the LSO under read_committed and the high watermark under
 *       read_uncommitted;
 *   <li>its head {@code [start, x)}: {@code x} the table's tiered offset (the tierer's Delta
 *       transaction version, from the same log version as the files), or the first offset of the
 *       first file that is not plain, whichever comes first; read from the table's files, filtered
 *       by offset only in the files that straddle {@code start} or {@code x};
 *   <li>its tail {@code [x, end)}: the Python source, with {@code assign} and JSON offsets naming
 *       exactly those ranges (it reads the untiered tail through the gateway and applies
 *       read_committed to the marked files).
 * </ol>
 *
 * <p>The whole read goes to the Python source, as it is, when this plan cannot tell what the
 * Python planner would do, so that its answers and errors are the Python source's: an option this
 * plan does not handle ({@code subscribePattern}, timestamps, {@code minPartitions}, {@code
 * groupId}, client security), a JSON offset outside the partition's log or not naming exactly the
 * subscribed partitions, a gateway that does not answer 200, a table Hadoop cannot open here or
 * whose log this replay refuses, files with overlapping offsets, and a read with no plain tiered
 * range at all.
 *
 * <p>Thread-safety: stateless but for the cache of table logs, which is synchronized.
 */
public final class BatchPlan {
  /** Options (lower case, as Spark passes them) this plan resolves as the Python planner does. */
  private static final Set<String> UNDERSTOOD = Set.of("laketail.servers", "subscribe", "assign",
      "startingoffsets", "endingoffsets", "failondataloss", "kafka.isolation.level", "isolation.level",
      "includeheaders");
  private static final Set<String> REPLACED = Set.of("subscribe", "assign", "startingoffsets", "endingoffsets");
  /** The typed columns, in the order the Python source adds them (laketail.records.TYPED_COLUMNS). */
  static final List<String> TYPED_COLUMNS = List.of("value_struct", "key_struct");
  private static final long EARLIEST = -2;
  private static final long LATEST = -1;
  private static final int MAX_LOGS = 64;
  private static final ObjectMapper JSON = new ObjectMapper();
  /** The Kafka source's columns (laketail.spark.columns.source_ddl), written into the jar at build time. */
  static final String SOURCE_RESOURCE = "laketail/spark/jvm/source-schema.ddl";
  static final String SOURCE_HEADERS_RESOURCE = "laketail/spark/jvm/source-schema-headers.ddl";
  private static final HttpClient HTTP =
      HttpClient.newBuilder().connectTimeout(Duration.ofSeconds(10)).build();

  /** Table logs by URI, each replayed incrementally from query to query; least recently used dropped. */
  private static final Map<String, TopicTableLog> LOGS = new LinkedHashMap<>(16, 0.75f, true) {
    @Override
    protected boolean removeEldestEntry(Map.Entry<String, TopicTableLog> eldest) {
      return size() > MAX_LOGS;
    }
  };

  /** One partition's range and how it is read. */
  record Range(String topic, int partition, long start, long end) {}

  /** A partition's head read from the table: its files, and those read whole (no offset filter). */
  record Head(Range range, List<FileStatus> whole, List<FileStatus> straddling) {}

  private final SparkSession spark;
  private final Read read;
  private final List<Head> heads = new ArrayList<>();
  private final List<Range> tails = new ArrayList<>();
  private final Map<String, Path> tables = new HashMap<>();

  private BatchPlan(SparkSession spark, Read read) {
    this.spark = spark;
    this.read = read;
  }

  /**
   * The relation a batch scan of {@code options} reads, with the {@code required} columns: the
   * Python source's table {@code python} reads a whole read it gets; a tail, which has options of
   * its own, reads through a table from {@code freshPython}.
   */
  static BaseRelation relation(SparkSession spark, Table python, Supplier<Table> freshPython,
      CaseInsensitiveStringMap options, StructType required) {
    BatchPlan plan = plan(spark, options);
    Dataset<Row> rows;
    String description;
    if (plan == null) {
      rows = python(spark, python, options);
      description = "laketail(every range by the Python source)";
    } else {
      StructType typed = new StructType();
      for (String name : TYPED_COLUMNS) {
        if (required.getFieldIndex(name).isDefined()) {
          typed = typed.add(name, required.apply(name).dataType());
        }
      }
      rows = plan.rows(freshPython.get(), options, typed);
      description = plan.toString();
    }
    List<Column> columns = new ArrayList<>();
    for (StructField field : required.fields()) {
      columns.add(col(field.name()));
    }
    return new Relation(spark.sqlContext(), required, rows.select(columns.toArray(new Column[0])), description);
  }

  // -- planning -----------------------------------------------------------------------------------

  /** The options of a read this plan resolves, parsed. */
  record Read(List<URI> servers, boolean committed, Map<String, List<Integer>> subscription, JsonNode starting,
      JsonNode ending, boolean headers) {
    /** {@code options} parsed, or null when the Python source must read (and check) them. */
    static Read of(CaseInsensitiveStringMap options) {
      for (String key : options.keySet()) {
        if (!UNDERSTOOD.contains(key)) {
          return null;
        }
      }
      List<URI> servers = BatchPlan.servers(options.get("laketail.servers"));
      String isolation = options.getOrDefault("isolation.level",
          options.getOrDefault("kafka.isolation.level", "read_committed"));
      Map<String, List<Integer>> subscription = BatchPlan.subscription(options);
      JsonNode starting = spec(options.getOrDefault("startingoffsets", "earliest"), "earliest"); // latest: streaming only
      JsonNode ending = spec(options.getOrDefault("endingoffsets", "latest"), "latest");
      Boolean headers = bool(options.getOrDefault("includeheaders", "false"));
      if (servers == null || subscription == null || starting == null || ending == null || headers == null
          || bool(options.getOrDefault("failondataloss", "true")) == null
          || !Set.of("read_committed", "read_uncommitted").contains(isolation)
          || !namesTopics(starting, subscription) || !namesTopics(ending, subscription)) {
        return null;
      }
      return new Read(servers, isolation.equals("read_committed"), subscription, starting, ending, headers);
    }
  }

  /**
   * The Kafka source's columns for {@code options} without asking the Python source, or null when
   * it must say (and check the options).
   */
  public static StructType schema(CaseInsensitiveStringMap options) {
    Read read = Read.of(options);
    if (read == null || typed(read)) {
      return null;
    }
    return TopicTableSource.schema(read.headers() ? SOURCE_HEADERS_RESOURCE : SOURCE_RESOURCE);
  }

  /**
   * Whether a subscribed topic's table has typed columns ({@code value_struct}, {@code key_struct}): then the Python
   * source says the schema, with the column's type (laketail.spark.typed). A topic this plan
   * cannot look at is left to the Python source too.
   */
  private static boolean typed(Read read) {
    for (String topic : read.subscription().keySet()) {
      JsonNode doc = get(read.servers(), "/v1/topics/" + URLEncoder.encode(topic, StandardCharsets.UTF_8)
          .replace("+", "%20") + "/table");
      if (doc == null || !doc.path("uri").isTextual()) {
        return true;
      }
      try {
        TopicTableLog log = log(SparkSession.active(), doc.get("uri").asText());
        TopicFileIndex.snapshot(log);
        if (log.typed()) {
          return true;
        }
      } catch (RuntimeException e) {
        return true;
      }
    }
    return false;
  }

  /** The plan of a read of {@code options}, or null when the Python source reads it all. */
  static BatchPlan plan(SparkSession spark, CaseInsensitiveStringMap options) {
    Read read = Read.of(options);
    if (read == null) {
      return null;
    }
    BatchPlan plan = new BatchPlan(spark, read);
    for (Map.Entry<String, List<Integer>> topic : read.subscription().entrySet()) {
      if (!plan.add(topic.getKey(), topic.getValue())) {
        return null;
      }
    }
    return plan.heads.isEmpty() ? null : plan;
  }

  /**
   * Plans one topic's partitions ({@code assigned} null: all of them); false when the Python source
   * must read the whole query.
   */
  private boolean add(String topic, List<Integer> assigned) {
    JsonNode starting = read.starting();
    JsonNode ending = read.ending();
    JsonNode doc = get(read.servers(), "/v1/topics/" + URLEncoder.encode(topic, StandardCharsets.UTF_8).replace("+", "%20")
        + "/table");
    if (doc == null || !doc.path("uri").isTextual() || !doc.path("partitions").isArray()) {
      return false;
    }
    Map<Integer, JsonNode> offsets = new TreeMap<>();
    doc.get("partitions").forEach(p -> offsets.put(p.path("partition").asInt(), p));
    List<Integer> partitions = assigned != null ? assigned : new ArrayList<>(offsets.keySet());
    if (!offsets.keySet().containsAll(partitions) || !namesPartitions(starting, topic, partitions)
        || !namesPartitions(ending, topic, partitions)) {
      return false;
    }
    TopicTableLog log;
    TopicTableLog.Snapshot snapshot;
    try {
      log = log(spark, doc.get("uri").asText());
      snapshot = TopicFileIndex.snapshot(log);
    } catch (RuntimeException e) {
      // A store Hadoop cannot open here (no connector for its scheme) or a table this replay
      // refuses (reader features): the Python source reads it with its own file systems.
      return false;
    }
    tables.put(topic, log.table());
    for (int partition : partitions) {
      JsonNode p = offsets.get(partition);
      long logStart = Math.max(p.path("log_start_offset").asLong(),
          snapshot.transaction("laketail.logstart." + partition));
      long latest = p.path(read.committed() ? "last_stable_offset" : "high_watermark").asLong();
      long start = resolve(starting, topic, partition, logStart, latest, false);
      long end = resolve(ending, topic, partition, logStart, latest, true);
      if (start < 0 || end < 0 || start > end) {
        return false;
      }
      if (start < end && !split(new Range(topic, partition, start, end), snapshot)) {
        return false;
      }
    }
    return true;
  }

  /** {@code range} cut into a head from the table's plain files and a tail; false: files overlap. */
  private boolean split(Range range, TopicTableLog.Snapshot snapshot) {
    List<TopicTableLog.DataFile> sorted =
        new ArrayList<>(List.of(snapshot.partitions().getOrDefault(range.partition(), new TopicTableLog.DataFile[0])));
    sorted.sort((a, b) -> Long.compare(a.firstOffset(), b.firstOffset()));
    long x = Math.min(range.end(), snapshot.transaction("laketail.tier." + range.partition()));
    List<TopicTableLog.DataFile> head = new ArrayList<>();
    long previousLast = -1;
    for (TopicTableLog.DataFile file : sorted) {
      if (file.firstOffset() < 0 || file.firstOffset() <= previousLast) {
        return false; // no statistics, or files overlap (an outside writer): the Python planner's case
      }
      previousLast = file.lastOffset();
      if (file.lastOffset() < range.start() || file.firstOffset() >= x) {
        continue;
      }
      if (!file.plain()) {
        x = Math.max(range.start(), Math.min(x, file.firstOffset()));
        break;
      }
      head.add(file);
    }
    if (x > range.start()) {
      List<FileStatus> whole = new ArrayList<>();
      List<FileStatus> straddling = new ArrayList<>();
      for (TopicTableLog.DataFile file : head) {
        boolean inside = file.firstOffset() >= range.start() && file.lastOffset() < x;
        (inside ? whole : straddling).add(file.status());
      }
      heads.add(new Head(new Range(range.topic(), range.partition(), range.start(), x), whole, straddling));
    }
    if (x < range.end()) {
      tails.add(new Range(range.topic(), range.partition(), x, range.end()));
    }
    return true;
  }

  // -- the rows -----------------------------------------------------------------------------------

  /** The rows; {@code typed}: the query's typed columns ({@code value_struct}, {@code key_struct}), with their types. */
  private Dataset<Row> rows(Table python, CaseInsensitiveStringMap options, StructType typed) {
    boolean headers = read.headers();
    Dataset<Row> out = null;
    Map<String, List<Head>> byTopic = new LinkedHashMap<>();
    heads.forEach(h -> byTopic.computeIfAbsent(h.range().topic(), t -> new ArrayList<>()).add(h));
    for (Map.Entry<String, List<Head>> topic : byTopic.entrySet()) {
      Path root = tables.get(topic.getKey());
      SortedMap<Integer, FileStatus[]> whole = new TreeMap<>();
      SortedMap<Integer, FileStatus[]> straddling = new TreeMap<>();
      Column bounds = null;
      for (Head head : topic.getValue()) {
        int p = head.range().partition();
        whole.put(p, head.whole().toArray(new FileStatus[0]));
        if (!head.straddling().isEmpty()) {
          straddling.put(p, head.straddling().toArray(new FileStatus[0]));
          Column in = col("partition").equalTo(p).and(col("offset").geq(head.range().start()))
              .and(col("offset").lt(head.range().end()));
          bounds = bounds == null ? in : bounds.or(in);
        }
      }
      out = union(out, sourceColumns(tableRows(root, whole, typed), topic.getKey(), headers, typed));
      if (bounds != null) {
        out = union(out, sourceColumns(tableRows(root, straddling, typed).where(bounds), topic.getKey(), headers,
            typed));
      }
    }
    if (!tails.isEmpty()) {
      out = union(out, python(spark, python, tailOptions(options)));
    }
    return out;
  }

  private static Dataset<Row> union(Dataset<Row> a, Dataset<Row> b) {
    return a == null ? b : a.union(b);
  }

  /** The table rows of {@code files}, read by Spark's Parquet reader ({@code partition} from the paths). */
  private Dataset<Row> tableRows(Path root, SortedMap<Integer, FileStatus[]> files, StructType typed) {
    TopicFileIndex index = new TopicFileIndex(root, () -> files, "BatchPlan(" + root + ")");
    StructType columns = TopicTableSource.recordSchema();
    for (StructField field : typed.fields()) { // a file without the column, or a field of it, reads null there
      columns = columns.add(field);
    }
    HadoopFsRelation relation = new HadoopFsRelation(index, TopicFileIndex.PARTITION_SCHEMA,
        columns, Option.empty(), new ParquetFileFormat(),
        scala.collection.immutable.Map$.MODULE$.empty(), spark);
    return spark.baseRelationToDataFrame(relation);
  }

  /** Table rows in the Kafka source's columns (laketail.spark.columns.SOURCE_COLUMNS). */
  private static Dataset<Row> sourceColumns(Dataset<Row> rows, String topic, boolean headers, StructType typed) {
    List<Column> columns = new ArrayList<>(List.of(col("key"), col("value"), lit(topic).as("topic"),
        col("partition"), col("offset"), col("timestamp"), col("timestamp_type").cast("int").as("timestampType")));
    if (headers) {
      columns.add(col("headers"));
    }
    for (String name : typed.fieldNames()) { // after the Kafka columns, as the Python source orders them
      columns.add(col(name));
    }
    return rows.select(columns.toArray(new Column[0]));
  }

  /** The user's options with the subscription and offsets replaced by exactly the tails. */
  private CaseInsensitiveStringMap tailOptions(CaseInsensitiveStringMap options) {
    Map<String, String> out = new HashMap<>();
    options.asCaseSensitiveMap().forEach((k, v) -> {
      if (!REPLACED.contains(k.toLowerCase(java.util.Locale.ROOT))) {
        out.put(k, v);
      }
    });
    ObjectNode assign = JSON.createObjectNode();
    ObjectNode starts = JSON.createObjectNode();
    ObjectNode ends = JSON.createObjectNode();
    for (Range tail : tails) {
      assign.withArray(tail.topic()).add(tail.partition());
      starts.with(tail.topic()).put(Integer.toString(tail.partition()), tail.start());
      ends.with(tail.topic()).put(Integer.toString(tail.partition()), tail.end());
    }
    out.put("assign", assign.toString());
    out.put("startingOffsets", starts.toString());
    out.put("endingOffsets", ends.toString());
    return new CaseInsensitiveStringMap(out);
  }

  /** The Python source's rows for {@code options}. */
  private static Dataset<Row> python(SparkSession spark, Table python, CaseInsensitiveStringMap options) {
    return org.apache.spark.sql.classic.Dataset$.MODULE$.ofRows(
        (org.apache.spark.sql.classic.SparkSession) spark,
        DataSourceV2Relation$.MODULE$.create(python, Option.empty(), Option.empty(), options, Option.empty()));
  }

  @Override
  public String toString() {
    long files = heads.stream().mapToLong(h -> h.whole().size() + h.straddling().size()).sum();
    return "laketail(" + count(heads.size(), "range") + " by Spark's Parquet reader from " + count(files, "file")
        + ", " + tails.size() + " by the Python source)";
  }

  private static String count(long n, String noun) {
    return n + " " + noun + (n == 1 ? "" : "s");
  }

  // -- options and the gateway --------------------------------------------------------------------

  private static Boolean bool(String raw) {
    String word = raw.strip().toLowerCase(java.util.Locale.ROOT);
    return word.equals("true") ? Boolean.TRUE : word.equals("false") ? Boolean.FALSE : null;
  }

  /** {@code laketail.servers} as http URLs (as laketail.spark.gateway.parse_servers), or null. */
  private static List<URI> servers(String raw) {
    List<URI> out = new ArrayList<>();
    for (String part : (raw == null ? "" : raw).split(",")) {
      String server = part.strip().replaceAll("/+$", "");
      if (server.isEmpty()) {
        continue;
      }
      if (!server.contains("://")) {
        server = "http://" + server;
      }
      if (!server.startsWith("http://")) {
        return null; // TLS and its settings are the Python client's
      }
      try {
        out.add(URI.create(server));
      } catch (IllegalArgumentException e) {
        return null;
      }
    }
    return out.isEmpty() ? null : out;
  }

  /** The first 200 answer of {@code path} from the servers in order, or null. */
  private static JsonNode get(List<URI> servers, String path) {
    for (URI server : servers) {
      try {
        HttpRequest request = HttpRequest.newBuilder(URI.create(server + path))
            .timeout(Duration.ofSeconds(30)).header("Accept", "application/json").GET().build();
        HttpResponse<String> response = HTTP.send(request, HttpResponse.BodyHandlers.ofString());
        if (response.statusCode() == 200) {
          return JSON.readTree(response.body());
        }
        return null; // the topic's own answer (unknown topic, ...): the Python source reports it
      } catch (IOException e) {
        // this server is down: the next one
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
        return null;
      }
    }
    return null;
  }

  /** {@code subscribe} (null partitions: all) or {@code assign}; null when not exactly one is given well. */
  private static Map<String, List<Integer>> subscription(CaseInsensitiveStringMap options) {
    String subscribe = options.get("subscribe");
    String assign = options.get("assign");
    Map<String, List<Integer>> out = new LinkedHashMap<>();
    if (subscribe != null && assign == null) {
      for (String topic : subscribe.split(",")) {
        if (!topic.strip().isEmpty()) {
          out.put(topic.strip(), null);
        }
      }
    } else if (assign != null && subscribe == null) {
      JsonNode doc = parse(assign);
      if (doc == null || !doc.isObject()) {
        return null;
      }
      for (Map.Entry<String, JsonNode> topic : doc.properties()) {
        List<Integer> partitions = new ArrayList<>();
        for (JsonNode p : topic.getValue()) {
          if (!p.isInt() || p.asInt() < 0 || partitions.contains(p.asInt())) {
            return null;
          }
          partitions.add(p.asInt());
        }
        if (!topic.getValue().isArray() || partitions.isEmpty()) {
          return null;
        }
        out.put(topic.getKey(), partitions);
      }
    }
    return out.isEmpty() ? null : out;
  }

  /** An offsets option: one of {@code words} as a JSON string, a JSON object, or null. */
  private static JsonNode spec(String raw, String... words) {
    String word = raw.strip().toLowerCase(java.util.Locale.ROOT);
    if (List.of(words).contains(word)) {
      return JSON.getNodeFactory().textNode(word);
    }
    JsonNode doc = parse(raw);
    if (doc == null || !doc.isObject()) {
      return null;
    }
    for (JsonNode partitions : doc) {
      if (!partitions.isObject()) {
        return null;
      }
      for (Map.Entry<String, JsonNode> entry : partitions.properties()) {
        JsonNode offset = entry.getValue();
        if (!offset.isIntegralNumber() || !offset.canConvertToLong() || !entry.getKey().matches("[0-9]{1,9}")) {
          return null;
        }
      }
    }
    return doc;
  }

  /**
   * Whether a JSON {@code spec} names the subscribed topics and no other. That it names each
   * topic's partitions exactly (Spark's Kafka source's rule, whose error the Python source raises)
   * is checked when the partitions are known ({@link #add}).
   */
  private static boolean namesTopics(JsonNode spec, Map<String, List<Integer>> subscription) {
    if (!spec.isObject()) {
      return true;
    }
    Set<String> named = new java.util.HashSet<>();
    spec.fieldNames().forEachRemaining(named::add);
    return named.equals(subscription.keySet());
  }

  /** Whether a JSON {@code spec} names exactly {@code partitions} of {@code topic}. */
  private static boolean namesPartitions(JsonNode spec, String topic, List<Integer> partitions) {
    if (!spec.isObject()) {
      return true;
    }
    JsonNode named = spec.path(topic);
    return named.size() == partitions.size()
        && partitions.stream().allMatch(p -> named.has(Integer.toString(p)));
  }

  /**
   * One partition's offset from {@code spec} as the Python planner resolves it, or -1 when the
   * Python source must decide (a JSON offset outside {@code [logStart, latest]}, a partition the
   * JSON does not name, {@code -2} as an ending offset).
   */
  private static long resolve(JsonNode spec, String topic, int partition, long logStart, long latest,
      boolean ending) {
    long value;
    if (spec.isTextual()) {
      value = spec.asText().equals("earliest") ? EARLIEST : LATEST;
    } else {
      JsonNode given = spec.path(topic).path(Integer.toString(partition));
      if (!given.isIntegralNumber()) { // not named (what is named, spec() checked fits a long)
        return -1;
      }
      value = given.asLong();
    }
    if (value == EARLIEST) {
      return ending ? -1 : logStart;
    }
    if (value == LATEST) {
      return latest;
    }
    return value >= logStart && value <= latest ? value : -1;
  }

  private static JsonNode parse(String raw) {
    try {
      return JSON.readTree(raw);
    } catch (IOException e) {
      return null;
    }
  }

  /** The cached log of the table at {@code uri}, opened on first use. */
  private static TopicTableLog log(SparkSession spark, String uri) {
    synchronized (LOGS) {
      TopicTableLog log = LOGS.get(uri);
      if (log == null) {
        try {
          log = new TopicTableLog(uri, spark.sessionState().newHadoopConf());
        } catch (IOException e) {
          throw new UncheckedIOException("opening " + uri + ": " + e.getMessage(), e);
        }
        LOGS.put(uri, log);
      }
      return log;
    }
  }

  // -- the relation -------------------------------------------------------------------------------

  /**
   * The planned rows as a relation Spark scans: their internal rows, handed over as they are
   * ({@code needConversion} false), so the plan's Parquet scans keep their generated code.
   */
  static final class Relation extends BaseRelation implements TableScan {
    private final SQLContext context;
    private final StructType schema;
    private final Dataset<Row> rows;
    private final String description;

    Relation(SQLContext context, StructType schema, Dataset<Row> rows, String description) {
      this.context = context;
      this.schema = schema;
      this.rows = rows;
      this.description = description;
    }

    @Override
    public SQLContext sqlContext() {
      return context;
    }

    @Override
    public StructType schema() {
      return schema;
    }

    @Override
    public boolean needConversion() {
      return false;
    }

    @Override
    @SuppressWarnings({"unchecked", "rawtypes"})
    public RDD<Row> buildScan() {
      return (RDD) rows.queryExecution().toRdd();
    }

    @Override
    public String toString() {
      return description;
    }
  }
}
