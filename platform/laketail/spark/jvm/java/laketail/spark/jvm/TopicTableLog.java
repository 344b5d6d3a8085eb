package laketail.spark.jvm;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.BufferedReader;
import java.io.FileNotFoundException;
import java.io.IOException;
import java.io.InputStreamReader;
import java.net.URI;
import java.net.URISyntaxException;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Comparator;
import java.util.HashMap;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FSDataInputStream;
import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;

/**
 * A laketail topic table's Delta log, replayed to its newest version each time it is asked.
 *
 * <p>Role: the data files of the table's latest committed version, per partition, for {@link
 * TopicFileIndex}. {@link #latest()} reads {@code _delta_log/_last_checkpoint}, then opens the
 * commit after the version it already knows ({@code <version + 1>.json}, and on until one is
 * missing): an unchanged table costs three small file operations, a moved one only its new commits.
 * The first call, a call that finds the log cleaned up past what it knows, and one that finds the
 * commit it applied last gone or another file (the topic was deleted and made again) start from
 * the newest checkpoint ({@link CheckpointReader}) and replay the JSON commits after it. {@code
 * add} actions add files, {@code remove} actions remove them, {@code txn} actions set their
 * application's version; {@code protocol} and {@code metaData} are checked; everything else is
 * skipped.
 *
 * <p>Invariants: a {@link Snapshot} is immutable and versions only move forward. A table whose
 * protocol needs a reader feature this replay does not implement (deletion vectors, column mapping,
 * v2 checkpoints, ...) or that is not partitioned by {@code partition} alone is refused, never
 * misread. A commit is applied whole or not at all: any failure drops what was cached, and the
 * next call starts again from the checkpoint.
 *
 * <p>Thread-safety: {@link #latest()} is synchronized (Spark may plan queries on several threads).
 */
final class TopicTableLog {
  /** The partition column of every laketail topic table (docs/architecture.md §4.2). */
  static final String PARTITION = "partition";

  private static final ObjectMapper JSON = new ObjectMapper();
  private static final Pattern CHECKPOINT =
      Pattern.compile("(\\d{20})\\.checkpoint(?:\\.(\\d{10})\\.(\\d{10}))?\\.parquet");
  /** Reader features that change nothing for a reader of add and remove actions. */
  private static final Set<String> HARMLESS_FEATURES =
      Set.of("timestampNtz", "vacuumProtocolCheck", "columnMapping");

  /** Which of a snapshot's files a relation lists. */
  enum Rows {
    /** Every file. */
    ALL,
    /** Files whose statistics prove they hold only records outside transactions. */
    PLAIN,
    /** The others: control rows, transactional records, or statistics that do not say. */
    MARKED
  }

  /**
   * One version's data files, grouped by partition and sorted by name, with the version of each
   * application's Delta transaction ({@code txn} actions: the tierer's {@code laketail.tier.<p>}
   * is partition p's tiered offset, retention's {@code laketail.logstart.<p>} its log start).
   */
  record Snapshot(long version, TreeMap<Integer, DataFile[]> partitions, Map<String, Long> transactions) {
    /** The version of {@code appId}'s transaction, 0 when it never committed one. */
    long transaction(String appId) {
      return transactions.getOrDefault(appId, 0L);
    }

    /** The files of {@code partition} that {@code rows} selects. */
    FileStatus[] files(DataFile[] all, Rows rows) {
      return Arrays.stream(all)
          .filter(f -> rows == Rows.ALL || f.plain() == (rows == Rows.PLAIN))
          .map(DataFile::status)
          .toArray(FileStatus[]::new);
    }
  }

  /**
   * A data file and what its statistics say: the offsets it holds ({@code firstOffset} -1 when
   * they do not say) and whether it is plain (see {@link #plain}).
   */
  record DataFile(int partition, FileStatus status, boolean plain, long firstOffset, long lastOffset) {}

  private final Path table;
  private final Path log;
  private final FileSystem fs;
  private final long blockSize;

  // Guarded by this.
  private long version = -1;
  private FileStatus known; // the commit file of version, as first seen (null: from a checkpoint)
  private final Map<Path, DataFile> live = new HashMap<>();
  private final Map<String, Long> transactions = new HashMap<>();
  private Snapshot snapshot;
  private boolean typed; // the schema has value_struct or key_struct (typed columns, laketail.table.mode)

