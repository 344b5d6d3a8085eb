package laketail.spark.jvm;

import java.io.IOException;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.function.Consumer;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.Path;
import org.apache.parquet.example.data.Group;
import org.apache.parquet.hadoop.ParquetReader;
import org.apache.parquet.hadoop.api.InitContext;
import org.apache.parquet.hadoop.example.GroupReadSupport;
import org.apache.parquet.schema.GroupType;
import org.apache.parquet.schema.MessageType;
import org.apache.parquet.schema.Type;

/**
 * The actions of a Delta checkpoint that a topic table's replay needs, read with parquet-hadoop on
 * the driver (no Spark job).
 *
 * <p>A checkpoint is a Parquet file (or several parts) with one action per row: {@code add} rows
 * are the files live at its version ({@code remove} rows there are tombstones for VACUUM and are
 * not read), {@code txn} rows the applications' transaction versions, {@code protocol} and {@code
 * metaData} are checked like a JSON commit's. Only the columns used are read: {@code add.{path,
 * partitionValues, size, modificationTime, stats}}, {@code txn.{appId, version}}, {@code
 * protocol.{minReaderVersion, readerFeatures}}, {@code metaData.{partitionColumns,
 * configuration, schemaString}}. Maps and lists are read in both Parquet layouts (three-level and legacy).
 *
 * <p>Stateless; safe from any thread.
 */
final class CheckpointReader {
  private CheckpointReader() {}

  private static final Map<String, List<String>> COLUMNS = Map.of(
      "add", List.of("path", "partitionValues", "size", "modificationTime", "stats"),
      "txn", List.of("appId", "version"),
      "protocol", List.of("minReaderVersion", "readerFeatures"),
      "metaData", List.of("partitionColumns", "configuration", "schemaString"));

  /** Hands every add, txn, protocol and metaData action of the checkpoint's parts to {@code sink}. */
  static void read(Configuration conf, List<Path> parts, Consumer<TopicTableLog.Action> sink)
      throws IOException {
    for (Path part : parts) {
      try (ParquetReader<Group> reader = ParquetReader.builder(new Projected(), part).withConf(conf).build()) {
        for (Group row = reader.read(); row != null; row = reader.read()) {
          Group add = group(row, "add");
          if (add != null) {
            sink.accept(new TopicTableLog.Action.Add(string(add, "path"),
                map(add, "partitionValues").get(TopicTableLog.PARTITION), longValue(add, "size"),
                longValue(add, "modificationTime"), string(add, "stats")));
          }
          Group txn = group(row, "txn");
          if (txn != null) {
            sink.accept(new TopicTableLog.Action.Txn(string(txn, "appId"), longValue(txn, "version")));
          }
          Group protocol = group(row, "protocol");
          if (protocol != null) {
            int version = has(protocol, "minReaderVersion") ? protocol.getInteger("minReaderVersion", 0) : 1;
            sink.accept(new TopicTableLog.Action.Protocol(version, list(protocol, "readerFeatures")));
          }
          Group meta = group(row, "metaData");
          if (meta != null) {
            sink.accept(new TopicTableLog.Action.MetaData(list(meta, "partitionColumns"),
                map(meta, "configuration"), string(meta, "schemaString")));
          }
        }
      }
    }
  }

  /** Group records with only {@link #COLUMNS} of whatever the file has. */
  private static final class Projected extends GroupReadSupport {
    @Override
    public ReadContext init(InitContext context) {
      MessageType file = context.getFileSchema();
      List<Type> kept = new ArrayList<>();
      COLUMNS.forEach((action, fields) -> subset(file, action, fields).ifPresent(kept::add));
      return new ReadContext(new MessageType(file.getName(), kept));
    }

    private static Optional<Type> subset(GroupType parent, String name, List<String> fields) {
      if (!parent.containsField(name) || parent.getType(name).isPrimitive()) {
        return Optional.empty();
      }
      GroupType action = parent.getType(name).asGroupType();
      List<Type> kept = fields.stream().filter(action::containsField).map(action::getType).toList();
      return kept.isEmpty() ? Optional.empty() : Optional.of(action.withNewFields(kept));
    }
  }

  private static boolean has(Group g, String field) {
    return g.getType().containsField(field) && g.getFieldRepetitionCount(field) > 0;
  }

  private static Group group(Group g, String field) {
    return has(g, field) ? g.getGroup(field, 0) : null;
  }

  private static String string(Group g, String field) {
    return has(g, field) ? g.getString(field, 0) : null;
  }

  private static long longValue(Group g, String field) {
    return has(g, field) ? g.getLong(field, 0) : 0L;
  }

  /** A MAP group's entries (its one repeated child holds key and value). */
  private static Map<String, String> map(Group g, String field) {
    Map<String, String> out = new HashMap<>();
    Group m = group(g, field);
    if (m == null) {
      return out;
    }
    String entries = m.getType().getType(0).getName();
    for (int i = 0; i < m.getFieldRepetitionCount(entries); i++) {
      Group entry = m.getGroup(entries, i);
      out.put(string(entry, "key"), string(entry, "value"));
    }
    return out;
  }

  /** A LIST of strings: {@code list.element} groups, or the legacy repeated primitive. */
  private static List<String> list(Group g, String field) {
    List<String> out = new ArrayList<>();
    Group l = group(g, field);
    if (l == null) {
      return out;
    }
    Type repeated = l.getType().getType(0);
    for (int i = 0; i < l.getFieldRepetitionCount(repeated.getName()); i++) {
      if (repeated.isPrimitive()) {
        out.add(l.getString(repeated.getName(), i));
      } else {
        Group element = l.getGroup(repeated.getName(), i);
        out.add(string(element, element.getType().getType(0).getName()));
      }
    }
    return out;
  }
}
