"""``/internal/v1``: what brokers ask each other (not for clients; not in the OpenAPI).

* controller: ``heartbeat``, ``alter-partition``, topic create / delete / configs
  (answered with the new cluster image);
* any broker: ``metadata`` (the controller pushes each new image);
* leader: ``replica-fetch`` (followers pull frames), and the forwarded produce
  (``append``), fetch (``records``), ``state`` and ``offset-for-timestamp`` of a
  partition, so a broker that does not lead a partition can still answer for it.

Errors are the gateway's usual ``{"error_code", "message"}``; the calling broker turns
them back into the same exception (:func:`laketail.errors.from_body`).
"""

from __future__ import annotations

import dataclasses
from typing import Annotated, TypeVar

import pyarrow as pa
from fastapi import APIRouter, Path, Request
from pydantic import BaseModel, ValidationError, field_validator
from starlette.responses import Response

from laketail.api.deps import (
    Int32,
    Int64,
    broker_of,
    json_response,
    parse_acks,
    parse_json,
    path_int,
    query_int,
    read_body,
)
from laketail.api.services import cluster_of, services_of
from laketail.bounds import INT32_MAX, INT32_MIN
from laketail.cluster.metadata import ClusterImage
from laketail.errors import InvalidRequest, NotController
from laketail.records import FRAME_SCHEMA, IsolationLevel
from laketail.storage.partition_log import ProducerBatch

router = APIRouter(prefix="/internal/v1", include_in_schema=False)

ARROW_STREAM = "application/vnd.apache.arrow.stream"

PartitionPath = Annotated[int, Path(ge=INT32_MIN, le=INT32_MAX)]


# -- bodies: a peer's request is checked like a client's (INVALID_REQUEST, nothing done) ----------


class _Heartbeat(BaseModel):
    broker_id: Int32
    url: str
    broker_url: str = ""  # the inter-broker listener's, when it is not ``url``
    endpoints: str = ""  # the other advertised listeners (Kafka's protocol), NAME://host:port,...
    incarnation: str
    leos: dict[str, Int64]
    known_version: Int64

    @field_validator("leos")
    @classmethod
    def _leo_keys(cls, leos: dict[str, int]) -> dict[str, int]:
        """Keys are ``<topic>/<partition>`` with an int32 partition, as ``ClusterNode`` sends them."""
        for key in leos:
            topic, _, partition = key.rpartition("/")
            if not topic or not partition.isdigit() or not partition.isascii() or int(partition) > INT32_MAX:
                raise ValueError(f"log end offset key {key!r} is not <topic>/<partition>")
        return leos


class _AlterPartition(BaseModel):
    topic: str
    partition: Int32
    leader: Int32
    leader_epoch: Int32
    partition_epoch: Int32
    isr: list[Int32]


class _CreateTopic(BaseModel):
    name: str
    partitions: Int32
    replication_factor: Int32
    configs: dict[str, str]


class _FetchPartition(BaseModel):
    topic: str
    partition: Int32
    leader_epoch: Int32
    fetch_offset: Int64
    last_fetched_epoch: Int32


class _ReplicaFetch(BaseModel):
    replica_id: Int32
    partitions: list[_FetchPartition]
    max_wait_ms: Int64
    max_bytes: Int64


_Body = TypeVar("_Body", bound=BaseModel)


async def _body(request: Request, model: type[_Body]) -> _Body:
    """The request's JSON body as ``model`` (INVALID_REQUEST when it is not one)."""
    doc = parse_json(await read_body(request))
    try:
        return model.model_validate(doc)
    except ValidationError as exc:
        raise InvalidRequest(f"{model.__name__.strip('_')} body: {exc.errors()[0].get('msg')} "
                             f"at {'.'.join(map(str, exc.errors()[0].get('loc', ())))}") from None


async def _json_body(request: Request, what: str) -> dict:
    doc = parse_json(await read_body(request))
    if type(doc) is not dict:
        raise InvalidRequest(f"{what} body must be a JSON object")
    return doc


def _controller(request: Request):
    node = cluster_of(request)
    if not node.is_controller:
        raise NotController(f"broker {node.broker_id} is not the controller")
    return node.controller