  TopicTableLog(String uri, Configuration conf) throws IOException {
    Path given = new Path(uri);
    this.fs = given.getFileSystem(conf);
    this.table = fs.makeQualified(given);
    this.log = new Path(table, "_delta_log");
    this.blockSize = fs.getDefaultBlockSize(table);
  }

  Path table() {
    return table;
  }

  /**
   * Whether the table's schema, as of the last version read, has a typed column: {@code
   * value_struct} or {@code key_struct} (a topic with {@code laketail.table.mode} or {@code
   * laketail.table.key.mode}; laketail.spark.typed).
   */
  synchronized boolean typed() {
    return typed;
  }

  /** The table's latest committed version: its files, read from the log now. */
  synchronized Snapshot latest() throws IOException {
    try {
      long hint = lastCheckpoint()[0];
      boolean cleanedUp = hint > version && !fs.exists(commitPath(version + 1));
      boolean replaced = version >= 0 && hint <= version && !sameCommit(version, known);
      if (version < 0 || cleanedUp || replaced) {
        load(); // first call; the commits after what we know are gone; the table was made anew
      }
      boolean moved = snapshot == null;
      while (applyCommit(version + 1)) {
        moved = true;
      }
      if (version < 0) {
        throw new IllegalArgumentException(
            table + " is not a Delta table: " + log + " holds no commit (is the topic's table there?)");
      }
      if (moved) {
        snapshot = freeze();
      }
      return snapshot;
    } catch (IOException | RuntimeException e) {
      version = -1;
      known = null;
      live.clear();
      transactions.clear();
      snapshot = null;
      throw e;
    }
  }

  // -- loading ---------------------------------------------------------------------------------

  /** Starts over from the newest complete checkpoint, or from nothing when there is none. */
  private void load() throws IOException {
    version = -1;
    live.clear();
    transactions.clear();
    snapshot = null;
    long[] hint = lastCheckpoint();
    List<Path> parts = hint[0] >= 0 ? checkpointParts(hint[0], hint[1]) : List.of();
    if (parts.isEmpty() || !allExist(parts)) { // no hint, or one naming files that are gone
      long[] found = newestCheckpoint();
      hint = found;
      parts = found[0] >= 0 ? checkpointParts(found[0], found[1]) : List.of();
    }
    if (!parts.isEmpty()) {
      CheckpointReader.read(fs.getConf(), parts, this::apply);
      version = hint[0];
      known = null;
    }
  }

  /**
   * {version, parts} from {@code _last_checkpoint} (parts 0: a classic one-file checkpoint), or
   * {-1, 0} when it is absent.
   */
  private long[] lastCheckpoint() throws IOException {
    String text;
    try (FSDataInputStream in = fs.open(new Path(log, "_last_checkpoint"))) {
      text = new String(in.readAllBytes(), StandardCharsets.UTF_8);
    } catch (FileNotFoundException e) {
      return new long[] {-1, 0};
    }
    JsonNode doc = JSON.readTree(text);
    if (doc == null || !doc.has("version")) {
      return new long[] {-1, 0}; // a torn hint: the listing finds the checkpoint instead
    }
    return new long[] {doc.get("version").asLong(), doc.path("parts").asLong(0)};
  }

  /** {version, parts} of the newest checkpoint whose every part is in the log, or {-1, 0}. */
  private long[] newestCheckpoint() throws IOException {
    Map<Long, Long> seen = new HashMap<>();
    Map<Long, Long> expected = new HashMap<>();
    FileStatus[] entries;
    try {
      entries = fs.listStatus(log);
    } catch (FileNotFoundException e) {
      return new long[] {-1, 0};
    }
    for (FileStatus entry : entries) {
      Matcher m = CHECKPOINT.matcher(entry.getPath().getName());
      if (m.matches()) {
        long v = Long.parseLong(m.group(1));
        seen.merge(v, 1L, Long::sum);
        expected.put(v, m.group(3) == null ? 0L : Long.parseLong(m.group(3)));
      }
    }
    return expected.entrySet().stream()
        .filter(e -> seen.get(e.getKey()) == Math.max(1, e.getValue()))
        .max(Map.Entry.comparingByKey())
        .map(e -> new long[] {e.getKey(), e.getValue()})
        .orElse(new long[] {-1, 0});
  }

