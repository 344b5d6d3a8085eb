"""``/v1/console/...``: read-only JSON the web console needs in one request per view.

Where v3 and ``/v1`` would need a request per row (a topic list with record counts, a
group's lag with colours, open transactions), these answer a whole view at once, one
bounded page at a time (``?limit=`` default 100, at most 1000, ``&offset=``; every
listing answers ``{"data": [...], "total", "limit", "offset"}``):

* ``GET /v1/console/overview`` -- brokers (alive, controller), partitions online /
  under-replicated / offline, this broker's produce and fetch record counters (the
  page derives rates), tier delay (records produced but not yet in the Delta tables);
* ``GET /v1/console/topics?q=&internal=`` -- name, partitions, replication factor,
  offsets (high watermark minus log start, summed: transaction markers and aborted
  records hold offsets too, so this is not a record count), table size, ``retention.ms``,
  ``cleanup.policy``;
* ``GET /v1/console/topics/{t}/partitions`` -- leader, replicas, ISR, log start, log
  end, high watermark, last stable offset, tiered offset;
* ``GET /v1/console/topics/{t}/table`` -- the Delta table: version, files, size, last
  commit and recent history (:mod:`laketail.console.delta`);
* ``GET /v1/console/groups?q=`` -- state, members, partitions with offsets, total lag;
* ``GET /v1/console/groups/{g}`` -- state, members and assignments, and a page of lag
  per partition with the seeds' status (OK < 100, caution < 1,000, warning < 10,000,
  critical);
* ``GET /v1/console/groups/{g}/lag-history?topic=&max_points=`` -- the group's lag per
  measurement of the lag job (``_system/consumer_lag``), for the chart;
* ``POST /v1/console/groups/{g}/reset-offsets`` -- ``kafka-consumer-groups
  --reset-offsets``: ``{topic, partitions (null: all), to: earliest | latest | offset |
  datetime, offset, datetime_ms, execute}``; without ``execute`` a dry run (the plan
  only, as the tool's default). NON_EMPTY_GROUP (409/40906) while the group has
  members; the new offsets go through the group commit path;
* ``GET /v1/console/transactions?state=`` -- transactional ids with producer id and
  epoch, state, partitions, age and timeout; ``hanging`` marks a transaction open past
  its ``transaction.timeout.ms`` (:mod:`laketail.console.transactions`);
* ``POST /v1/console/sql`` ``{query, max_rows, timeout_ms}`` -- :mod:`laketail.console.sql`:
  read-only SQL (Apache DataFusion in delta-rs, no Spark session) over topics' Delta
  tables, ``<topic>`` committed rows and ``<topic>_all`` every row; the result as
  columns, their Arrow types and rows, ``truncated`` when a cap left rows out.

Group and transaction endpoints are coordinator requests (answered by the controller,
:mod:`laketail.api.coordinator_proxy`). Only the Broker's public methods are used.
"""

from __future__ import annotations

import asyncio
import binascii
import math
from datetime import date, datetime, time, timedelta
from decimal import Decimal
from typing import Annotated, Any, Callable, TypeVar

from fastapi import APIRouter, Query, Request
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.responses import Response

from laketail.api import authz
from laketail.api.deps import Int32, Int64Param, broker_of, json_response, metrics_of, parse_json, read_body
from laketail.api.routes.clusters import live_brokers
from laketail.api.routes.v3_groups import visible_lags
from laketail.api.services import groups_of, services_of, transactions_of
from laketail.bounds import INT64_MAX
from laketail.console import delta, lag_history, reset, sql
from laketail.console.pages import DEFAULT_LIMIT, MAX_LIMIT, check_window, page
from laketail.console.transactions import transaction_rows
from laketail.coordinator.lag import lag_status
from laketail.coordinator.offsets import CommittedOffset
from laketail.errors import GroupIdNotFound, InvalidRequest, LaketailError, NonEmptyGroup, RequestTimedOut
from laketail.request_processes import broker_id_of, broker_ids_of
from laketail.security.acl import AclOperation, ResourceType

router = APIRouter(prefix="/v1/console", tags=["v1 console"])

_Body = TypeVar("_Body", bound=BaseModel)

# Inside Annotated, so that FastAPI keeps Int64Param's check of the digits.
Limit = Annotated[Int64Param, Query(description=f"rows per page (1..{MAX_LIMIT})")]
Offset = Annotated[Int64Param, Query(description="rows to skip")]
MaxPoints = Annotated[Int64Param, Query(description="points at most (1..5000)")]


