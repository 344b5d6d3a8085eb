"""An OpenAPI description of the ``/internal/v1`` routes, for the fuzzer only.

The gateway leaves its inter-broker routes out of ``/openapi.json`` (clients have no
business there), but until they move behind the inter-broker listener any client can
reach them, so the fuzzer sends them bodies too. The shapes are what
:mod:`laketail.api.routes.internal` reads; merge :data:`PATHS` into a served
description with :func:`with_internal_paths`.
"""

from __future__ import annotations

import copy
from typing import Any

_INT = {"type": "integer"}
_STR = {"type": "string"}
_TOPIC = {"name": "topic", "in": "path", "required": True, "schema": _STR}
_PARTITION = {"name": "partition", "in": "path", "required": True, "schema": _INT}


def _json_body(schema: dict[str, Any]) -> dict[str, Any]:
    return {"required": True, "content": {"application/json": {"schema": schema}}}


def _obj(required: list[str], **properties: Any) -> dict[str, Any]:
    return {"type": "object", "required": required, "properties": properties}


def _query(name: str, schema: dict[str, Any], required: bool = False) -> dict[str, Any]:
    return {"name": name, "in": "query", "required": required, "schema": schema}


_OK = {"200": {"description": "OK"}}

_REGISTRATION = _obj(
    ["topic", "partition", "leader", "leader_epoch", "partition_epoch", "isr"],
    topic=_STR, partition=_INT, leader=_INT, leader_epoch=_INT, partition_epoch=_INT,
    isr={"type": "array", "items": _INT},
)

PATHS: dict[str, Any] = {
    "/internal/v1/heartbeat": {"post": {"responses": _OK, "requestBody": _json_body(_obj(
        ["broker_id", "url", "incarnation", "leos", "known_version"],
        broker_id=_INT, url=_STR, incarnation=_STR,
        leos={"type": "object", "additionalProperties": _INT}, known_version=_INT,
    ))}},
    "/internal/v1/alter-partition": {"post": {"responses": _OK, "requestBody": _json_body(_REGISTRATION)}},
    "/internal/v1/topics": {"post": {"responses": _OK, "requestBody": _json_body(_obj(
        ["name", "partitions", "replication_factor", "configs"],
        name=_STR, partitions=_INT, replication_factor=_INT,
        configs={"type": "object", "additionalProperties": _STR},
    ))}},
    "/internal/v1/topics/{topic}": {"delete": {"parameters": [_TOPIC], "responses": _OK}},
    "/internal/v1/topics/{topic}/configs": {"put": {
        "parameters": [_TOPIC], "responses": _OK,
        "requestBody": _json_body({"type": "object", "additionalProperties": _STR}),
    }},
    "/internal/v1/metadata": {"post": {"responses": _OK, "requestBody": _json_body(_obj(
        ["version", "controller_id", "controller_epoch", "brokers", "topics", "partitions"],
        version=_INT, controller_id=_INT, controller_epoch=_INT,
        brokers={"type": "array", "items": {"type": "object"}},
        topics={"type": "array", "items": {"type": "object"}},
        partitions={"type": "array", "items": _REGISTRATION},
    ))}},
    "/internal/v1/replica-fetch": {"post": {"responses": _OK, "requestBody": _json_body(_obj(
        ["replica_id", "partitions", "max_wait_ms", "max_bytes"],
        replica_id=_INT, max_wait_ms=_INT, max_bytes=_INT,
        partitions={"type": "array", "items": _obj(
            ["topic", "partition", "leader_epoch", "fetch_offset", "last_fetched_epoch"],
            topic=_STR, partition=_INT, leader_epoch=_INT, fetch_offset=_INT, last_fetched_epoch=_INT,
        )},
    ))}},
    "/internal/v1/partitions/{topic}/{partition}/append": {"post": {
        "parameters": [_TOPIC, _PARTITION, _query("acks", {"type": "string", "enum": ["0", "1", "all"]}),
                       _query("max_timestamp_us", _INT), _query("producer_id", _INT),
                       _query("producer_epoch", _INT), _query("base_sequence", _INT)],
        "responses": _OK,
        "requestBody": {"required": True, "content": {
            "application/vnd.apache.arrow.stream": {"schema": {"type": "string", "format": "binary"}},
        }},
    }},
    "/internal/v1/partitions/{topic}/{partition}/records": {"get": {
        "parameters": [_TOPIC, _PARTITION, _query("offset", _INT, required=True), _query("timeout_ms", _INT),
                       _query("max_records", _INT), _query("max_bytes", _INT),
                       _query("isolation", {"type": "string", "enum": ["read_committed", "read_uncommitted"]})],
        "responses": _OK,
    }},
    "/internal/v1/partitions/{topic}/{partition}/state": {"get": {
        "parameters": [_TOPIC, _PARTITION], "responses": _OK,
    }},
    "/internal/v1/partitions/{topic}/{partition}/offset-for-timestamp": {"get": {
        "parameters": [_TOPIC, _PARTITION, _query("timestamp", _INT, required=True)], "responses": _OK,
    }},
    "/internal/v1/partitions/{topic}/{partition}/epochs": {"get": {
        "parameters": [_TOPIC, _PARTITION], "responses": _OK,
    }},
    "/internal/v1/kafka/{listener}": {"post": {
        "parameters": [{"name": "listener", "in": "path", "required": True, "schema": _STR}],
        "responses": _OK,
        "requestBody": {"required": True, "content": {
            "application/octet-stream": {"schema": {"type": "string", "format": "binary"}},
        }},
    }},
}


def with_internal_paths(description: dict[str, Any]) -> dict[str, Any]:
    """A copy of ``description`` with the internal routes added."""
    out = copy.deepcopy(description)
    out.setdefault("paths", {}).update(copy.deepcopy(PATHS))
    return out
