package laketail;

import java.util.Map;
import laketail.spark.jvm.BatchPlan;
import laketail.spark.jvm.SourceTable;
import org.apache.spark.sql.classic.SparkSession;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableProvider;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.execution.datasources.v2.python.PythonDataSourceV2;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * {@code format("laketail")} where laketail's jar is on Spark's classpath: the Python data source
 * of that name (laketail.spark.datasource), with batch reads of fully tiered ranges through Spark's
 * own Parquet reader.
 *
 * <p>How Spark finds it: {@code format("laketail")} names no registered short name of a JVM source,
 * so Spark loads the class {@code laketail.DefaultSource}, this one. The Python source is
 * registered as {@code laketail_python} by laketail's {@code register} when it finds the jar
 * loaded (as {@code laketail} where Spark registered {@code pyspark_laketail} at startup); this
 * provider reaches it through {@link PythonDataSourceV2}, as Spark itself does, and hands it
 * everything but the batch scan: schema, streaming reads and writes. A session without the jar
 * uses the Python source as {@code laketail}, with the same options and rows.
 *
 * <p>What a batch read does is {@link SourceTable}'s and {@link laketail.spark.jvm.BatchPlan}'s.
 */
public final class DefaultSource implements TableProvider {
  /**
   * The Python source's name where laketail's {@code register} found the jar: Spark refuses to
   * register a Python source under a name a JVM class answers to, {@code laketail} here.
   */
  public static final String PYTHON_SOURCE = "laketail_python";
  /** Its name where Spark registered it at startup ({@code pyspark_laketail}). */
  public static final String STATIC_PYTHON_SOURCE = "laketail";

  private PythonDataSourceV2 python;

  /** The Python source, looked up in the active session by the first call. */
  private synchronized PythonDataSourceV2 python() {
    if (python == null) {
      python = newPython();
    }
    return python;
  }

  /**
   * A provider of the Python source of its own. Spark's provider keeps the Python data source and
   * read it made for the first scan's options, so a read with other options (a batch plan's tail)
   * needs one of its own.
   */
  private static PythonDataSourceV2 newPython() {
    SparkSession spark = (SparkSession) SparkSession.active();
    boolean renamed = spark.sessionState().dataSourceManager().dataSourceExists(PYTHON_SOURCE);
    PythonDataSourceV2 provider = new PythonDataSourceV2();
    provider.setShortName(renamed ? PYTHON_SOURCE : STATIC_PYTHON_SOURCE);
    return provider;
  }

  /**
   * The Kafka source's columns; the Python source is asked (a round trip to a Python worker) only
   * for options the jar's plan leaves to it, so that it checks them as it always does.
   */
  @Override
  public StructType inferSchema(CaseInsensitiveStringMap options) {
    StructType known = BatchPlan.schema(options);
    return known != null ? known : python().inferSchema(options);
  }

  @Override
  public Transform[] inferPartitioning(CaseInsensitiveStringMap options) {
    return python().inferPartitioning(options);
  }

  @Override
  public Table getTable(StructType schema, Transform[] partitioning, Map<String, String> properties) {
    return new SourceTable(python().getTable(schema, partitioning, properties),
        () -> newPython().getTable(schema, partitioning, properties));
  }

  @Override
  public boolean supportsExternalMetadata() {
    return python().supportsExternalMetadata();
  }
}