async def _body(request: Request, model: type[_Body]) -> _Body:
    """The request's JSON body as ``model``: bounded by ``socket.request.max.bytes`` even
    when chunked, and refused when nested too deeply (:func:`laketail.api.deps.read_body`,
    :func:`~laketail.api.deps.parse_json`), before pydantic sees it. The models are
    strict: ``"5"`` or ``true`` where an integer belongs is INVALID_REQUEST, not 5 or 1."""
    doc = parse_json(await read_body(request))
    try:
        return model.model_validate(doc)
    except ValidationError as exc:
        raise RequestValidationError([{**e, "loc": ("body", *e["loc"])} for e in exc.errors(include_url=False)],
                                     body=doc) from None


def _body_openapi(model: type[BaseModel]) -> dict:
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": model.model_json_schema()}}}}


def _listing(rows: list, total: int, limit: int, offset: int) -> Response:
    return json_response({"data": rows, "total": total, "limit": limit, "offset": offset})


def visible(request: Request, resource_type: str, names: list[str]) -> list[str]:
    """The names of ``resource_type`` (``TOPIC``, ``GROUP``, ``TRANSACTIONAL_ID``) the
    request's principal may DESCRIBE: the one place the console's listings filter, as
    Kafka's Metadata and ListGroups answer only what the principal may Describe. With
    authorization off, every name."""
    kind = ResourceType[resource_type]
    return [name for name in names if authz.may_describe(request, kind, name)]


# -- overview -------------------------------------------------------------------------------------


def _counter_total(counter: Any) -> float:
    return sum(s.value for m in counter.collect() for s in m.samples if s.name.endswith("_total"))


@router.get("/overview", summary="Brokers, partition health, produce/fetch counters, tier delay")
async def overview(request: Request) -> Response:
    broker = broker_of(request)
    # Partition health is the cluster members'; the brokers shown are as clients see them
    # (a broker's request processes are that one broker: broker_id_of).
    members = {b.broker_id for b in broker.brokers()}
    live = live_brokers(broker)
    live_ids = {b.broker_id for b in live}
    known: set[int] = set(live_ids)
    total = online = under = offline = 0
    tier_delay = max_tier_delay = 0
    topics = internal = 0
    for name in broker.list_topics():
        try:
            info = broker.topic(name)
            states = broker.partition_states(name)
        except LaketailError:
            continue  # deleted since the listing
        internal += info.internal
        topics += not info.internal
        for s in states:
            total += 1
            known.update(broker_ids_of(s.replicas))
            if s.leader < 0 or s.leader not in members:
                offline += 1
                continue
            online += 1
            if len(s.isr) < len(s.replicas):
                under += 1
            if broker.leads(name, s.partition):
                delay = max(s.log_end_offset - s.tiered_offset, 0)
                tier_delay += delay
                max_tier_delay = max(max_tier_delay, delay)
    metrics = metrics_of(request)
    return json_response({
        "cluster_id": broker.cluster_id,
        "broker_id": broker_id_of(broker.broker_id),
        "controller_id": broker_id_of(broker.controller_id),
        "brokers": [
            {"broker_id": b, "url": next((x.url for x in live if x.broker_id == b), ""),
             "alive": b in live_ids, "controller": b == broker_id_of(broker.controller_id)}
            for b in sorted(known)
        ],
        "topics": topics,
        "internal_topics": internal,
        "partitions": {"total": total, "online": online, "under_replicated": under, "offline": offline},
        "produce_records_total": _counter_total(metrics.produce_records),
        "fetch_records_total": _counter_total(metrics.fetch_records),
        "tier_delay_records": tier_delay,
        "max_tier_delay_records": max_tier_delay,
        "time_ms": broker.clock.now_ms(),
    })


# -- topics ---------------------------------------------------------------------------------------


