"""What every route shares: the broker, bounded bodies, ``acks``, and the produce call.

A produce route decodes its whole body into plain lists first (nothing touches the
broker until every record decoded), then hands them to :func:`produce`, which builds
one Arrow batch in ``PRODUCE_SCHEMA`` and calls ``broker.produce`` once. With
``acks=0`` the records are checked here (topic, partition range, ``max.message.bytes``)
and the append runs as a task the app keeps a reference to, so the response goes out
right after validation, as Kafka's acks=0 does.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from itertools import chain
from typing import TYPE_CHECKING, Annotated, Any, Literal, Mapping, overload
from urllib.parse import parse_qsl

import orjson
import pyarrow as pa
from fastapi import Query, Request
from pydantic import BeforeValidator, Field
from starlette.responses import Response

from laketail.bounds import INT16_MAX, INT32_MAX, INT32_MIN, INT64_MAX, INT64_MIN, is_decimal, parse_int
from laketail.errors import (
    InvalidRequest,
    LaketailError,
    RecordTooLarge,
    UnknownCluster,
    UnknownTopicOrPartition,
)
from laketail.records import HEADER_TYPE, Acks, IsolationLevel, payload_bytes
from laketail.storage.partition_log import ProducerBatch

if TYPE_CHECKING:
    from laketail.api.metrics import GatewayMetrics
    from laketail.broker import Broker, FetchResult, ProduceResult

log = logging.getLogger(__name__)

_ACKS: dict[str, Acks] = {"0": "0", "1": "1", "all": "all", "-1": "all"}
#: Query strings that hold only ``acks``, as the raw bytes: looked up, not parsed.
_ACKS_ONLY: dict[bytes, Acks] = {b"acks=" + raw.encode(): acks for raw, acks in _ACKS.items()}

# -- Kafka's integer types in request bodies (see laketail.bounds) ----------------------------

#: A partition id: an int32 (whether it exists is the topic's business).
Int32 = Annotated[int, Field(ge=INT32_MIN, le=INT32_MAX)]
#: A producer id, a batch id, any other Kafka int64.
Int64 = Annotated[int, Field(ge=INT64_MIN, le=INT64_MAX)]
#: A committed offset: the next offset to read, -1 for none.
CommittedOffsetValue = Annotated[int, Field(ge=-1, le=INT64_MAX,
                                            description="the next offset to read (-1: none)")]


def _decimal(value: Any) -> Any:
    """A path or query integer FastAPI parses, held to :func:`laketail.bounds.is_decimal`
    as the hot routes' own parameters are (pydantic alone reads ``" 5"``, ``"+5"``,
    ``"1_000"`` and ``"5.0"`` as numbers)."""
    if type(value) is str and not is_decimal(value):
        raise ValueError("must be an integer (decimal digits)")
    return value


# The bounds come before the validator: in the other order FastAPI's OpenAPI document
# says "ge"/"le" where it should say "minimum"/"maximum".
#: A partition in a path or query that FastAPI parses: decimal digits, an int32.
PartitionParam = Annotated[int, Field(ge=INT32_MIN, le=INT32_MAX), BeforeValidator(_decimal)]
#: Any other integer in a path or query that FastAPI parses: decimal digits, an int64.
Int64Param = Annotated[int, Field(ge=INT64_MIN, le=INT64_MAX), BeforeValidator(_decimal)]

ACKS_QUERY = Query(
    "all",
    pattern="^(0|1|all|-1)$",
    description="0: answer right after validation (offsets unknown); 1: after the leader's "
    "append; all (or -1): once every in-sync replica has the records (as 1 with one replica).",
)

# -- hot-path parameters ----------------------------------------------------------------
#
# The produce and fetch routes take only ``request`` and read their path and query
# parameters with the helpers below: FastAPI's per-request parameter solving costs more
# than the rest of a small produce. ``openapi_params`` documents them instead.


def path_param(name: str, kind: str = "string", description: str = "") -> dict:
    schema = {"type": kind, "format": "int32"} if kind == "integer" else {"type": kind}  # partitions
    return {"name": name, "in": "path", "required": True, "schema": schema, "description": description}


def query_param(name: str, schema: dict, description: str = "", required: bool = False) -> dict:
    return {"name": name, "in": "query", "required": required, "schema": schema,
            "description": description}


ACKS_PARAM = query_param(
    "acks", {"type": "string", "enum": ["0", "1", "all", "-1"], "default": "all"},
    ACKS_QUERY.description or "",
)
ISOLATION_PARAM = query_param(
    "isolation_level", {"type": "string", "enum": ["read_committed", "read_uncommitted"],
                        "default": "read_committed"},
    "read_committed stops at the last stable offset and skips aborted records",
)


PRODUCER_PARAMS = (
    query_param("producer_id", {"type": "integer", "minimum": 0},
                "idempotent/transactional produce: the id from POST /v1/producers"),
    query_param("producer_epoch", {"type": "integer", "minimum": 0, "maximum": 32767},
                "the epoch from POST /v1/producers (with producer_id)"),
    query_param("sequence", {"type": "integer", "minimum": 0, "maximum": 2**31 - 1},
                "the sequence of this batch's first record; per producer and partition it starts "
                "at 0 and grows by the record count (with producer_id). A retried batch keeps its "
                "sequence and is answered with its original offsets"),
    query_param("transactional", {"type": "boolean", "default": False},
                "the batch belongs to the producer's open transaction (with producer_id)"),
)


def openapi_params(*params: dict) -> dict:
    return {"parameters": list(params)}


def acks_of(request: Request) -> Acks:
    query = request.scope["query_string"]
    if b"acks" not in query:
        return "all"  # the common case skips parsing the query string
    acks = _ACKS_ONLY.get(query)  # the next most common: "?acks=1" and nothing else
    if acks is not None:
        return acks
    raw = request.query_params.get("acks")
    return "all" if raw is None else parse_acks(raw)


def path_int(request: Request, name: str, maximum: int = INT32_MAX) -> int:
    """An integer path parameter (a partition unless told otherwise: an int32)."""
    return parse_int(request.path_params[name], f"path parameter {name}", -maximum - 1, maximum)


@overload
def query_int(request: Request, name: str, default: int, *, minimum: int | None = None) -> int: ...
@overload
def query_int(request: Request, name: str, *, minimum: int | None = None, required: Literal[True]) -> int: ...
@overload
def query_int(request: Request, name: str, default: int | None = None, *,
              minimum: int | None = None, required: bool = False) -> int | None: ...
def query_int(request: Request, name: str, default: int | None = None, *,
              minimum: int | None = None, required: bool = False) -> int | None:
    """An int64 query parameter (offsets, timeouts, bounds), at least ``minimum``."""
    return int_param(request.query_params, name, default, minimum=minimum, required=required)


def query_of(request: Request) -> Mapping[str, str]:
    """The query parameters as ``request.query_params`` has them (the last of a repeated
    name wins). A query without escapes (no ``%`` nor ``+``, so nothing to unquote) is
    split here, without Starlette's multi-dict: the fetch routes' hot path."""
    raw: bytes = request.scope.get("query_string", b"")
    if b"%" in raw or b"+" in raw:
        return request.query_params
    params = {}
    for pair in raw.decode("latin-1").split("&"):
        if pair:
            name, _, value = pair.partition("=")
            params[name] = value
    return params


def int_param(params: Mapping[str, str], name: str, default: int | None = None, *,
              minimum: int | None = None, required: bool = False) -> int | None:
    """:func:`query_int` over parameters already parsed (:func:`query_of`)."""
    raw = params.get(name)
    if raw is None:
        if required:
            raise InvalidRequest(f"query parameter {name} is required")
        return default
    if raw == "":  # given but empty: refused, as the parameters FastAPI parses are
        raise InvalidRequest(f"query parameter {name} is empty")
    return parse_int(raw, f"query parameter {name}", INT64_MIN if minimum is None else minimum, INT64_MAX)


_PRODUCER_KEYS = ("producer_id", "producer_epoch", "sequence")
_PRODUCER_BOUNDS = {"producer_id": INT64_MAX, "producer_epoch": INT16_MAX, "sequence": INT32_MAX}


#: Where :class:`laketail.api.authz.Authorization` leaves the producer it decided on, so the
#: route executes the very batch that was authorized (``scope["state"]``).
PRODUCER_STATE_KEY = "laketail.producer"
_PRODUCER_NAMES = (*_PRODUCER_KEYS, "transactional")


def producer_of(request: Request) -> ProducerBatch | None:
    """The producer a batch comes from, as authorization decided it (the same parse,
    :func:`producer_params`, done once per request)."""
    state = request.scope.get("state")
    if state is not None and PRODUCER_STATE_KEY in state:
        return state[PRODUCER_STATE_KEY]
    return producer_params(request.scope["query_string"])


def producer_params(query: bytes) -> ProducerBatch | None:
    """The producer a produce's query names (``producer_id``, ``producer_epoch``,
    ``sequence``, ``transactional``), or ``None`` for a plain produce. The three numbers
    come together, each a non-negative integer in its Kafka type's range.

    The names are read decoded (``producer%5Fid`` is ``producer_id``). A spelling that
    could be read two ways is INVALID_REQUEST: one of these names given twice (however
    escaped), or in another case (``Producer_ID``: a lenient reader would take it, this
    one would not)."""
    lowered = query.lower()
    if b"%" not in lowered and b"producer" not in lowered and b"sequence" not in lowered \
            and b"transactional" not in lowered:
        return None  # the common case skips parsing the query string
    params: dict[str, str] = {}
    for name, value in parse_qsl(query.decode("latin-1"), keep_blank_values=True):
        canonical = name.lower()
        if canonical not in _PRODUCER_NAMES:
            continue
        if name != canonical:
            raise InvalidRequest(f"query parameter {name!r} is spelled {canonical!r}")
        if name in params:
            raise InvalidRequest(f"query parameter {name} is given more than once")
        params[name] = value
    raw_txn = params.get("transactional", "false")
    if raw_txn.lower() not in ("true", "false"):
        raise InvalidRequest(f"query parameter transactional must be true or false, got {raw_txn!r}")
    transactional = raw_txn.lower() == "true"
    given = [k for k in _PRODUCER_KEYS if k in params]
    for key in given:
        if params[key] == "":  # refused, not read as a plain produce: an idempotent producer lost its numbers
            raise InvalidRequest(f"query parameter {key} is empty")
    if not given and not transactional:
        return None
    if len(given) != len(_PRODUCER_KEYS):
        missing = [k for k in _PRODUCER_KEYS if k not in given]
        raise InvalidRequest(
            f"an idempotent produce needs producer_id, producer_epoch and sequence; missing {missing}"
        )
    values = {
        key: parse_int(params[key], f"query parameter {key}", 0, _PRODUCER_BOUNDS[key]) for key in _PRODUCER_KEYS
    }
    return ProducerBatch(values["producer_id"], values["producer_epoch"], values["sequence"], transactional)


def refuse_producer(request: Request) -> None:
    """For produce endpoints that spread records over partitions: producer parameters
    are not silently ignored there."""
    if producer_of(request) is not None:
        raise InvalidRequest(
            "idempotent and transactional batches go to one partition: use the per-partition endpoint"
        )


def isolation_of(params: Mapping[str, str]) -> IsolationLevel:
    """The ``isolation_level`` of parsed query parameters (:func:`query_of`)."""
    raw = params.get("isolation_level", "read_committed")
    if raw not in ("read_committed", "read_uncommitted"):
        raise InvalidRequest(f"isolation_level must be read_committed or read_uncommitted, got {raw!r}")
    return raw  # type: ignore[return-value]


async def fetch_by_offset(request: Request, topic: str) -> "FetchResult":
    """The fetch both by-offset endpoints make, from the path and query parameters
    (``offset`` required; ``max_records``, ``max_bytes``, ``timeout``, ``isolation_level``)."""
    params = query_of(request)
    return await broker_of(request).fetch(
        topic,
        path_int(request, "partition"),
        int_param(params, "offset", required=True),  # type: ignore[arg-type]
        max_records=int_param(params, "max_records", minimum=1),
        max_bytes=int_param(params, "max_bytes", minimum=1),
        timeout_ms=int_param(params, "timeout", 0, minimum=0),  # type: ignore[arg-type]
        isolation=isolation_of(params),
    )


def broker_of(request: Request) -> "Broker":
    return request.app.state.broker


def metrics_of(request: Request) -> "GatewayMetrics":
    return request.app.state.metrics


def parse_acks(raw: str) -> Acks:
    try:
        return _ACKS[raw]
    except KeyError:
        raise InvalidRequest(f"acks must be 0, 1, all or -1, got {raw!r}") from None


def check_cluster(broker: "Broker", cluster_id: str) -> None:
    if cluster_id != broker.cluster_id:
        raise UnknownCluster(f"cluster '{cluster_id}' is not this cluster ('{broker.cluster_id}')")


class BytesResponse(Response):
    """A 200 whose body and headers are already bytes: what ``Response`` sends, without
    building its header list from a mapping (the fetch routes answer thousands of
    requests a second; header names lower-case, as ``Response`` writes them)."""

    def __init__(self, body: bytes, media_type: bytes, headers: list[tuple[bytes, bytes]] | None = None) -> None:
        self.status_code = 200
        self.body = body
        self.background = None
        self.raw_headers = [(b"content-length", b"%d" % len(body)), (b"content-type", media_type), *(headers or ())]


def json_response(doc: Any, status: int = 200, media_type: str = "application/json",
                  headers: dict[str, str] | None = None) -> Response:
    return Response(orjson.dumps(doc), status_code=status, media_type=media_type, headers=headers)


async def read_body(request: Request) -> bytes:
    """The whole body, bounded by ``socket.request.max.bytes``.

    A declared Content-Length was already checked by the BodyLimit middleware; a
    chunked body is counted here as it arrives.
    """
    if "content-length" in request.headers:
        return await request.body()
    limit = request.app.state.settings.socket_request_max_bytes
    chunks = []
    total = 0
    async for chunk in request.stream():
        total += len(chunk)
        if total > limit:
            raise RecordTooLarge(
                f"request body is above socket.request.max.bytes={limit}"
            )
        chunks.append(chunk)
    return b"".join(chunks)


#: How deeply JSON request bodies may nest (objects and arrays). One limit for every
#: body: a record's JSON value sits two or three levels down, so it stays far below
#: what orjson writes (254 levels) and what Python's recursion limit allows.
MAX_JSON_DEPTH = 128


def parse_json(body: bytes, *, nested_values: bool = True) -> Any:
    """orjson, with broken JSON or JSON nested deeper than :data:`MAX_JSON_DEPTH` as
    INVALID_REQUEST (400/40002). Every JSON body a route reads itself comes through here.

    ``nested_values=False`` is for bodies whose every value is then checked to be a
    string, a number or a list of flat objects (v2 ``binary`` produce, the hot path):
    nothing nested in them can reach an encoder, orjson itself stops at 1024 levels,
    and the depth walk would cost as much as the parse."""
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise InvalidRequest(f"request body is not valid JSON: {exc}") from None
    # Fewer brackets than the limit cannot nest deeper (two scans in C).
    if nested_values and body.count(b"[") + body.count(b"{") > MAX_JSON_DEPTH:
        check_json_depth(doc)
    return doc


def check_json_depth(doc: Any, what: str = "request body") -> None:
    """INVALID_REQUEST when ``doc`` nests objects and arrays deeper than
    :data:`MAX_JSON_DEPTH`. Level by level, without recursion; a level whose members are
    all of one kind is taken apart by C-level iteration (``map``, ``chain``), so the
    usual body -- a list of records holding strings -- costs a few set builds."""
    level = [doc] if type(doc) in _CONTAINERS else []
    depth = 0
    while level:
        depth += 1
        if depth > MAX_JSON_DEPTH:
            raise InvalidRequest(f"{what} nests JSON deeper than {MAX_JSON_DEPTH} levels")
        kinds = set(map(type, level))
        if kinds == {dict}:
            children = list(chain.from_iterable(map(dict.values, level)))
        elif kinds == {list}:
            children = list(chain.from_iterable(level))
        else:
            children = list(chain.from_iterable(c.values() if type(c) is dict else c for c in level))
        kinds = set(map(type, children))
        if not kinds & _CONTAINERS:
            return
        level = children if kinds <= _CONTAINERS else [c for c in children if type(c) in _CONTAINERS]


_CONTAINERS = {dict, list}


@dataclass
class Records:
    """A decoded produce request, column by column (``None`` = column absent).

    ``values`` is a list, or already an Arrow binary column (a values-only v2 body,
    :func:`laketail.api.routes.produce.values_only_records`)."""

    values: list[bytes | None] | pa.Array = field(default_factory=list)
    keys: list[bytes | None] | None = None
    headers: list[list[tuple[str, bytes | None]] | None] | None = None
    partitions: list[int | None] | None = None
    timestamps: list[int | None] | None = None

    def __len__(self) -> int:
        return len(self.values)

    def payload_bytes(self) -> int:
        if isinstance(self.values, pa.Array):
            total = payload_bytes(self.values)
        else:
            total = sum(map(len, filter(None, self.values)))
        if self.keys is not None:
            total += sum(map(len, filter(None, self.keys)))
        return total

    def to_batch(self) -> pa.RecordBatch:
        """One Arrow batch with ``PRODUCE_SCHEMA``'s column names and types."""
        values = self.values
        arrays = [values if isinstance(values, pa.Array) else pa.array(values, pa.binary())]
        names = ["value"]
        if self.keys is not None:
            arrays.append(pa.array(self.keys, pa.binary()))
            names.append("key")
        if self.headers is not None:
            arrays.append(pa.array(
                [None if h is None else [{"key": k, "value": v} for k, v in h] for h in self.headers],
                HEADER_TYPE,
            ))
            names.append("headers")
        if self.timestamps is not None:
            arrays.append(pa.array(self.timestamps, pa.int64()))
            names.append("timestamp")
        if self.partitions is not None:
            arrays.append(pa.array(self.partitions, pa.int32()))
            names.append("partition")
        return pa.RecordBatch.from_arrays(arrays, names=names)


