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

import pyarrow as pa
from fastapi import APIRouter, Request
from starlette.responses import Response

from laketail.api.deps import broker_of, json_response, parse_acks, path_int, query_int
from laketail.cluster.metadata import ClusterImage
from laketail.errors import InvalidRequest, NotController, UnknownTopicOrPartition
from laketail.storage.partition_log import ProducerBatch

router = APIRouter(prefix="/internal/v1", include_in_schema=False)

ARROW_STREAM = "application/vnd.apache.arrow.stream"


def _controller(request: Request):
    node = broker_of(request).cluster
    if not node.is_controller:
        raise NotController(f"broker {node.broker_id} is not the controller")
    return node.controller


def _check_leads(broker, topic: str, partition: int) -> None:
    """Return when this broker leads the partition; else raise Kafka's answer: a
    partition this broker's cluster image does not have is UNKNOWN_TOPIC_OR_PARTITION
    (404), a known one NOT_LEADER_OR_FOLLOWER or LEADER_NOT_AVAILABLE."""
    if broker.leads(topic, partition):
        return
    if (topic, partition) not in broker.cluster.image.partitions:
        raise UnknownTopicOrPartition.partition(topic, partition)
    broker.cluster.replicas.leader_state(topic, partition)


def _image(request: Request) -> Response:
    return json_response(broker_of(request).cluster.image.to_json())


@router.post("/heartbeat")
async def heartbeat(request: Request) -> Response:
    body = await request.json()
    return json_response(await _controller(request).heartbeat(**body))


@router.post("/alter-partition")
async def alter_partition(request: Request) -> Response:
    body = await request.json()
    reg = await _controller(request).alter_partition(**body)
    return json_response(dataclasses.asdict(reg))


@router.post("/topics")
async def create_topic(request: Request) -> Response:
    body = await request.json()
    _controller(request)
    await broker_of(request).create_topic(  # the forwarding broker checked the client's request
        body["name"], body["partitions"], body["replication_factor"], body["configs"],
        internal_topics_allowed=True,
    )
    return _image(request)


@router.delete("/topics/{topic}")
async def delete_topic(request: Request, topic: str) -> Response:
    _controller(request)
    await broker_of(request).delete_topic(topic, internal_topics_allowed=True)  # checked by the forwarder
    return _image(request)


@router.put("/topics/{topic}/configs")
async def alter_topic(request: Request, topic: str) -> Response:
    configs = await request.json()
    await _controller(request).alter_topic(topic, configs)
    return _image(request)


@router.post("/metadata")
async def metadata(request: Request) -> Response:
    image = ClusterImage.from_json(await request.json())
    await broker_of(request).cluster.apply_image(image)
    return json_response({"version": broker_of(request).cluster.image.version})


@router.post("/replica-fetch")
async def replica_fetch(request: Request) -> Response:
    body = await request.json()
    data = await broker_of(request).cluster.replicas.handle_fetch(
        body["replica_id"], body["partitions"], body["max_wait_ms"], body["max_bytes"]
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
    frame = pa.ipc.open_stream(await request.body()).read_next_batch()
    producer = None
    producer_id = query_int(request, "producer_id")
    if producer_id is not None:
        producer = ProducerBatch(
            producer_id, query_int(request, "producer_epoch", -1), query_int(request, "base_sequence", -1),
            query.get("transactional", "false") == "true", query.get("control"),
        )
    _check_leads(broker, topic, partition)
    acks = parse_acks(query.get("acks", "all"))
    base = await broker.append(topic, partition, frame, acks, query_int(request, "max_timestamp_us"), producer)
    return json_response({"base_offset": base})


@router.get("/partitions/{topic}/{partition}/records")
async def records(request: Request) -> Response:
    """Query: ``offset`` (required), ``timeout_ms``, ``isolation``, ``max_records``,
    ``max_bytes``."""
    broker = broker_of(request)
    topic, partition = request.path_params["topic"], path_int(request, "partition")
    isolation = request.query_params.get("isolation", "read_committed")
    if isolation not in ("read_committed", "read_uncommitted"):
        raise InvalidRequest(f"isolation must be read_committed or read_uncommitted, got {isolation!r}")
    _check_leads(broker, topic, partition)
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
async def state(request: Request, topic: str, partition: int) -> Response:
    broker = broker_of(request)
    _check_leads(broker, topic, partition)
    return json_response(dataclasses.asdict(broker.partition_state(topic, partition)))


@router.get("/partitions/{topic}/{partition}/offset-for-timestamp")
async def offset_for_timestamp(request: Request, topic: str, partition: int, timestamp: int) -> Response:
    broker = broker_of(request)
    _check_leads(broker, topic, partition)
    found = await broker.offset_for_timestamp(topic, partition, timestamp)
    return json_response(None if found is None else list(found))