@router.get("/topics", summary="Topics with partitions, offsets, size, retention and cleanup policy")
async def topics(request: Request, q: str = "", internal: bool = False,
                 limit: Limit = DEFAULT_LIMIT, offset: Offset = 0) -> Response:
    broker = broker_of(request)
    names = visible(request, "TOPIC",
                    [n for n in broker.list_topics(include_internal=internal) if q.lower() in n.lower()])
    shown = page(names, limit, offset)
    rows: list[dict[str, Any]] = []
    for name in shown.rows:
        try:
            info = broker.topic(name)
            states = broker.partition_states(name)
            config = broker.topic_config(name).to_kafka()
        except LaketailError:
            continue
        rows.append({
            "topic_name": name,
            "internal": info.internal,
            "partitions_count": info.partitions,
            "replication_factor": info.replication_factor,
            # offsets, not records: markers and aborted records take offsets too
            "offsets": sum(max(s.high_watermark - s.log_start_offset, 0) for s in states),
            "retention_ms": config.get("retention.ms"),
            "cleanup_policy": config.get("cleanup.policy"),
        })
    sizes = await asyncio.gather(*[
        asyncio.to_thread(delta.table_size, broker.table_uri(r["topic_name"])) for r in rows
    ])
    for row, size in zip(rows, sizes):
        row["size_bytes"] = size
    return _listing(rows, shown.total, limit, offset)


@router.get("/topics/{topic}/partitions", summary="A topic's partitions: leader, replicas, ISR and offsets")
async def partitions(request: Request, topic: str, limit: Limit = DEFAULT_LIMIT, offset: Offset = 0) -> Response:
    broker = broker_of(request)
    info = broker.topic(topic)
    shown = page(range(info.partitions), limit, offset)
    states = [await broker.partition_state_async(topic, p) for p in shown.rows]
    rows = [{
        "partition_id": s.partition, "leader": broker_id_of(s.leader),
        "replicas": broker_ids_of(s.replicas), "isr": broker_ids_of(s.isr),
        "leader_epoch": s.leader_epoch, "log_start_offset": s.log_start_offset,
        "log_end_offset": s.log_end_offset, "high_watermark": s.high_watermark,
        "last_stable_offset": s.last_stable_offset, "tiered_offset": s.tiered_offset,
    } for s in states]
    return _listing(rows, shown.total, limit, offset)


@router.get("/topics/{topic}/table", summary="The topic's Delta table: version, files, size, last commit")
async def table(request: Request, topic: str) -> Response:
    broker_of(request).topic(topic)  # UNKNOWN_TOPIC_OR_PARTITION first
    return json_response(await asyncio.to_thread(delta.table_summary, broker_of(request).table_uri(topic)))


# -- consumer groups ------------------------------------------------------------------------------


def _quick_lag(request: Request, broker: Any, group_id: str) -> tuple[int, int]:
    """(partitions with offsets, total lag) from committed offsets and local offsets:
    no record reads, so a page of groups costs a dictionary walk. Topics the principal
    may not Describe are left out, as from the v3 lags."""
    offsets = services_of(request).offsets.group_offsets(group_id)
    shown = authz.describable(request, (topic for topic, _ in offsets))
    offsets = {key: committed for key, committed in offsets.items() if key[0] in shown}
    lag = 0
    for (topic, partition), committed in offsets.items():
        try:
            state = broker.partition_state(topic, partition)
        except LaketailError:
            continue
        start = committed.offset if committed.offset >= 0 else state.log_start_offset
        lag += max(state.high_watermark - start, 0)
    return len(offsets), lag


@router.get("/groups", summary="Consumer groups: state, members, partitions, total lag")
async def groups(request: Request, q: str = "", limit: Limit = DEFAULT_LIMIT, offset: Offset = 0) -> Response:
    broker = broker_of(request)
    check_window(limit, offset)
    listed = {g.group_id: g for g in groups_of(request).list_groups() if q.lower() in g.group_id.lower()}
    shown = page([listed[g] for g in visible(request, "GROUP", list(listed))], limit, offset)
    rows = []
    for group in shown.rows:
        count, lag = _quick_lag(request, broker, group.group_id)
        rows.append({
            "group_id": group.group_id, "state": group.state, "members": len(group.members),
            "protocol": group.protocol or "", "partitions": count, "total_lag": lag, "status": lag_status(lag),
        })
    return _listing(rows, shown.total, limit, offset)


