"""OpenAPI descriptions of the v2 consumer-instance request bodies (Confluent REST Proxy v2).

The routes in :mod:`laketail.api.routes.consumers` parse their raw bodies themselves
(:func:`laketail.api.routes.consumers._body` and its field helpers), so FastAPI cannot
infer what they take; each ``*_OPENAPI`` dict here is the ``openapi_extra`` of one route
and states, as JSON Schema, exactly the shape that parsing accepts. The schemas only
document: nothing here validates a request, and a body that breaks them is answered by
the route's own checks (400/40000 INVALID_REQUEST, 422/42204 INVALID_CONFIG).

Bodies are sent as ``application/vnd.kafka.v2+json`` (Confluent's clients) or
``application/json``; both are listed with the same schema.
"""

from __future__ import annotations

from typing import Any

V2_JSON = "application/vnd.kafka.v2+json"

_TOPIC = {"type": "string", "minLength": 1}
_PARTITION = {"type": "integer", "minimum": 0}

_TOPIC_PARTITION = {
    "type": "object",
    "required": ["topic", "partition"],
    "properties": {"topic": _TOPIC, "partition": _PARTITION},
}

_PARTITIONS = {
    "type": "object",
    "required": ["partitions"],
    "properties": {"partitions": {"type": "array", "items": _TOPIC_PARTITION}},
}

_CONFIG_VALUE = {"oneOf": [{"type": "string"}, {"type": "integer"}, {"type": "boolean"}]}

_CREATE = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "description": "the instance id (generated when absent)"},
        "format": {"type": "string", "enum": ["binary", "json"], "default": "binary"},
        "auto.offset.reset": {"type": "string", "enum": ["earliest", "latest", "none"],
                              "default": "latest"},
        "auto.commit.enable": {**_CONFIG_VALUE, "description": "true or false"},
        "fetch.min.bytes": {**_CONFIG_VALUE, "description": "-1: answer as soon as there is a record"},
        "consumer.request.timeout.ms": {**_CONFIG_VALUE,
                                        "description": "how long a records request waits for more"},
        "isolation.level": {"type": "string", "enum": ["read_committed", "read_uncommitted"],
                            "default": "read_committed"},
    },
}

_SUBSCRIPTION = {
    "type": "object",
    "description": "either topics or topic_pattern",
    "properties": {
        "topics": {"type": "array", "items": {"type": "string"}},
        "topic_pattern": {"type": "string", "description": "a regular expression over topic names"},
    },
}

_SEEK = {
    "type": "object",
    "required": ["offsets"],
    "properties": {"offsets": {"type": "array", "items": {
        "type": "object",
        "required": ["topic", "partition", "offset"],
        "properties": {"topic": _TOPIC, "partition": _PARTITION, "offset": {"type": "integer"}},
    }}},
}

_COMMIT = {
    "type": "object",
    "description": "no body, or no offsets: commit every position",
    "properties": {"offsets": {"type": "array", "items": {
        "type": "object",
        "required": ["topic", "partition", "offset"],
        "properties": {
            "topic": _TOPIC,
            "partition": _PARTITION,
            "offset": {"type": "integer", "description": "the last record processed (offset + 1 is stored)"},
            "metadata": {"type": "string"},
        },
    }}},
}


def _body(schema: dict[str, Any], required: bool = True) -> dict[str, Any]:
    return {"requestBody": {
        "required": required,
        "content": {V2_JSON: {"schema": schema}, "application/json": {"schema": schema}},
    }}


CREATE_OPENAPI = _body(_CREATE, required=False)
SUBSCRIBE_OPENAPI = _body(_SUBSCRIPTION)
ASSIGN_OPENAPI = _body(_PARTITIONS)
SEEK_OPENAPI = _body(_SEEK)
SEEK_TO_OPENAPI = _body(_PARTITIONS)
COMMIT_OPENAPI = _body(_COMMIT, required=False)
#: A GET with a body, as Confluent's v2 defines it (OpenAPI 3.1 allows describing one).
COMMITTED_OPENAPI = _body(_PARTITIONS)
#: ``GET .../records``: its query parameters (read by the route itself).
RECORDS_OPENAPI = {"parameters": [
    {"name": "timeout", "in": "query", "required": False, "schema": {"type": "integer"},
     "description": "ms to wait for records, at most the instance's consumer.request.timeout.ms (the "
                    "default) and 30 s"},
    {"name": "max_bytes", "in": "query", "required": False, "schema": {"type": "integer"},
     "description": "stop adding records past this many bytes"},
]}