def _image(request: Request) -> Response:
    return json_response(cluster_of(request).image.to_json())


@router.post("/heartbeat")
async def heartbeat(request: Request) -> Response:
    body = await _body(request, _Heartbeat)
    return json_response(await _controller(request).heartbeat(**body.model_dump()))


@router.post("/alter-partition")
async def alter_partition(request: Request) -> Response:
    body = await _body(request, _AlterPartition)
    reg = await _controller(request).alter_partition(**body.model_dump())
    return json_response(dataclasses.asdict(reg))


@router.post("/topics")
async def create_topic(request: Request) -> Response:
    body = await _body(request, _CreateTopic)
    _controller(request)
    await broker_of(request).create_topic(  # the forwarding broker checked the client's request
        body.name, body.partitions, body.replication_factor, body.configs, internal_topics_allowed=True
    )
    return _image(request)


@router.delete("/topics/{topic}")
async def delete_topic(request: Request, topic: str) -> Response:
    _controller(request)
    await broker_of(request).delete_topic(topic, internal_topics_allowed=True)  # checked by the forwarder
    return _image(request)


class _CreatePartitions(BaseModel):
    partitions: Int32


@router.post("/topics/{topic}/partitions")
async def create_partitions(request: Request, topic: str) -> Response:
    body = await _body(request, _CreatePartitions)
    _controller(request)
    await broker_of(request).create_partitions(topic, body.partitions, internal_topics_allowed=True)  # forwarded
    return _image(request)


@router.put("/topics/{topic}/configs")
async def alter_topic(request: Request, topic: str) -> Response:
    configs = await _json_body(request, "topic configs")
    if not all(type(v) is str for v in configs.values()):
        raise InvalidRequest("topic configs must map names to strings")
    _controller(request)
    broker_of(request).topic(topic)  # UNKNOWN_TOPIC_OR_PARTITION
    configs = services_of(request).topic_configs.normalise_configs(configs)  # INVALID_CONFIG
    await _controller(request).alter_topic(topic, configs)
    return _image(request)


@router.post("/metadata")
async def metadata(request: Request) -> Response:
    doc = await _json_body(request, "metadata")
    try:
        image = ClusterImage.from_json(doc)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise InvalidRequest(f"metadata body is not a cluster image: {type(exc).__name__}: {exc}") from None
    await cluster_of(request).apply_image(image)
    return json_response({"version": cluster_of(request).image.version})


@router.post("/replica-fetch")
async def replica_fetch(request: Request) -> Response:
    body = await _body(request, _ReplicaFetch)
    data = await cluster_of(request).replicas.handle_fetch(
        body.replica_id, [p.model_dump() for p in body.partitions], body.max_wait_ms, body.max_bytes
    )
    return Response(data, media_type="application/octet-stream")


# The forwarded produce and fetch read their own parameters (no FastAPI dependencies),
# so the gateway dispatches them ahead of its router like the public produce and fetch.


@router.post("/partitions/{topic}/{partition}/append")
async def append(request: Request) -> Response:
    """Query: ``acks``, ``max_timestamp_us``, and for a producer's batch ``producer_id``,
    ``producer_epoch``, ``base_sequence``, ``transactional``, ``control``."""
    broker = broker_of(request)
    topic, partition = request.path_params["topic"], path_int(request, "partition")
    query = request.query_params
    frame = _frame(await read_body(request))
    producer = None
    producer_id = query_int(request, "producer_id")
    if producer_id is not None:
        producer = ProducerBatch(
            producer_id, query_int(request, "producer_epoch", -1), query_int(request, "base_sequence", -1),
            query.get("transactional", "false") == "true", query.get("control"),
        )
    await broker.wait_leads(topic, partition)
    acks = parse_acks(query.get("acks", "all"))
    base = await broker.append(topic, partition, frame, acks, query_int(request, "max_timestamp_us"), producer)
    return json_response({"base_offset": base})


