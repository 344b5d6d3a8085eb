"""Confluent REST Proxy v2 consumer instances: ``/consumers/{group}[/instances/{instance}/...]``.

The instances live in the broker (:mod:`laketail.api.consumer_instances`); these routes
only parse v2's bodies and answer in v2's shapes:

* ``POST /consumers/{group}`` ``{name?, format?, auto.offset.reset?, auto.commit.enable?,
  fetch.min.bytes?, consumer.request.timeout.ms?, isolation.level?}`` ->
  ``{instance_id, base_uri}`` (a duplicate name is 409/40902, a bad setting 422/42204);
* ``DELETE .../instances/{instance}`` -> 204 (the instance leaves its group);
* ``.../subscription``: POST ``{topics: [...]}`` or ``{topic_pattern: "regex"}`` (204;
  with a manual assignment 409/40903), GET ``{topics}``, DELETE (204);
* ``.../assignments``: POST ``{partitions: [{topic, partition}]}`` (204), GET
  ``{partitions}`` -- the partitions the instance holds now, assigned by hand or by its
  group;
* ``.../positions`` ``{offsets: [{topic, partition, offset}]}``,
  ``.../positions/beginning`` and ``.../positions/end`` ``{partitions}`` (204);
* ``GET .../records?timeout=&max_bytes=`` -> ``[{topic, key, value, partition, offset,
  timestamp, headers}]`` (v2's fields plus laketail's timestamp and headers) in the
  instance's embedded format; an Accept naming another format is 406/40601; a record
  the format cannot decode is 422/42203 once nothing before it is left to return, and
  the instance stays on it;
* ``POST .../offsets`` ``{offsets: [{topic, partition, offset, metadata?}]}`` commits
  ``offset + 1`` for each (v2's convention); no body (or no offsets) commits every
  position. The answer is 200 with an empty list, as Confluent's;
* ``GET .../offsets`` with a body ``{partitions}`` -> ``{offsets: [{topic, partition,
  offset, metadata}]}``: the committed offsets as stored (a partition the group never
  committed is left out, as Confluent leaves it out).

Every answer but records is ``application/vnd.kafka.v2+json``; an unknown instance is
404/40403.

An instance belongs to the principal that created it: any other principal, even one with
Read on the group, is answered 404/40403 as if it did not exist (not 403, which would
confirm that an instance of that name exists in the group; an instance's name is a
capability of its creator, as a member id is of a Kafka consumer). Its commits need Read
on every topic committed, those of a commit without offsets too (the topics of its
positions and assignment); a pattern subscription matches only topics its creator may
Describe, as Kafka's metadata answer lists only those.
"""

from __future__ import annotations

import functools
from datetime import datetime, timezone
from typing import Any
from urllib.parse import quote

from fastapi import APIRouter, Depends, Request
from starlette.responses import Response

from laketail.api import authz, fetch_body
from laketail.api import consumer_schemas as bodies
from laketail.api.consumer_instances import ConsumerInstance, ConsumerInstances
from laketail.api.deps import broker_of, json_response, parse_json, query_int, read_body
from laketail.api.embedded_schemas import SCHEMA_TYPES, registry_of, schema_rows
from laketail.api.encoding import (
    MEDIA_TYPES,
    V2_JSON,
    acceptable,
    format_of,
    schema_format_of,
    v2_accept,
)
from laketail.api.routes.clusters import base_url
from laketail.bounds import int32, int64
from laketail.coordinator.instance_config import ConsumerInstanceNotFound, InstanceConfig
from laketail.coordinator.instance_config import EmbeddedFormat as ConsumerFormat
from laketail.errors import (
    InvalidRequest,
    InvalidRequestBody,
    NotAcceptable,
    UnknownTopicOrPartition,
    UnsupportedMediaType,
)
from laketail.security.acl import AclOperation as Op
from laketail.security.acl import ResourceType as R

router = APIRouter(tags=["v2 consumers"], dependencies=[Depends(v2_accept)])  # GET: 406 as Confluent

INSTANCE = "/consumers/{group}/instances/{instance}"


def instances_of(request: Request) -> ConsumerInstances:
    return request.app.state.consumers


def instance_of(request: Request) -> ConsumerInstance:
    """The instance the path names, if the acting principal created it (else 404: see the
    module docstring)."""
    params = request.path_params
    instance = instances_of(request).get(params["group"], params["instance"])
    if instance.owner is not None and instance.owner != authz.acting(request)[0]:
        raise ConsumerInstanceNotFound(
            f"Consumer instance '{params['instance']}' not found in group '{params['group']}'.")
    return instance


def _v2(doc: Any, status: int = 200) -> Response:
    return json_response(doc, status=status, media_type=V2_JSON)


