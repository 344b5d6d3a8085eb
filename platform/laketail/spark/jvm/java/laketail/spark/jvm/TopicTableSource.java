package laketail.spark.jvm;

import java.io.IOException;
import java.io.InputStream;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import org.apache.hadoop.conf.Configuration;
import org.apache.spark.sql.SQLContext;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.execution.datasources.HadoopFsRelation;
import org.apache.spark.sql.execution.datasources.parquet.ParquetFileFormat;
import org.apache.spark.sql.sources.BaseRelation;
import org.apache.spark.sql.sources.DataSourceRegister;
import org.apache.spark.sql.sources.RelationProvider;
import org.apache.spark.sql.types.StructType;
import scala.Option;
import scala.collection.immutable.Map;

/**
 * {@code format("laketail_table")}: every row of a topic's Delta table, read by Spark's own Parquet
 * reader, from the table's latest committed version at every query.
 *
 * <pre>
 *   spark.read.format("laketail_table").load("/data/topics/orders")
 *   CREATE TEMPORARY VIEW orders_all USING laketail_table OPTIONS (path '/data/topics/orders')
 * </pre>
 *
 * <p>The relation is a {@link HadoopFsRelation} over {@link TopicFileIndex}: columns in the record
 * schema (docs/architecture.md §4.2, {@code record-schema.ddl} in this jar, written at build time
 * from {@code laketail.spark.columns.TABLE_COLUMNS}), {@code partition} taken from the files' paths
 * so Spark prunes on it, and every row the table holds: control rows and records of open or aborted
 * transactions included (the {@code <topic>_all} view). The table is read once when the relation is
 * made, so a wrong path fails then, with the reason.
 *
 * <p>Options: {@code path} (required; a table URI Hadoop can open); {@code rows}: {@code all}
 * (default), {@code plain} (only files whose statistics prove they hold records outside
 * transactions only) or {@code marked} (the other files); the rest go to Hadoop's configuration
 * and Spark's Parquet reader as with {@code spark.read.parquet}; {@code value_struct} and {@code
 * key_struct}: the types (Spark DDL) of a typed table's columns of those names, read after the
 * record columns in that order.
 */
public final class TopicTableSource implements RelationProvider, DataSourceRegister {
  public static final String SHORT_NAME = "laketail_table";
  private static final String SCHEMA_RESOURCE = "laketail/spark/jvm/record-schema.ddl";

  @Override
  public String shortName() {
    return SHORT_NAME;
  }

  @Override
  public BaseRelation createRelation(SQLContext sqlContext, Map<String, String> parameters) {
    if (parameters.contains("paths") && !parameters.get("paths").get().equals("[]")) {
      throw new IllegalArgumentException(SHORT_NAME + " reads one topic table: give one path");
    }
    Option<String> path = parameters.get("path");
    if (path.isEmpty() || path.get().isBlank()) {
      throw new IllegalArgumentException(
          SHORT_NAME + " needs the topic table's location: load(uri) or OPTIONS (path 'uri')");
    }
    SparkSession spark = sqlContext.sparkSession();
    Configuration conf = spark.sessionState().newHadoopConfWithOptions(parameters);
    TopicTableLog.Rows rows = rows(parameters.get("rows"));
    TopicFileIndex index;
    try {
      index = new TopicFileIndex(new TopicTableLog(path.get(), conf), rows);
    } catch (IOException e) {
      throw new UncheckedIOException("opening " + path.get() + ": " + e.getMessage(), e);
    }
    index.inputFiles(); // fail now on a wrong path, not at the first query
    StructType columns = recordSchema();
    for (String name : BatchPlan.TYPED_COLUMNS) {
      Option<String> typed = parameters.get(name);
      if (typed.isDefined() && !typed.get().isBlank()) { // typed columns: the table's type of this one
        columns = columns.add(name, org.apache.spark.sql.types.DataType.fromDDL(typed.get()));
      }
    }
    return new HadoopFsRelation(index, TopicFileIndex.PARTITION_SCHEMA, columns, Option.empty(),
        new ParquetFileFormat(), parameters, spark);
  }

  private static TopicTableLog.Rows rows(Option<String> given) {
    String name = given.isEmpty() ? "all" : given.get();
    try {
      return TopicTableLog.Rows.valueOf(name.toUpperCase(java.util.Locale.ROOT));
    } catch (IllegalArgumentException e) {
      throw new IllegalArgumentException(SHORT_NAME + ": rows must be all, plain or marked, not '" + name + "'");
    }
  }

  /** The record schema, {@code partition} included (Spark takes its values from the paths). */
  static StructType recordSchema() {
    return schema(SCHEMA_RESOURCE);
  }

  /** A schema the build wrote into the jar as DDL (laketail.spark.jvm.build). */
  static StructType schema(String resource) {
    try (InputStream in = TopicTableSource.class.getClassLoader().getResourceAsStream(resource)) {
      if (in == null) {
        throw new IllegalStateException(resource + " is missing from the laketail jar: rebuild it");
      }
      return StructType.fromDDL(new String(in.readAllBytes(), StandardCharsets.UTF_8).strip());
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
  }
}
