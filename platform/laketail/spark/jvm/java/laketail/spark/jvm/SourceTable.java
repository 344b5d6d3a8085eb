package laketail.spark.jvm;

import java.util.EnumSet;
import java.util.Map;
import java.util.Set;
import java.util.function.Supplier;
import org.apache.spark.sql.SQLContext;
import org.apache.spark.sql.connector.catalog.Column;
import org.apache.spark.sql.connector.catalog.SupportsRead;
import org.apache.spark.sql.connector.catalog.SupportsWrite;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableCapability;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.connector.read.Batch;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.connector.read.SupportsPushDownRequiredColumns;
import org.apache.spark.sql.connector.read.V1Scan;
import org.apache.spark.sql.connector.read.streaming.ContinuousStream;
import org.apache.spark.sql.connector.read.streaming.MicroBatchStream;
import org.apache.spark.sql.connector.write.LogicalWriteInfo;
import org.apache.spark.sql.connector.write.WriteBuilder;
import org.apache.spark.sql.sources.BaseRelation;
import org.apache.spark.sql.sources.TableScan;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * The {@code laketail} source's table where the jar is loaded: the Python source's table, except
 * for the batch scan.
 *
 * <p>Role: streaming reads ({@link Scan#toMicroBatchStream}) and writes go to the Python table
 * unchanged. A batch scan is a {@link V1Scan}: Spark asks it for a relation when it plans the
 * query's execution, and {@link BatchPlan} makes one then, from the topics' offsets and tables
 * as they are at that moment (so a view {@code USING laketail} is fresh at every query). Column
 * pruning is honoured: the relation produces only the columns the query reads.
 *
 * <p>Thread-safety: a table is immutable; a scan builder belongs to one planning thread.
 */
public final class SourceTable implements Table, SupportsRead, SupportsWrite {
  private final Table python;
  private final Supplier<Table> freshPython;

  /**
   * {@code python}: the Python source's table; {@code freshPython}: one of a provider of its own
   * each call, for reads with other options than the table's first scan (see {@link BatchPlan}).
   */
  public SourceTable(Table python, Supplier<Table> freshPython) {
    this.python = python;
    this.freshPython = freshPython;
  }

  @Override
  public String name() {
    return python.name();
  }

  @Override
  @SuppressWarnings("deprecation")
  public StructType schema() {
    return python.schema();
  }

  @Override
  public Column[] columns() {
    return python.columns();
  }

  @Override
  public Transform[] partitioning() {
    return python.partitioning();
  }

  @Override
  public Map<String, String> properties() {
    return python.properties();
  }

  @Override
  public Set<TableCapability> capabilities() {
    Set<TableCapability> out = EnumSet.noneOf(TableCapability.class);
    out.addAll(python.capabilities());
    return out;
  }

  @Override
  public ScanBuilder newScanBuilder(CaseInsensitiveStringMap options) {
    return new Builder(python, freshPython, options, schema());
  }

  @Override
  public WriteBuilder newWriteBuilder(LogicalWriteInfo info) {
    return ((SupportsWrite) python).newWriteBuilder(info);
  }

  @Override
  public String toString() {
    return "laketail";
  }

  /** Builds a {@link SourceScan} of the columns the query reads. */
  private static final class Builder implements ScanBuilder, SupportsPushDownRequiredColumns {
    private final Table python;
    private final Supplier<Table> freshPython;
    private final CaseInsensitiveStringMap options;
    private final StructType full;
    private StructType required; // every column until Spark prunes

    Builder(Table python, Supplier<Table> freshPython, CaseInsensitiveStringMap options, StructType full) {
      this.python = python;
      this.freshPython = freshPython;
      this.options = options;
      this.full = full;
      this.required = full;
    }

    /**
     * The columns the query reads, each with its full type: a typed table's {@code value_struct}
     * is read whole (the Python source's tail produces it whole, and both sides are unioned).
     */
    @Override
    public void pruneColumns(StructType requiredSchema) {
      StructType out = new StructType();
      for (org.apache.spark.sql.types.StructField field : requiredSchema.fields()) {
        out = out.add(full.getFieldIndex(field.name()).isDefined() ? full.apply(field.name()) : field);
      }
      this.required = out;
    }

    @Override
    public Scan build() {
      return new SourceScan(python, freshPython, options, required);
    }
  }

  /**
   * A batch scan as a relation of {@link BatchPlan}'s; a streaming scan as the Python source's.
   */
  static final class SourceScan implements V1Scan {
    private final Table pythonTable;
    private final Supplier<Table> freshPython;
    private final CaseInsensitiveStringMap options;
    private final StructType required;
    private Scan python; // built on first use: a batch query never needs it

    SourceScan(Table pythonTable, Supplier<Table> freshPython, CaseInsensitiveStringMap options,
        StructType required) {
      this.pythonTable = pythonTable;
      this.freshPython = freshPython;
      this.options = options;
      this.required = required;
    }

    private synchronized Scan python() {
      if (python == null) {
        python = ((SupportsRead) pythonTable).newScanBuilder(options).build();
      }
      return python;
    }

    @Override
    public StructType readSchema() {
      return required;
    }

    /** The source's name only: options may hold client secrets (SASL, TLS), and plans get logged. */
    @Override
    public String description() {
      return "laketail";
    }

    @Override
    @SuppressWarnings("unchecked")
    public <T extends BaseRelation & TableScan> T toV1TableScan(SQLContext context) {
      return (T) BatchPlan.relation(context.sparkSession(), pythonTable, freshPython, options, required);
    }

    @Override
    public Batch toBatch() {
      return python().toBatch();
    }

    @Override
    public MicroBatchStream toMicroBatchStream(String checkpointLocation) {
      return python().toMicroBatchStream(checkpointLocation);
    }

    @Override
    public ContinuousStream toContinuousStream(String checkpointLocation) {
      return python().toContinuousStream(checkpointLocation);
    }
  }
}