@router.get("/groups/{group_id}", summary="A group: members, assignments, lag per partition with status")
async def group(request: Request, group_id: str, limit: Limit = DEFAULT_LIMIT, offset: Offset = 0) -> Response:
    check_window(limit, offset)
    described = groups_of(request).describe(group_id)
    if described.state == "Dead":
        raise GroupIdNotFound(f"consumer group '{group_id}' does not exist")
    lags = await visible_lags(request, group_id)
    lags.sort(key=lambda lag: (lag.topic, lag.partition))
    shown = page(lags, limit, offset)
    return json_response({
        "group_id": group_id,
        "state": described.state,
        "protocol": described.protocol or "",
        "generation_id": described.generation_id,
        "members": [
            {"member_id": m.member_id, "client_id": m.client_id, "client_host": m.client_host,
             "assignment": [{"topic": t, "partition": p} for t, p in m.assignment]}
            for m in sorted(described.members.values(), key=lambda m: m.member_id)
        ],
        "total_lag": sum(lag.lag for lag in lags),
        "max_time_lag_ms": max((lag.time_lag_ms for lag in lags), default=0),
        "lags": {
            "data": [{
                "topic": x.topic, "partition": x.partition, "current_offset": x.current_offset,
                "log_end_offset": x.log_end_offset, "lag": x.lag, "time_lag_ms": x.time_lag_ms,
                "consumer_id": x.consumer_id, "client_id": x.client_id, "status": x.status,
            } for x in shown.rows],
            **shown.meta(),
        },
    })


@router.get("/groups/{group_id}/lag-history", summary="The group's lag over time, from _system/consumer_lag")
async def group_lag_history(request: Request, group_id: str, topic: str | None = None,
                            max_points: MaxPoints = 500) -> Response:
    if not 1 <= max_points <= 5000:
        raise InvalidRequest(f"max_points must be between 1 and 5000, got {max_points}")
    broker = broker_of(request)
    shown = None  # OffsetFetch's rule: only topics the principal may Describe
    if topic is not None:
        authz.check(request, AclOperation.DESCRIBE, ResourceType.TOPIC, topic)
    elif authz.authorizer_of(request).enabled:
        shown = authz.describable(request, broker.list_topics(include_internal=True))
    points = await asyncio.to_thread(lag_history.lag_history, broker.settings.data, group_id, topic=topic,
                                     topics=shown, max_points=max_points)
    return json_response({
        "group_id": group_id,
        "topic": topic,
        "points": [{"time_ms": p.time_ms, "lag": p.lag, "time_lag_ms": p.time_lag_ms, "partitions": p.partitions}
                   for p in points],
    })


class ResetRequest(BaseModel):
    model_config = ConfigDict(strict=True)

    topic: str
    partitions: list[Int32] | None = Field(None, description="null: every partition of the topic")
    to: reset.ResetTo
    offset: int | None = Field(None, ge=0, le=INT64_MAX, description="for to=offset")
    datetime_ms: int | None = Field(None, ge=0, le=INT64_MAX, description="for to=datetime (ms since the epoch)")
    execute: bool = Field(False, description="false: a dry run that only answers the plan")


@router.post("/groups/{group_id}/reset-offsets",
             summary="Reset a group's committed offsets (kafka-consumer-groups --reset-offsets)",
             responses={409: {"description": "NON_EMPTY_GROUP (40906): the group has members"}},
             openapi_extra=_body_openapi(ResetRequest))
async def reset_offsets(request: Request, group_id: str) -> Response:
    body = await _body(request, ResetRequest)
    broker = broker_of(request)
    if not group_id:
        raise InvalidRequest("group id must not be empty")
    reset.check_spec(body.to, body.offset, body.datetime_ms)
    authz.check(request, AclOperation.READ, ResourceType.TOPIC, body.topic)  # OffsetCommit: Read on the topic
    info = broker.topic(body.topic)
    chosen = sorted(set(body.partitions)) if body.partitions is not None else list(range(info.partitions))
    for p in chosen:
        broker.partition_state(body.topic, p)  # UNKNOWN_TOPIC_OR_PARTITION (40402) before anything
    described = groups_of(request).describe(group_id)
    if described.members:
        raise NonEmptyGroup(
            f"assignments can only be reset if the group '{group_id}' is inactive, "
            f"but the current state is {described.state}"
        )
    plan: list[dict[str, Any]] = []
    for p in chosen:
        state = await broker.partition_state_async(body.topic, p)
        found = None
        if body.to == "datetime":
            hit = await broker.offset_for_timestamp(body.topic, p, int(body.datetime_ms or 0))
            found = hit[0] if hit is not None else None
        target = reset.reset_target(body.to, state.log_start_offset, state.high_watermark,
                                    offset=body.offset, offset_for_time=found)
        current = groups_of(request).committed(group_id, [(body.topic, p)])[(body.topic, p)]
        plan.append({"topic": body.topic, "partition": p,
                     "current_offset": current.offset if current else -1, "new_offset": target})
    if body.execute and plan:
        now_ms = broker.clock.now_ms()
        await groups_of(request).commit(
            group_id, {(r["topic"], r["partition"]): CommittedOffset(r["new_offset"], "", now_ms) for r in plan},
            generation_id=-1,
        )
    return json_response({"group_id": group_id, "executed": body.execute, "offsets": plan})