def _frame(body: bytes) -> pa.RecordBatch:
    """A forwarded produce's one frame batch (``FRAME_SCHEMA``), or INVALID_REQUEST."""
    try:
        frame = pa.ipc.open_stream(pa.py_buffer(body)).read_next_batch()
    except (pa.ArrowInvalid, pa.ArrowIOError, pa.ArrowNotImplementedError, StopIteration, ValueError) as exc:
        raise InvalidRequest(f"body is not an Arrow IPC stream with a batch: {exc}") from None
    if not frame.schema.equals(FRAME_SCHEMA):
        raise InvalidRequest(f"the forwarded batch is not in the frame schema: {frame.schema}")
    return frame


_ISOLATION_LEVELS: dict[str, IsolationLevel] = {
    "read_committed": "read_committed", "read_uncommitted": "read_uncommitted",
}


@router.get("/partitions/{topic}/{partition}/records")
async def records(request: Request) -> Response:
    """Query: ``offset`` (required), ``timeout_ms``, ``isolation``, ``max_records``,
    ``max_bytes``."""
    broker = broker_of(request)
    topic, partition = request.path_params["topic"], path_int(request, "partition")
    raw = request.query_params.get("isolation", "read_committed")
    isolation = _ISOLATION_LEVELS.get(raw)
    if isolation is None:
        raise InvalidRequest(f"isolation must be read_committed or read_uncommitted, got {raw!r}")
    await broker.wait_leads(topic, partition)
    result = await broker.fetch(
        topic, partition, query_int(request, "offset", required=True),
        max_records=query_int(request, "max_records"), max_bytes=query_int(request, "max_bytes"),
        timeout_ms=query_int(request, "timeout_ms", 0), isolation=isolation,
    )
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, result.records.schema) as writer:
        writer.write_table(result.records)
    headers = {
        "x-next-offset": str(result.next_offset),
        "x-high-watermark": str(result.high_watermark),
        "x-log-start-offset": str(result.log_start_offset),
        "x-last-stable-offset": str(result.last_stable_offset),
    }
    return Response(sink.getvalue().to_pybytes(), media_type=ARROW_STREAM, headers=headers)


@router.get("/partitions/{topic}/{partition}/state")
async def state(request: Request, topic: str, partition: PartitionPath) -> Response:
    broker = broker_of(request)
    await broker.wait_leads(topic, partition)
    return json_response(dataclasses.asdict(broker.partition_state(topic, partition)))


@router.get("/partitions/{topic}/{partition}/offset-for-timestamp")
async def offset_for_timestamp(request: Request, topic: str, partition: PartitionPath, timestamp: Int64) -> Response:
    broker = broker_of(request)
    await broker.wait_leads(topic, partition)
    found = await broker.offset_for_timestamp(topic, partition, timestamp)
    return json_response(None if found is None else list(found))


@router.get("/partitions/{topic}/{partition}/epochs")
async def epochs(request: Request, topic: str, partition: PartitionPath) -> Response:
    """The leader's epochs of its replica, for OffsetForLeaderEpoch asked of a sibling
    request process (``laketail.kafka.epochs``)."""
    broker = broker_of(request)
    await broker.wait_leads(topic, partition)
    history, log_end_offset = broker.epoch_history(topic, partition)
    return json_response({"leader_epoch": broker.partition_state(topic, partition).leader_epoch,
                          "epochs": [list(e) for e in history], "log_end_offset": log_end_offset})


@router.post("/kafka/{listener}")
async def kafka_request(request: Request, listener: str) -> Response:
    """A Kafka request frame a sibling request process passed on to the one running the
    coordinators (``laketail.kafka.siblings``), answered here for the client the
    forwarding headers name; the answer is the response frame, or 204 for none."""
    from laketail.api.principal import principal_of
    from laketail.kafka.apis import Session
    from laketail.kafka.protocol import CloseConnection

    apis = getattr(request.app.state, "kafka_apis", {}).get(listener)
    if apis is None:
        raise InvalidRequest(f"no Kafka listener {listener} here")
    client = request.client
    try:
        answer = await apis.answer_passed(await read_body(request),
                                          Session(principal_of(request), client.host if client else "*"))
    except CloseConnection as exc:
        raise InvalidRequest(f"not a Kafka request: {exc}") from None
    if answer is None:
        return Response(status_code=204)
    return Response(answer, media_type="application/octet-stream")