  /** The files of checkpoint {@code v}: one classic file ({@code parts} 0) or {@code parts} parts. */
  private List<Path> checkpointParts(long v, long parts) {
    if (parts == 0) {
      return List.of(new Path(log, String.format("%020d.checkpoint.parquet", v)));
    }
    List<Path> out = new ArrayList<>();
    for (long i = 1; i <= parts; i++) {
      out.add(new Path(log, String.format("%020d.checkpoint.%010d.%010d.parquet", v, i, parts)));
    }
    return out;
  }

  private boolean allExist(List<Path> parts) throws IOException {
    for (Path p : parts) {
      if (!fs.exists(p)) {
        return false;
      }
    }
    return true;
  }

  // -- commits ---------------------------------------------------------------------------------

  /** Whether commit {@code v} is still the file it was when applied (not a new table's). */
  private boolean sameCommit(long v, FileStatus seen) throws IOException {
    try {
      FileStatus now = fs.getFileStatus(commitPath(v));
      return seen == null || (now.getModificationTime() == seen.getModificationTime() && now.getLen() == seen.getLen());
    } catch (FileNotFoundException e) {
      return false;
    }
  }

  private Path commitPath(long v) {
    return new Path(log, String.format("%020d.json", v));
  }

  /** Applies commit {@code v} whole; false when it does not exist (yet). */
  private boolean applyCommit(long v) throws IOException {
    List<JsonNode> actions = new ArrayList<>();
    FileStatus file;
    try {
      file = fs.getFileStatus(commitPath(v));
    } catch (FileNotFoundException e) {
      return false;
    }
    try (FSDataInputStream in = fs.open(file.getPath());
        BufferedReader reader = new BufferedReader(new InputStreamReader(in, StandardCharsets.UTF_8))) {
      String line;
      while ((line = reader.readLine()) != null) {
        if (!line.isBlank()) {
          actions.add(JSON.readTree(line));
        }
      }
    } catch (FileNotFoundException e) {
      return false;
    }
    for (JsonNode action : actions) {
      if (action.has("add")) {
        JsonNode add = action.get("add");
        apply(new Action.Add(add.path("path").asText(null), text(add.path("partitionValues"), PARTITION),
            add.path("size").asLong(), add.path("modificationTime").asLong(), text(add, "stats")));
      } else if (action.has("remove")) {
        apply(new Action.Remove(action.get("remove").path("path").asText(null)));
      } else if (action.has("txn")) {
        JsonNode txn = action.get("txn");
        apply(new Action.Txn(txn.path("appId").asText(null), txn.path("version").asLong()));
      } else if (action.has("protocol")) {
        JsonNode p = action.get("protocol");
        apply(new Action.Protocol(p.path("minReaderVersion").asInt(1), strings(p.path("readerFeatures"))));
      } else if (action.has("metaData")) {
        JsonNode m = action.get("metaData");
        Map<String, String> conf = new HashMap<>();
        for (Iterator<Map.Entry<String, JsonNode>> it = m.path("configuration").fields(); it.hasNext(); ) {
          Map.Entry<String, JsonNode> e = it.next();
          conf.put(e.getKey(), e.getValue().asText());
        }
        apply(new Action.MetaData(strings(m.path("partitionColumns")), conf, text(m, "schemaString")));
      }
    }
    version = v;
    known = file;
    return true;
  }

  private static String text(JsonNode node, String field) {
    JsonNode value = node.get(field);
    return value == null || value.isNull() ? null : value.asText();
  }

  private static List<String> strings(JsonNode array) {
    List<String> out = new ArrayList<>();
    array.forEach(n -> out.add(n.asText()));
    return out;
  }

  /** The actions a replay understands, from a JSON commit or a checkpoint. */
  sealed interface Action {
    record Add(String path, String partition, long size, long modificationTime, String stats)
        implements Action {}

    record Remove(String path) implements Action {}

    record Txn(String appId, long version) implements Action {}

    record Protocol(int minReaderVersion, List<String> readerFeatures) implements Action {}

    record MetaData(List<String> partitionColumns, Map<String, String> configuration, String schemaString)
        implements Action {}
  }