def _no_content() -> Response:
    return Response(status_code=204)


async def _body(request: Request, required: bool = True) -> dict:
    raw = await read_body(request)
    if not raw.strip():
        if required:
            raise InvalidRequest("this request needs a JSON body")
        return {}
    doc = parse_json(raw)
    if type(doc) is not dict:
        raise InvalidRequest("the request body must be a JSON object")
    return doc


def _int_field(item: dict, name: str, where: str) -> int:
    """A partition (Kafka's int32) or an offset (int64)."""
    return (int32 if name == "partition" else int64)(item.get(name), f"{where}.{name}")


def _str_field(item: dict, name: str, where: str) -> str:
    value = item.get(name)
    if type(value) is not str or not value:
        raise InvalidRequest(f"{where}.{name} must be a non-empty string")
    return value


def _items(doc: dict, key: str) -> list[dict]:
    items = doc.get(key)
    if type(items) is not list or not all(type(i) is dict for i in items):
        raise InvalidRequest(f"'{key}' must be a list of objects")
    return items


def partitions_of(doc: dict) -> list[tuple[str, int]]:
    """``{"partitions": [{topic, partition}]}`` -> ``[(topic, partition)]``."""
    return [
        (_str_field(p, "topic", f"partitions[{i}]"), _int_field(p, "partition", f"partitions[{i}]"))
        for i, p in enumerate(_items(doc, "partitions"))
    ]


# -- instances ------------------------------------------------------------------------------


@router.post("/consumers/{group}", summary="Create a consumer instance in the group",
             openapi_extra=bodies.CREATE_OPENAPI)
async def create_instance(request: Request, group: str) -> Response:
    doc = await _body(request, required=False)
    name = doc.get("name") if doc.get("name") is not None else doc.get("id")
    config = InstanceConfig.from_request(doc)
    client = request.client
    instance = instances_of(request).create(group, config, name, client.host if client else "")
    principal, host = authz.acting(request)
    instance.owner = principal
    authorizer = authz.authorizer_of(request)
    if authorizer.enabled:
        instance.may_describe = lambda topic: authorizer.authorize(
            principal, host, Op.DESCRIBE, R.TOPIC, topic, audit_denied=False)
    uri = f"{base_url(request)}/consumers/{quote(group, safe='')}/instances/{quote(instance.instance_id, safe='')}"
    return _v2({"instance_id": instance.instance_id, "base_uri": uri})


@router.delete(INSTANCE, status_code=204, summary="Destroy the consumer instance (it leaves its group)")
async def delete_instance(request: Request, group: str, instance: str) -> Response:
    instance_of(request)  # its owner's only
    await instances_of(request).delete(group, instance)
    return _no_content()


# -- subscription and assignment ---------------------------------------------------------------


@router.post(INSTANCE + "/subscription", status_code=204,
             summary="Subscribe to topics or a topic pattern (group-managed partitions)",
             openapi_extra=bodies.SUBSCRIBE_OPENAPI)
async def subscribe(request: Request, group: str, instance: str) -> Response:
    consumer = instance_of(request)
    doc = await _body(request)
    topics, pattern = doc.get("topics"), doc.get("topic_pattern")
    # a field of the wrong type is 422, as Confluent's proxy answers a body Jackson cannot map
    # (and the peer suite asserts for topics given as a string, topic_pattern as a list)
    if topics is not None and (type(topics) is not list or not all(type(t) is str for t in topics)):
        raise InvalidRequestBody("'topics' must be a list of topic names")
    if pattern is not None and type(pattern) is not str:
        raise InvalidRequestBody("'topic_pattern' must be a string")
    consumer.check_subscription(topics, pattern)
    broker = broker_of(request)
    # Confluent's instances are Java consumers, whose metadata requests allow
    # auto-creation (allow.auto.create.topics=true); a pattern creates nothing. As Kafka's
    # metadata answer: a topic the principal may not Describe is never created (its poll
    # is then refused, as for an existing topic it may not read: nothing tells the two
    # apart); one it may Describe needs Create on the cluster or the topic, else
    # TOPIC_AUTHORIZATION_FAILED. All is checked before anything is created.
    creating = [t for t in topics or [] if broker.would_auto_create(t) and authz.may(request, Op.DESCRIBE, R.TOPIC, t)]
    for topic in creating:
        authz.check_may_auto_create(request, topic)
    for topic in creating:
        try:
            await broker.topic_for_produce(topic)
        except UnknownTopicOrPartition:
            pass  # created and deleted meanwhile: a subscription may wait for it
    await consumer.subscribe(topics, pattern)
    return _no_content()


