"""The console's SQL: Apache DataFusion over topics' Delta tables, read-only and bounded.

delta-rs ships DataFusion (``deltalake.QueryBuilder``), so the broker answers real SQL
-- ``GROUP BY``, joins, window functions, ``WITH`` -- without a Spark session. Each
query gets a fresh DataFusion session (nothing a query defines outlives it). Tables are
named as in the Spark views (docs/architecture.md §10.3):

* ``<topic>`` -- committed data only: no transaction markers (``control`` not null), no
  records of aborted transactions, nothing at or after a partition's first record whose
  transaction has no end in the table yet. The ranges come from
  :func:`laketail.spark.isolation.transaction_ranges` over the table's transactional
  and control rows (a table without transactions prunes them all by its Delta
  statistics) and become a view: ``WHERE control IS NULL``, an anti-join with the
  aborted ranges as a ``VALUES`` list, and a per-partition bound;
* ``<topic>_all`` -- every row of the table, markers and aborted records included.

Only the tables a query names are opened: :func:`run` plans the query, and each table
DataFusion reports missing (``table '...' not found``) is resolved by the caller's
``resolve`` -- which authorizes Read on the topic, as a Fetch of the whole table --
registered, and the query planned again. So the names checked are the names the engine
reads. Unquoted names are folded to lower case by SQL; quote others (``"My-Topic"``,
or MySQL's backticks). ``offset`` is an SQL keyword: write ``"offset"``.

Read-only: :func:`check_read_only` lets through one statement that starts with
``SELECT``, ``WITH`` or ``VALUES``, and DataFusion must then accept it as a subquery
(which no DDL, DML, ``COPY``, ``SET`` or ``SELECT ... INTO`` is); anything else is
INVALID_REQUEST before a table is opened. Bounded: one DataFusion thread
(``target_partitions`` 1), batches of :data:`BATCH_ROWS`, at most ``max_rows`` rows and
:data:`MAX_RESULT_BYTES` of Arrow data in the answer (``truncated`` says rows were left
out), and a deadline checked between batches (REQUEST_TIMED_OUT past it; dropping the
stream stops DataFusion's work). One query runs at a time per broker (:data:`SLOTS`);
another waits for the slot within its own deadline. DataFusion's memory is not capped
(delta-rs exposes no memory pool): a ``GROUP BY`` over millions of distinct keys holds
them all, within the deadline.

Blocking IO and CPU: call :func:`run` from a worker thread.
"""

from __future__ import annotations

import re
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Literal

import pyarrow as pa
from deltalake import DeltaTable, QueryBuilder
from deltalake.exceptions import DeltaError, TableNotFoundError

from laketail.errors import InvalidRequest, RequestTimedOut
from laketail.records import RECORD_SCHEMA

if TYPE_CHECKING:
    from laketail.spark.isolation import TransactionRanges

#: Rows per batch DataFusion hands back: the deadline and the caps are checked between them.
BATCH_ROWS = 256
#: Arrow bytes of the answer at most (values can be large; the page shows 1,000 rows at most).
MAX_RESULT_BYTES = 8 * 1024 * 1024
#: A query's deadline unless the request asks for less.
DEFAULT_TIMEOUT_MS = 30_000
#: Tables one query may name (each costs a Delta log read and a scan of transactional rows).
MAX_TABLES = 16
#: Queries running at once per broker process.
SLOTS = threading.BoundedSemaphore(1)

_SESSION_CONFIG = {
    "datafusion.execution.target_partitions": "1",
    "datafusion.execution.batch_size": str(BATCH_ROWS),
}
_QUERY_START = ("select", "with", "values")
_NOT_FOUND = re.compile(r"table '([^']*)' not found")
_INT64_MAX = 2**63 - 1

Kind = Literal["committed", "all"]


@dataclass(frozen=True)
class Table:
    """What a name in a query reads: ``topic``'s table at ``uri``, committed rows or all."""

    topic: str
    uri: str
    kind: Kind


@dataclass(frozen=True)
class Result:
    rows: pa.Table
    truncated: bool


def _strip_comments(text: str) -> str:
    """``text`` with SQL comments blanked out (strings and quoted names kept as they are)."""
    out: list[str] = []
    i = 0
    while i < len(text):
        c = text[i]
        if c in "'\"`":
            end = i + 1
            while end < len(text):
                if text[end] == c:
                    if end + 1 < len(text) and text[end + 1] == c:  # a doubled quote
                        end += 2
                        continue
                    break
                end += 1
            out.append(text[i:end + 1])
            i = end + 1
        elif text.startswith("--", i):
            end = text.find("\n", i)
            i = len(text) if end < 0 else end
            out.append(" ")
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            if end < 0:
                raise InvalidRequest("SQL: a /* comment is not closed")
            i = end + 2
            out.append(" ")
        else:
            out.append(c)
            i += 1
    return "".join(out)