def record_error(topic: str, partitions: int, max_message_bytes: int,
                 size: int, partition: int | None, index: int) -> LaketailError | None:
    """Why one record would be refused (partition out of range, too large), or None."""
    if partition is not None and not 0 <= partition < partitions:
        return UnknownTopicOrPartition.partition(topic, partition)
    if size > max_message_bytes:
        return RecordTooLarge(
            f"record {index} is {size} bytes, above max.message.bytes={max_message_bytes}"
        )
    return None


async def produce(request: Request, topic: str, records: Records | pa.RecordBatch | pa.Table,
                  acks: Acks, producer: ProducerBatch | None = None, *,
                  per_record_errors: bool = False) -> "ProduceResult | None":
    """Append ``records`` to ``topic``; ``None`` for acks=0 (the append continues alone).

    With ``producer`` the batch is idempotent (or transactional): a retry gets its
    original offsets back, which acks=0 could never tell, so acks=0 is refused.
    ``per_record_errors``: for an answer that says per record what was written (see
    :meth:`laketail.produce_path.ProducePath.produce`)."""
    broker = broker_of(request)
    if not len(records):
        raise InvalidRequest("a produce request needs at least one record")
    batch = records.to_batch() if isinstance(records, Records) else records
    if producer is not None:
        if acks == "0":
            raise InvalidRequest("an idempotent or transactional produce needs acks=1 or all, not 0")
        return await broker.produce(topic, batch, acks=acks, producer=producer)
    if acks == "0":
        # Validation happens now (a bad request still gets its 4xx); the append goes on alone.
        spawn(request.app, broker.produce_nowait(topic, batch), f"acks=0 produce to {topic}")
        return None
    return await broker.produce(topic, batch, acks=acks, per_record_errors=per_record_errors)


def spawn(app: Any, work: Any, what: str) -> asyncio.Task:
    """Run ``work`` (a coroutine or a task) detached, keeping a reference until it ends
    (and logging failures)."""
    task = work if isinstance(work, asyncio.Task) else asyncio.get_running_loop().create_task(work)
    pending: set[asyncio.Task] = app.state.pending
    pending.add(task)

    def finished(t: asyncio.Task) -> None:
        pending.discard(t)
        if not t.cancelled() and t.exception() is not None:
            exc = t.exception()
            log.warning("%s failed: %s", what, exc)
            if isinstance(exc, LaketailError):
                app.state.metrics.count_error(exc)

    task.add_done_callback(finished)
    return task
