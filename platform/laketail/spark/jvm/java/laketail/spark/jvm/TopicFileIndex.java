package laketail.spark.jvm;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.SortedMap;
import java.util.TreeMap;
import java.util.function.Supplier;
import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.Path;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.And;
import org.apache.spark.sql.catalyst.expressions.Attribute;
import org.apache.spark.sql.catalyst.expressions.BindReferences$;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.apache.spark.sql.catalyst.expressions.InterpretedPredicate;
import org.apache.spark.sql.catalyst.expressions.Predicate;
import org.apache.spark.sql.catalyst.expressions.package$;
import org.apache.spark.sql.execution.datasources.FileIndex;
import org.apache.spark.sql.execution.datasources.PartitionDirectory;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructType;
import scala.collection.immutable.Seq;
import scala.jdk.javaapi.CollectionConverters;

/**
 * Spark's file list of a topic table, taken from its Delta log at every call.
 *
 * <p>Role: Spark calls {@link #listFiles} while it plans each query over a relation (and again for
 * each new plan), so a view over a relation with this index shows the table's latest committed
 * version at every query, never the version it had when the view was made. This is how Delta's own
 * {@code TahoeLogFileIndex} stays fresh. The log replay is {@link TopicTableLog}'s: incremental, so
 * an unchanged table costs a few file operations per query.
 *
 * <p>Partition pruning: the static partition filters Spark hands over (predicates on {@code
 * partition} only) are evaluated per partition of the snapshot, and partitions that fail them are
 * not listed; Spark does not filter their rows again, so the evaluation is exact. Data filters are
 * left to Parquet's row-group statistics.
 *
 * <p>{@code rows} narrows the list by the files' Delta statistics: {@code PLAIN} files hold only
 * records outside transactions, so a committed view scans them with no row filter; {@code MARKED}
 * are the rest (see {@link TopicTableLog#plain}).
 *
 * <p>A fixed list works the same way: {@link BatchPlan} reads the files it planned through one.
 *
 * <p>Thread-safety: safe from any thread (the log serializes its replay).
 */
final class TopicFileIndex implements FileIndex {
  static final StructType PARTITION_SCHEMA =
      new StructType().add(TopicTableLog.PARTITION, DataTypes.IntegerType, true);

  private final Path root;
  private final Supplier<SortedMap<Integer, FileStatus[]>> files;
  private final String description;

  /** The files of {@code log}'s latest snapshot that {@code rows} selects, at every call. */
  TopicFileIndex(TopicTableLog log, TopicTableLog.Rows rows) {
    this(log.table(), () -> select(snapshot(log), rows),
        "TopicFileIndex(" + log.table() + (rows == TopicTableLog.Rows.ALL ? "" : ", rows " + rows) + ")");
  }

  /** The files {@code files} gives at each call, per partition, under the table at {@code root}. */
  TopicFileIndex(Path root, Supplier<SortedMap<Integer, FileStatus[]>> files, String description) {
    this.root = root;
    this.files = files;
    this.description = description;
  }

  static TopicTableLog.Snapshot snapshot(TopicTableLog log) {
    try {
      return log.latest();
    } catch (IOException e) {
      throw new UncheckedIOException("reading the Delta log of " + log.table() + ": " + e.getMessage(), e);
    }
  }

  private static SortedMap<Integer, FileStatus[]> select(TopicTableLog.Snapshot snapshot, TopicTableLog.Rows rows) {
    SortedMap<Integer, FileStatus[]> out = new TreeMap<>();
    snapshot.partitions().forEach((partition, all) -> out.put(partition, snapshot.files(all, rows)));
    return out;
  }

  @Override
  public Seq<Path> rootPaths() {
    return CollectionConverters.asScala(List.of(root)).toList();
  }

  @Override
  public Seq<PartitionDirectory> listFiles(Seq<Expression> partitionFilters, Seq<Expression> dataFilters) {
    InterpretedPredicate keep = partitionPredicate(partitionFilters);
    List<PartitionDirectory> out = new ArrayList<>();
    for (Map.Entry<Integer, FileStatus[]> entry : files.get().entrySet()) {
      InternalRow values = new GenericInternalRow(new Object[] {entry.getKey()});
      if (entry.getValue().length > 0 && (keep == null || keep.eval(values))) {
        out.add(PartitionDirectory.apply(values, entry.getValue()));
      }
    }
    return CollectionConverters.asScala(out).toList();
  }

  /** The conjunction of {@code filters} bound to the partition row, or null when there are none. */
  private InterpretedPredicate partitionPredicate(Seq<Expression> filters) {
    List<Expression> all = CollectionConverters.asJava(filters);
    if (all.isEmpty()) {
      return null;
    }
    Expression conjunction = all.get(0);
    for (Expression next : all.subList(1, all.size())) {
      conjunction = new And(conjunction, next);
    }
    Seq<Attribute> references = conjunction.references().toSeq();
    for (Attribute attribute : CollectionConverters.asJava(references)) {
      if (!attribute.name().equalsIgnoreCase(TopicTableLog.PARTITION)) {
        throw new IllegalStateException("a partition filter on " + attribute.name() + ": " + conjunction);
      }
    }
    Expression bound = BindReferences$.MODULE$.bindReference(
        conjunction, package$.MODULE$.AttributeSeq(references), false);
    InterpretedPredicate predicate = Predicate.createInterpreted(bound);
    predicate.initialize(0);
    return predicate;
  }

  @Override
  public String[] inputFiles() {
    List<String> paths = new ArrayList<>();
    for (FileStatus[] partition : files.get().values()) {
      for (FileStatus file : partition) {
        paths.add(file.getPath().toString());
      }
    }
    return paths.toArray(new String[0]);
  }

  /** Nothing to do: every call asks for the files again. */
  @Override
  public void refresh() {}

  @Override
  public long sizeInBytes() {
    long bytes = 0;
    for (FileStatus[] partition : files.get().values()) {
      for (FileStatus file : partition) {
        bytes += file.getLen();
      }
    }
    return bytes;
  }

  @Override
  public StructType partitionSchema() {
    return PARTITION_SCHEMA;
  }

  @Override
  public String toString() {
    return description;
  }
}