def check_read_only(text: str) -> str:
    """The one statement of ``text`` (comments and a final ``;`` removed) if it is a
    query; INVALID_REQUEST otherwise. Pure: nothing is opened or planned."""
    statement = _strip_comments(text).strip()
    while statement.endswith(";"):
        statement = statement[:-1].rstrip()
    if not statement:
        raise InvalidRequest("SQL: the query is empty")
    first = re.match(r"[(\s]*([A-Za-z]+)", statement)
    word = first.group(1).lower() if first else statement.split()[0]
    if word not in _QUERY_START:
        raise InvalidRequest(f"SQL: the console runs queries only (SELECT, WITH ... SELECT, VALUES); "
                             f"{word.upper()} is refused: the console's SQL is read-only")
    return statement


def missing_table(message: str) -> str | None:
    """The name DataFusion could not find, from its planning error (``None``: another error).
    A name in DataFusion's default schema comes back bare; any other schema stays in it."""
    found = _NOT_FOUND.search(message)
    if found is None:
        return None
    name = found.group(1)
    for prefix in ("datafusion.public.", "public."):
        if name.startswith(prefix):
            return name[len(prefix):]
    return name


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def committed_view(raw: str, ranges: dict[int, TransactionRanges]) -> str:
    """The ``SELECT`` of committed rows over the registered table ``raw``, given each
    partition's :class:`~laketail.spark.isolation.TransactionRanges` (pure)."""
    aborted: list[tuple[int, int, int, int]] = []
    bounds: list[tuple[int, int]] = []
    for partition, r in sorted(ranges.items()):
        for producer_id, after, before in r.aborted:
            if producer_id not in r.aborted_producers:
                aborted.append((partition, producer_id, after, before))
        for producer_id in sorted(r.aborted_producers):
            aborted.append((partition, producer_id, -1, _INT64_MAX))
        if r.stable_offset is not None:
            bounds.append((partition, r.stable_offset))
    where = ["r.control IS NULL"]
    if aborted:
        values = ", ".join(f"({p}, {pid}, {lo}, {hi})" for p, pid, lo, hi in aborted)
        where.append(f"NOT EXISTS (SELECT 1 FROM (VALUES {values}) AS a(p, pid, lo, hi) "
                     'WHERE a.p = r.partition AND a.pid = r.producer_id AND r."offset" > a.lo AND r."offset" < a.hi)')
    if bounds:
        cases = " ".join(f"WHEN {p} THEN {offset}" for p, offset in bounds)
        where.append(f'r."offset" < CASE r.partition {cases} ELSE {_INT64_MAX} END')
    return f"SELECT r.* FROM {_quote(raw)} AS r WHERE " + " AND ".join(where)


#: An empty table's columns, typed as the record schema (a topic whose table has no commit yet).
_EMPTY = ("SELECT CAST(NULL AS INT) AS partition, CAST(NULL AS BIGINT) AS \"offset\", "
          "arrow_cast(NULL, 'Timestamp(Microsecond, Some(\"UTC\"))') AS timestamp, CAST(NULL AS TINYINT) AS "
          "timestamp_type, CAST(NULL AS BYTEA) AS key, CAST(NULL AS BYTEA) AS value, NULL AS headers, "
          "CAST(NULL AS BIGINT) AS producer_id, CAST(NULL AS SMALLINT) AS producer_epoch, "
          "CAST(NULL AS INT) AS sequence, CAST(NULL AS BOOLEAN) AS transactional, CAST(NULL AS VARCHAR) AS control, "
          "CAST(NULL AS INT) AS leader_epoch WHERE false")


def _read(builder: QueryBuilder, statement: str) -> pa.Table:
    return pa.RecordBatchReader.from_stream(builder.execute(statement)).read_all()