@router.get(INSTANCE + "/subscription", summary="The subscribed topics")
async def get_subscription(request: Request, group: str, instance: str) -> Response:
    return _v2({"topics": instance_of(request).subscription()})


@router.delete(INSTANCE + "/subscription", status_code=204, summary="Unsubscribe (leave the group)")
async def unsubscribe(request: Request, group: str, instance: str) -> Response:
    await instance_of(request).unsubscribe()
    return _no_content()


@router.post(INSTANCE + "/assignments", status_code=204, summary="Assign partitions by hand",
             openapi_extra=bodies.ASSIGN_OPENAPI)
async def assign(request: Request, group: str, instance: str) -> Response:
    consumer = instance_of(request)
    partitions = partitions_of(await _body(request))
    _check_describe(request, partitions)  # before the existence check: a 404 would tell a hidden topic exists
    await consumer.assign(partitions)
    return _no_content()


def _check_describe(request: Request, partitions: list[tuple[str, *tuple[Any, ...]]]) -> None:
    """Describe on each topic named, as Kafka's Metadata and ListOffsets need it: without
    it TOPIC_AUTHORIZATION_FAILED, whether the topic exists or not."""
    for topic in sorted({t for t, *_ in partitions}):
        authz.check(request, Op.DESCRIBE, R.TOPIC, topic)


@router.get(INSTANCE + "/assignments", summary="The partitions the instance holds now")
async def get_assignments(request: Request, group: str, instance: str) -> Response:
    consumer = instance_of(request)
    consumer.touch()
    return _v2({"partitions": [{"topic": t, "partition": p} for t, p in consumer.assignment]})


# -- positions --------------------------------------------------------------------------------


def seek_instant_ms(value: Any, where: str) -> int:
    """A ConsumerSeekRequest ``timestamp`` as Kafka milliseconds. Confluent reads it as a
    Jackson ``Instant``: an ISO-8601 string, or a JSON number of epoch *seconds*
    (Jackson's default, READ_DATE_TIMESTAMPS_AS_NANOSECONDS), which is followed here."""
    if type(value) is str:
        try:
            moment = datetime.fromisoformat(value)
        except ValueError:
            raise InvalidRequest(f"{where} is not an ISO-8601 instant: {value!r}") from None
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=timezone.utc)
        ms = int(moment.timestamp() * 1000)
        if ms < 0:  # Kafka's ListOffsets by time takes no negative target
            raise InvalidRequest(f"{where} is before 1970-01-01T00:00:00Z: {value!r}")
        return ms
    if type(value) in (int, float) and 0 <= value < 1e13:
        return int(value * 1000)
    raise InvalidRequest(f"{where} must be an ISO-8601 instant or epoch seconds")


@router.post(INSTANCE + "/positions", status_code=204, summary="Seek: where the next records start",
             openapi_extra=bodies.SEEK_OPENAPI)
async def seek(request: Request, group: str, instance: str) -> Response:
    """Confluent's ConsumerSeekRequest: ``offsets`` ``[{topic, partition, offset}]``
    and/or ``timestamps`` ``[{topic, partition, timestamp}]`` (each optional)."""
    consumer = instance_of(request)
    doc = await _body(request)
    if doc.get("offsets") is None and doc.get("timestamps") is None:
        raise InvalidRequest("a seek needs 'offsets' or 'timestamps'")
    offsets = [
        (_str_field(o, "topic", f"offsets[{i}]"), _int_field(o, "partition", f"offsets[{i}]"),
         _int_field(o, "offset", f"offsets[{i}]"))
        for i, o in enumerate(_items(doc, "offsets") if doc.get("offsets") is not None else [])
    ]
    times = [
        (_str_field(o, "topic", f"timestamps[{i}]"), _int_field(o, "partition", f"timestamps[{i}]"),
         seek_instant_ms(o.get("timestamp"), f"timestamps[{i}].timestamp"))
        for i, o in enumerate(_items(doc, "timestamps") if doc.get("timestamps") is not None else [])
    ]
    _check_describe(request, times)  # offsetsForTimes is a ListOffsets
    await consumer.seek(offsets, times)
    return _no_content()


@router.post(INSTANCE + "/positions/beginning", status_code=204, summary="Seek to the log start offsets",
             openapi_extra=bodies.SEEK_TO_OPENAPI)
async def seek_to_beginning(request: Request, group: str, instance: str) -> Response:
    consumer = instance_of(request)
    partitions = partitions_of(await _body(request))
    _check_describe(request, partitions)  # a ListOffsets
    await consumer.seek_to(partitions, "beginning")
    return _no_content()


