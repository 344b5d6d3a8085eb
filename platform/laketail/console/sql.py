"""A small SQL ``SELECT`` over a topic's Delta table, through pyarrow (no Spark).

Where a broker has no Spark session, the console still answers the questions people
ask of a topic ("the last records of partition 3", "records with this key"). The
grammar, case-insensitive, one table::

    SELECT * | COUNT(*) | column [, column ...]
    FROM topic                      -- or `topic` for names SQL needs quoted
    [WHERE condition [AND condition ...]]
    [ORDER BY column [ASC | DESC]]
    [LIMIT n]

    condition := column (= | != | <> | < | <= | > | >=) literal
               | column IS [NOT] NULL
    literal   := integer | 'text' ('' is a quote) | TRUE | FALSE

Columns are the record schema's (docs/architecture.md §4.2). ``topic`` shows committed data
only, as the Spark views do: no transaction markers (``control`` not null), no records of
aborted transactions, nothing from a transaction whose end is not in the table yet
(:func:`committed_filter`, from :mod:`laketail.spark.isolation`'s ranges over the
table's transactional rows only; a table without transactions costs nothing more). A
text literal compared with ``key`` or ``value`` is compared as UTF-8 bytes,
with ``timestamp`` as an ISO-8601 time. :func:`parse` is pure and raises
INVALID_REQUEST for anything outside the grammar; :func:`run` reads the table
(blocking IO: call it from a worker thread) and returns at most ``max_rows`` rows.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.fs as pafs
from deltalake import DeltaTable
from deltalake.exceptions import TableNotFoundError

from laketail.errors import InvalidRequest
from laketail.records import RECORD_SCHEMA

_TOKEN = re.compile(
    r"\s*(?:(?P<num>-?\d+)|(?P<str>'(?:[^']|'')*')|(?P<quoted>`[^`]+`)|(?P<op><=|>=|!=|<>|=|<|>)"
    r"|(?P<word>[A-Za-z_][A-Za-z0-9_.\-]*)|(?P<punct>[*,()]))"
)
_OPS = {"=": "==", "!=": "!=", "<>": "!=", "<": "<", "<=": "<=", ">": ">", ">=": ">="}
_KEYWORDS = {"select", "from", "where", "and", "order", "by", "asc", "desc", "limit", "is", "not", "null", "count"}


@dataclass(frozen=True)
class Condition:
    column: str
    op: str  # one of _OPS' values, or "is_null" / "is_not_null"
    value: Any = None


@dataclass
class Query:
    table: str
    columns: list[str] | None = None  # None: every column
    count: bool = False
    where: list[Condition] = field(default_factory=list)
    order_by: str | None = None
    descending: bool = False
    limit: int | None = None


def _tokens(text: str) -> list[tuple[str, str]]:
    out = []
    pos = 0
    text = text.strip().rstrip(";").strip()
    while pos < len(text):
        match = _TOKEN.match(text, pos)
        if match is None or match.end() == pos:
            raise InvalidRequest(f"SQL: unexpected text at {pos}: {text[pos:pos + 20]!r}")
        kind = match.lastgroup or ""
        out.append((kind, match.group(kind)))
        pos = match.end()
    return out


class _Parser:
    def __init__(self, text: str) -> None:
        self.tokens = _tokens(text)
        self.pos = 0

    def peek(self) -> tuple[str, str] | None:
        return self.tokens[self.pos] if self.pos < len(self.tokens) else None

    def next(self, what: str) -> tuple[str, str]:
        token = self.peek()
        if token is None:
            raise InvalidRequest(f"SQL: expected {what}, found the end of the query")
        self.pos += 1
        return token

    def keyword(self, word: str) -> bool:
        token = self.peek()
        if token is not None and token[0] == "word" and token[1].lower() == word:
            self.pos += 1
            return True
        return False

    def expect(self, word: str) -> None:
        if not self.keyword(word):
            token = self.peek()
            raise InvalidRequest(f"SQL: expected {word.upper()}, found {token[1] if token else 'the end'!r}")

    def name(self, what: str) -> str:
        kind, text = self.next(what)
        if kind == "quoted":
            return text[1:-1]
        if kind != "word" or text.lower() in _KEYWORDS:
            raise InvalidRequest(f"SQL: expected {what}, found {text!r}")
        return text

    def literal(self) -> Any:
        kind, text = self.next("a literal")
        if kind == "num":
            return int(text)
        if kind == "str":
            return text[1:-1].replace("''", "'")
        if kind == "word" and text.lower() in ("true", "false"):
            return text.lower() == "true"
        raise InvalidRequest(f"SQL: expected a number, 'text', TRUE or FALSE, found {text!r}")


def parse(text: str) -> Query:
    """The query ``text`` asks, or INVALID_REQUEST saying where it leaves the grammar."""
    p = _Parser(text)
    p.expect("select")
    columns: list[str] | None = None
    count = False
    if p.peek() == ("punct", "*"):
        p.pos += 1
    elif p.keyword("count"):
        for expected in ("(", "*", ")"):
            if p.next("COUNT(*)") != ("punct", expected):
                raise InvalidRequest("SQL: only COUNT(*) is supported")
        count = True
    else:
        columns = [p.name("a column")]
        while p.peek() == ("punct", ","):
            p.pos += 1
            columns.append(p.name("a column"))
    p.expect("from")
    query = Query(p.name("a topic"), columns, count)
    if p.keyword("where"):
        while True:
            column = p.name("a column")
            if p.keyword("is"):
                negated = p.keyword("not")
                p.expect("null")
                query.where.append(Condition(column, "is_not_null" if negated else "is_null"))
            else:
                kind, op = p.next("a comparison")
                if kind != "op":
                    raise InvalidRequest(f"SQL: expected a comparison after {column}, found {op!r}")
                query.where.append(Condition(column, _OPS[op], p.literal()))
            if not p.keyword("and"):
                break
    if p.keyword("order"):
        p.expect("by")
        query.order_by = p.name("a column")
        if p.keyword("desc"):
            query.descending = True
        else:
            p.keyword("asc")
    if p.keyword("limit"):
        kind, text = p.next("a row count")
        if kind != "num" or int(text) < 0:
            raise InvalidRequest(f"SQL: LIMIT takes a row count, found {text!r}")
        query.limit = int(text)
    if p.peek() is not None:
        raise InvalidRequest(f"SQL: unexpected {p.peek()[1]!r} (supported: SELECT ... FROM ... WHERE ... "  # type: ignore[index]
                             "ORDER BY ... LIMIT ...)")
    for name in (query.columns or []) + [c.column for c in query.where] + (
            [query.order_by] if query.order_by else []):
        if name not in RECORD_SCHEMA.names:
            raise InvalidRequest(f"SQL: unknown column {name!r} (columns: {', '.join(RECORD_SCHEMA.names)})")
    return query


def _scalar(column: str, value: Any) -> pa.Scalar:
    kind = RECORD_SCHEMA.field(column).type
    try:
        if pa.types.is_binary(kind) and isinstance(value, str):
            return pa.scalar(value.encode(), kind)
        if pa.types.is_timestamp(kind) and isinstance(value, str):
            moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
            if moment.tzinfo is None:
                moment = moment.replace(tzinfo=timezone.utc)
            return pa.scalar(moment, kind)
        return pa.scalar(value, kind)
    except (ValueError, TypeError, pa.ArrowInvalid, pa.ArrowTypeError) as exc:
        raise InvalidRequest(f"SQL: {value!r} cannot be compared with {column} ({kind})") from exc


def committed_filter(dataset: ds.Dataset) -> ds.Expression:
    """What read_committed leaves of the table: data rows that are not transactional
    or whose transaction committed (per partition, from its markers)."""
    from laketail.spark.isolation import TXN_COLUMNS, transaction_ranges

    data = ds.field("control").is_null()
    txn = dataset.to_table(columns=["partition", *TXN_COLUMNS],
                           filter=ds.field("transactional") | ~data)
    if txn.num_rows == 0:
        return data
    condition = data
    partitions = txn.column("partition")
    for partition in pc.unique(partitions).to_pylist():
        ranges = transaction_ranges(txn.filter(pc.equal(partitions, partition)))
        here = ds.field("partition") == partition
        for producer_id, after, before in ranges.aborted:
            if producer_id in ranges.aborted_producers:
                continue
            condition &= ~(here & (ds.field("producer_id") == producer_id) & (ds.field("offset") > after)
                           & (ds.field("offset") < before))
        if ranges.aborted_producers:
            condition &= ~(here & ds.field("producer_id").isin(sorted(ranges.aborted_producers)))
        if ranges.stable_offset is not None:
            condition &= ~(here & (ds.field("offset") >= ranges.stable_offset))
    return condition


def _filter(query: Query, committed: ds.Expression) -> ds.Expression:
    condition = committed
    for c in query.where:
        f = ds.field(c.column)
        if c.op == "is_null":
            term = f.is_null()
        elif c.op == "is_not_null":
            term = ~f.is_null()
        else:
            value = _scalar(c.column, c.value)
            term = {"==": f == value, "!=": f != value, "<": f < value, "<=": f <= value,
                    ">": f > value, ">=": f >= value}[c.op]
        condition = condition & term
    return condition


def table_dataset(table_uri: str) -> ds.Dataset:
    """The table's current files as a Parquet dataset (``partition`` from their paths).

    Not delta-rs's ``to_pyarrow_dataset``: that one hands pyarrow each file's Delta
    statistics as a guarantee, and the tierer records statistics for ``offset`` and
    ``timestamp`` only, so a filter on any other column (``producer_id``,
    ``transactional``, ...) was pruned to nothing. The files' own Parquet statistics
    are right for every column."""
    try:
        files = DeltaTable(table_uri).file_uris()
    except TableNotFoundError:
        files = []
    filesystem, base = None, table_uri
    if "://" in table_uri:
        filesystem, base = pafs.FileSystem.from_uri(table_uri)
        files = [pafs.FileSystem.from_uri(f)[1] for f in files]
    partitioning = ds.partitioning(pa.schema([RECORD_SCHEMA.field("partition")]), flavor="hive")
    return ds.dataset(files, schema=RECORD_SCHEMA, format="parquet", filesystem=filesystem,
                      partitioning=partitioning, partition_base_dir=base)


def run(query: Query, table_uri: str, max_rows: int = 1000) -> pa.Table:
    """The query's rows (at most ``max_rows``; a ``COUNT(*)`` is one row ``count``)."""
    dataset = table_dataset(table_uri)
    condition = _filter(query, committed_filter(dataset))
    if query.count:
        return pa.table({"count": [dataset.count_rows(filter=condition)]})
    columns = query.columns or list(RECORD_SCHEMA.names)
    limit = min(query.limit if query.limit is not None else max_rows, max_rows)
    if query.order_by is None:
        return dataset.head(limit, columns=columns, filter=condition) if limit else dataset.head(0, columns=columns)
    needed = list(dict.fromkeys(columns + [query.order_by]))
    rows = dataset.to_table(columns=needed, filter=condition)
    order = "descending" if query.descending else "ascending"
    if limit < rows.num_rows:
        indices = pc.select_k_unstable(rows, limit, [(query.order_by, order)])
        rows = rows.take(indices)
    rows = rows.sort_by([(query.order_by, order)])
    return rows.select(columns)