def _ranges(builder: QueryBuilder, raw: str) -> dict[int, TransactionRanges]:
    from laketail.spark.isolation import TXN_COLUMNS, transaction_ranges

    columns = ", ".join(["partition", *(_quote(c) for c in TXN_COLUMNS)])
    rows = _read(builder, f"SELECT {columns} FROM {_quote(raw)} WHERE transactional OR control IS NOT NULL")
    if rows.num_rows == 0:
        return {}
    rows = rows.cast(pa.schema([RECORD_SCHEMA.field(n) for n in rows.column_names]))
    out: dict[int, TransactionRanges] = {}
    partitions = rows.column("partition").to_pylist()
    for partition in sorted(set(partitions)):
        mask = pa.array([p == partition for p in partitions])
        out[partition] = transaction_ranges(rows.filter(mask))
    return out


def _register(builder: QueryBuilder, name: str, table: Table, index: int) -> None:
    """Make ``name`` a view of ``table`` in the query's session."""
    raw = f"__laketail_table_{index}"
    try:
        delta = DeltaTable(table.uri)
    except TableNotFoundError:
        body = _EMPTY
    else:
        builder.register(raw, delta)
        body = f"SELECT * FROM {_quote(raw)}" if table.kind == "all" else committed_view(raw, _ranges(builder, raw))
    _read(builder, f"CREATE VIEW {_quote(name)} AS {body}")


def _plan(builder: QueryBuilder, statement: str, resolve: Callable[[str], Table],
          deadline: float) -> pa.RecordBatchReader:
    """Plan ``statement``, registering each table DataFusion asks for through ``resolve``."""
    registered: set[str] = set()
    while True:
        try:
            return pa.RecordBatchReader.from_stream(builder.execute(statement))
        except DeltaError as exc:
            name = missing_table(str(exc))
            if name is None or name in registered:
                raise InvalidRequest(f"SQL: {_engine_message(exc)}") from exc
        if "." in name and name.startswith("datafusion."):
            raise InvalidRequest(f"SQL: no table {name!r}: a topic is a table of the default schema; "
                                 'quote names with dots ("my.topic")')
        if len(registered) >= MAX_TABLES:
            raise InvalidRequest(f"SQL: a query reads at most {MAX_TABLES} tables")
        table = resolve(name)
        _register(builder, name, table, len(registered))
        registered.add(name)
        if time.monotonic() > deadline:
            raise RequestTimedOut("SQL: the query's deadline passed while its tables were opened")


def _engine_message(exc: Exception) -> str:
    """DataFusion's message without delta-rs's wrapping (the first line says it)."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def run(text: str, resolve: Callable[[str], Table], *, max_rows: int, timeout_ms: int = DEFAULT_TIMEOUT_MS,
        max_bytes: int = MAX_RESULT_BYTES, clock: Callable[[], float] = time.monotonic) -> Result:
    """The rows of the query ``text`` (at most ``max_rows`` and ``max_bytes``)."""
    statement = check_read_only(text)
    deadline = clock() + timeout_ms / 1000
    if not SLOTS.acquire(timeout=max(deadline - clock(), 0)):
        raise RequestTimedOut(f"SQL: another console query held the broker's query slot for {timeout_ms} ms")
    try:
        builder = QueryBuilder(_SESSION_CONFIG)
        # DataFusion must plan the statement as a subquery (not run: its stream is closed
        # unread): no DDL, DML, COPY, SET or SELECT ... INTO is one.
        _plan(builder, f"SELECT * FROM (\n{statement}\n) AS console_query", resolve, deadline).close()
        reader = _plan(builder, statement, resolve, deadline)
        schema = reader.schema
        batches: list[pa.RecordBatch] = []
        rows = size = 0
        truncated = False
        try:
            while True:
                if clock() > deadline:
                    raise RequestTimedOut(f"SQL: the query ran past its {timeout_ms} ms deadline")
                try:
                    batch = reader.read_next_batch()
                except StopIteration:
                    break
                except (DeltaError, pa.ArrowException, OSError) as exc:
                    raise InvalidRequest(f"SQL: {_engine_message(exc)}") from exc
                if rows + batch.num_rows > max_rows:
                    batch = batch.slice(0, max_rows - rows)
                    truncated = True
                if size + batch.nbytes > max_bytes:
                    keep = 0
                    while keep < batch.num_rows and size + batch.slice(0, keep + 1).nbytes <= max_bytes:
                        keep += 1
                    batch = batch.slice(0, keep)
                    truncated = True
                batches.append(batch)
                rows += batch.num_rows
                size += batch.nbytes
                if truncated:
                    break
        finally:
            reader.close()  # stops DataFusion's work on what is left
        return Result(pa.Table.from_batches(batches, schema=schema), truncated)
    finally:
        SLOTS.release()