@router.post(INSTANCE + "/positions/end", status_code=204, summary="Seek to the ends of the partitions",
             openapi_extra=bodies.SEEK_TO_OPENAPI)
async def seek_to_end(request: Request, group: str, instance: str) -> Response:
    consumer = instance_of(request)
    partitions = partitions_of(await _body(request))
    _check_describe(request, partitions)  # a ListOffsets
    await consumer.seek_to(partitions, "end")
    return _no_content()


# -- records ------------------------------------------------------------------------------------


def accepted_format(accept: str | None, instance_format: ConsumerFormat) -> ConsumerFormat:
    """The instance's format when the Accept header allows it, else NOT_ACCEPTABLE."""
    if not accept:
        return instance_format
    for part in accept.split(","):
        media = part.split(";", 1)[0].strip().lower()
        if schema_format_of(media) is not None:
            if schema_format_of(media) == instance_format:
                return instance_format
            continue
        try:
            fmt = format_of(media)
        except UnsupportedMediaType:
            continue
        if fmt == instance_format or (fmt is None and (not media or acceptable(media))):
            return instance_format
    raise NotAcceptable(
        "Consumer format does not match the embedded format requested by the Accept header: "
        f"this instance answers {_media_of(instance_format)}"
    )


def _media_of(fmt: ConsumerFormat) -> str:
    if fmt == "binary" or fmt == "json":
        return MEDIA_TYPES[fmt]
    return f"application/vnd.kafka.{fmt}.v2+json"


@router.get(INSTANCE + "/records", summary="Fetch records of the assigned partitions (a poll)",
            openapi_extra=bodies.RECORDS_OPENAPI)
async def read_records(request: Request, group: str, instance: str) -> Response:
    consumer = instance_of(request)
    for topic in {t for t, _ in consumer.assignment} | set(consumer.subscription()):
        authz.check(request, Op.READ, R.TOPIC, topic)  # Fetch: Read on each topic polled
    fmt = accepted_format(request.headers.get("accept"), consumer.config.format)
    if fmt in SCHEMA_TYPES:  # decoded by the schema id each record carries
        registry = registry_of(request)
        encode = functools.partial(schema_rows, registry)
    else:
        assert fmt == "binary" or fmt == "json", fmt
        encode = functools.partial(fetch_body.rows, embedded=fmt)
    batches = await consumer.records(
        query_int(request, "timeout", None), query_int(request, "max_bytes", None), encode=encode,
    )
    parts: list = []
    for topic, pieces in batches:
        authz.check(request, Op.READ, R.TOPIC, topic)  # a pattern may have added a topic meanwhile
        parts.extend(pieces)
    return Response(fetch_body.body(parts), media_type=_media_of(fmt))


# -- offsets ------------------------------------------------------------------------------------


@router.post(INSTANCE + "/offsets", summary="Commit offsets (N stores N+1; no body: every position)",
             openapi_extra=bodies.COMMIT_OPENAPI)
async def commit_offsets(request: Request, group: str, instance: str) -> Response:
    consumer = instance_of(request)
    doc = await _body(request, required=False)
    if doc.get("offsets") is None:
        # every position: Read on each topic it may hold one of (positions are of assigned partitions)
        for topic in sorted({t for t, _ in consumer.assignment} | {t for t, _ in consumer.positions()}):
            authz.check(request, Op.READ, R.TOPIC, topic)
        await consumer.commit(None)
    else:
        entries = []
        for i, o in enumerate(_items(doc, "offsets")):
            where = f"offsets[{i}]"
            metadata = o.get("metadata")
            if metadata is not None and type(metadata) is not str:
                raise InvalidRequest(f"{where}.metadata must be a string")
            entries.append((_str_field(o, "topic", where), _int_field(o, "partition", where),
                            _int_field(o, "offset", where), metadata))
        for topic in {e[0] for e in entries}:
            authz.check(request, Op.READ, R.TOPIC, topic)  # OffsetCommit: Read on each topic
        await consumer.commit(entries)
    return _v2([])


@router.get(INSTANCE + "/offsets", summary="Committed offsets of the given partitions (body: {partitions})",
            openapi_extra=bodies.COMMITTED_OPENAPI)
async def committed_offsets(request: Request, group: str, instance: str) -> Response:
    consumer = instance_of(request)
    partitions = partitions_of(await _body(request))
    for topic in {t for t, _ in partitions}:
        authz.check(request, Op.DESCRIBE, R.TOPIC, topic)  # OffsetFetch: Describe on each topic
    committed = consumer.committed(partitions)
    return _v2({"offsets": [
        {"topic": t, "partition": p, "offset": c.offset, "metadata": c.metadata}
        for (t, p), c in committed.items() if c is not None
    ]})