  void apply(Action action) {
    if (action instanceof Action.Add add) {
      if (add.partition() == null) {
        throw new IllegalStateException(table + ": file " + add.path() + " has no '" + PARTITION + "' value");
      }
      Path path = resolve(add.path());
      JsonNode stats = stats(add.stats());
      live.put(path, new DataFile(Integer.parseInt(add.partition()),
          new FileStatus(add.size(), false, 1, blockSize, add.modificationTime(), path), plain(stats),
          offset(stats, "minValues"), offset(stats, "maxValues")));
    } else if (action instanceof Action.Remove remove) {
      live.remove(resolve(remove.path()));
    } else if (action instanceof Action.Txn txn) {
      if (txn.appId() != null) {
        transactions.put(txn.appId(), txn.version());
      }
    } else if (action instanceof Action.Protocol protocol) {
      checkProtocol(protocol);
    } else if (action instanceof Action.MetaData meta) {
      if (!meta.partitionColumns().equals(List.of(PARTITION))) {
        throw new IllegalArgumentException(table + " is not a laketail topic table: it is partitioned by "
            + meta.partitionColumns() + ", not [" + PARTITION + "]");
      }
      if (meta.schemaString() != null) {
        typed = hasTypedColumn(meta.schemaString());
      }
      String columnMapping = meta.configuration().getOrDefault("delta.columnMapping.mode", "none");
      if (!columnMapping.equals("none")) {
        throw new UnsupportedOperationException(table + " uses column mapping (" + columnMapping
            + "), which laketail_table does not read: read it with format('laketail') or delta-spark");
      }
    }
  }

  private static boolean hasTypedColumn(String schemaString) {
    try {
      for (JsonNode field : JSON.readTree(schemaString).path("fields")) {
        if (BatchPlan.TYPED_COLUMNS.contains(field.path("name").asText(""))) {
          return true;
        }
      }
    } catch (IOException e) {
      return false; // a schema this replay cannot read: read as the record columns only
    }
    return false;
  }

  private void checkProtocol(Action.Protocol protocol) {
    List<String> unknown = new ArrayList<>(protocol.readerFeatures());
    unknown.removeAll(HARMLESS_FEATURES);
    if (protocol.minReaderVersion() > 3 || !unknown.isEmpty()) {
      throw new UnsupportedOperationException(table + " needs Delta reader version "
          + protocol.minReaderVersion() + " with features " + protocol.readerFeatures()
          + "; laketail_table reads add and remove actions only (features it can ignore: "
          + HARMLESS_FEATURES + ")");
    }
  }

  /** An add action's {@code stats} JSON, or null when it has none or it does not parse. */
  static JsonNode stats(String stats) {
    if (stats == null || stats.isBlank()) {
      return null;
    }
    try {
      return JSON.readTree(stats);
    } catch (IOException e) {
      return null; // unreadable statistics prove nothing
    }
  }

  /**
   * Whether a file's statistics prove it holds no control row ({@code control} null count =
   * record count) and no transactional record ({@code transactional} maximum false). laketail's
   * writer records both (storage/data_files.py); a file without them counts as marked.
   */
  static boolean plain(JsonNode stats) {
    if (stats == null) {
      return false;
    }
    JsonNode records = stats.path("numRecords");
    JsonNode nulls = stats.path("nullCount").path("control");
    JsonNode transactional = stats.path("maxValues").path("transactional");
    return records.isNumber() && nulls.isNumber() && nulls.asLong() == records.asLong()
        && transactional.isBoolean() && !transactional.asBoolean();
  }

  /** The {@code offset} statistic under {@code which} (minValues, maxValues), or -1. */
  private static long offset(JsonNode stats, String which) {
    JsonNode value = stats == null ? null : stats.path(which).path("offset");
    return value != null && value.canConvertToLong() && value.isIntegralNumber() ? value.asLong() : -1;
  }

  private Path resolve(String raw) {
    if (raw == null) {
      throw new IllegalStateException(table + ": an add or remove action without a path");
    }
    try {
      Path path = new Path(new URI(raw)); // the log keeps paths URI-encoded
      return path.isAbsolute() ? fs.makeQualified(path) : new Path(table, path);
    } catch (URISyntaxException e) {
      throw new IllegalStateException(table + ": a file path the Delta log cannot hold: " + raw, e);
    }
  }

  private Snapshot freeze() {
    Map<Integer, List<DataFile>> grouped = new TreeMap<>();
    for (DataFile file : live.values()) {
      grouped.computeIfAbsent(file.partition(), p -> new ArrayList<>()).add(file);
    }
    TreeMap<Integer, DataFile[]> partitions = new TreeMap<>();
    grouped.forEach((p, files) -> {
      DataFile[] sorted = files.toArray(new DataFile[0]);
      Arrays.sort(sorted, Comparator.comparing(f -> f.status().getPath().getName()));
      partitions.put(p, sorted);
    });
    return new Snapshot(version, partitions, Map.copyOf(transactions));
  }
}