# -- transactions ---------------------------------------------------------------------------------


@router.get("/transactions", summary="Transactional producers: state, partitions, age; hanging ones flagged")
async def transactions(request: Request, state: str = "", limit: Limit = DEFAULT_LIMIT,
                       offset: Offset = 0) -> Response:
    broker = broker_of(request)
    check_window(limit, offset)
    txns = transactions_of(request).list_transactions()
    listed = {m.transactional_id: m for m in txns if not state or m.state == state}
    metas = [listed[t] for t in visible(request, "TRANSACTIONAL_ID", list(listed))]
    shown = page(transaction_rows(metas, broker.clock.now_ms()), limit, offset)
    rows = shown.rows
    return _listing(rows, shown.total, limit, offset)


# -- SQL ------------------------------------------------------------------------------------------


class SqlRequest(BaseModel):
    model_config = ConfigDict(strict=True)

    query: str = Field(..., max_length=10_000)
    max_rows: int = Field(100, ge=1, le=MAX_LIMIT)
    timeout_ms: int = Field(sql.DEFAULT_TIMEOUT_MS, ge=1, le=sql.DEFAULT_TIMEOUT_MS,
                            description="the query's deadline (REQUEST_TIMED_OUT past it)")


def _cell(value: Any) -> Any:
    if isinstance(value, bytes):
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError:
            return "0x" + binascii.hexlify(value).decode()
    if isinstance(value, (datetime, date, time)):
        return value.isoformat()
    if isinstance(value, (Decimal, timedelta)):
        return str(value)
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, list):
        return [_cell(v) for v in value]
    if isinstance(value, dict):
        return {k: _cell(v) for k, v in value.items()}
    return value


#: How long past a query's deadline the request waits for its worker to notice it.
_SQL_GRACE_S = 1.0


def _sql_resolver(request: Request) -> Callable[[str], sql.Table]:
    """What a table name of a query reads (called by :func:`laketail.console.sql.run` for
    each name DataFusion asks for): ``<topic>`` its committed rows, ``<topic>_all`` every
    row. Read on the topic is checked first, as for a Fetch of the whole table."""
    broker = broker_of(request)

    def resolve(name: str) -> sql.Table:
        topic, kind = name, "committed"
        if name.endswith("_all") and not broker.has_topic(name) and broker.has_topic(name[:-4]):
            topic, kind = name[:-4], "all"
        authz.check(request, AclOperation.READ, ResourceType.TOPIC, topic)
        broker.topic(topic)  # UNKNOWN_TOPIC_OR_PARTITION for a table that is no topic
        return sql.Table(topic, broker.table_uri(topic), kind)  # type: ignore[arg-type]

    return resolve


@router.post("/sql", summary="Read-only SQL (Apache DataFusion, through delta-rs) over topics' Delta tables",
             openapi_extra=_body_openapi(SqlRequest))
async def run_sql(request: Request) -> Response:
    body = await _body(request, SqlRequest)
    sql.check_read_only(body.query)  # INVALID_REQUEST before any worker thread or table
    work = asyncio.to_thread(sql.run, body.query, _sql_resolver(request), max_rows=body.max_rows,
                             timeout_ms=body.timeout_ms)
    try:  # the worker checks its deadline between batches; a batch that runs on is not waited for
        result = await asyncio.wait_for(work, body.timeout_ms / 1000 + _SQL_GRACE_S)
    except asyncio.TimeoutError:
        raise RequestTimedOut(f"SQL: the query ran past its {body.timeout_ms} ms deadline") from None
    rows = result.rows
    return json_response({
        "engine": "datafusion",
        "columns": rows.column_names,
        "types": [str(field.type) for field in rows.schema],
        "rows": [[_cell(v) for v in row] for row in zip(*(column.to_pylist() for column in rows.columns))],
        "truncated": result.truncated,
    })


__all__ = ["router"]
