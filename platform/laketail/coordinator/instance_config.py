"""What a v2 consumer instance is created with, and the errors only instances raise.

:class:`InstanceConfig` holds the settings of Confluent's create request
(``POST /consumers/{group}``) under their v2 names: ``format`` (binary | json),
``auto.offset.reset`` (earliest | latest | none; Kafka's old smallest / largest too),
``auto.commit.enable``, ``fetch.min.bytes`` (-1: answer as soon as there is any
record), ``consumer.request.timeout.ms`` (how long a records request waits for
more) and ``isolation.level``. Values may be strings or JSON numbers / booleans, as
clients send either; a value that does not parse, or a key v2 does not have, is
INVALID_CONFIG with Confluent's 422/42204.

The errors are REST-only conditions Kafka has no code for (Confluent's codes):
an unknown instance (404/40403), a duplicate name (409/40902), and what Kafka's
consumer throws as IllegalStateException (409/40903): mixing subscription modes,
seeking a partition not assigned.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, Mapping

from laketail.bounds import INT32_MAX, parse_int
from laketail.errors import InvalidConfig, LaketailError
from laketail.records import IsolationLevel

#: binary and json; avro, jsonschema and protobuf decode records by the schema id they
#: carry, through the broker's schema registry (laketail.api.embedded_schemas).
EmbeddedFormat = Literal["binary", "json", "avro", "jsonschema", "protobuf"]
OffsetReset = Literal["earliest", "latest", "none"]


# -- errors ------------------------------------------------------------------------------------


class ConsumerInstanceNotFound(LaketailError):
    kafka_name = "CONSUMER_INSTANCE_NOT_FOUND"
    http_status = 404
    rest_code = 40403


class ConsumerInstanceExists(LaketailError):
    kafka_name = "CONSUMER_INSTANCE_ALREADY_EXISTS"
    http_status = 409
    rest_code = 40902


class IllegalConsumerState(LaketailError):
    """What Kafka's consumer throws as IllegalStateException (Confluent: 409/40903)."""

    kafka_name = "ILLEGAL_STATE"
    http_status = 409
    rest_code = 40903


class InvalidConsumerConfig(InvalidConfig):
    """A create request's setting has a value the instance cannot take (422/42204)."""

    http_status = 422  # Confluent's INVALID_CONSUMER_CONFIG, not Kafka's INVALID_CONFIG (400/40002)
    rest_code = 42204


MUTUALLY_EXCLUSIVE = "Subscription to topics, partitions and pattern are mutually exclusive."


# -- configuration -----------------------------------------------------------------------------


def _text(doc: Mapping[str, Any], key: str) -> str | None:
    raw = doc.get(key)
    if raw is None:
        return None
    if isinstance(raw, bool):
        return "true" if raw else "false"
    if isinstance(raw, (str, int)):
        return str(raw).strip()
    raise InvalidConsumerConfig(f"{key} must be a string, got {type(raw).__name__}")


def _int(doc: Mapping[str, Any], key: str, default: int, minimum: int) -> int:
    raw = _text(doc, key)
    if raw is None:
        return default
    # Both settings are Kafka INTs: a value past int32 is refused, not kept to overflow
    # a timer or a comparison later.
    return parse_int(raw, key, minimum, INT32_MAX, InvalidConsumerConfig)


def _choice(doc: Mapping[str, Any], key: str, default: str, choices: Mapping[str, str]) -> str:
    raw = _text(doc, key)
    if raw is None:
        return default
    value = choices.get(raw.lower())
    if value is None:
        raise InvalidConsumerConfig(f"{key}={raw!r}: must be one of {', '.join(sorted(set(choices.values())))}")
    return value


_CREATE_KEYS = {
    "name", "id", "format", "auto.offset.reset", "auto.commit.enable", "fetch.min.bytes",
    "consumer.request.timeout.ms", "isolation.level",
}


@dataclass(frozen=True)
class InstanceConfig:
    """A consumer instance's settings, from the keys of a v2 create request.

    ``fetch_min_bytes`` -1 (the default) answers as soon as there is any record;
    ``request_timeout_ms`` is how long a records request waits when there is less.
    """

    format: EmbeddedFormat = "binary"
    auto_offset_reset: OffsetReset = "latest"
    auto_commit_enable: bool = True
    fetch_min_bytes: int = -1
    request_timeout_ms: int = 1_000
    isolation_level: IsolationLevel = "read_committed"

    @classmethod
    def from_request(cls, doc: Mapping[str, Any]) -> "InstanceConfig":
        unknown = sorted(set(doc) - _CREATE_KEYS)
        if unknown:
            raise InvalidConsumerConfig(f"unknown consumer setting(s): {', '.join(unknown)}")
        return cls(
            format=_choice(doc, "format", "binary", {  # type: ignore[arg-type]
                f: f for f in ("binary", "json", "avro", "jsonschema", "protobuf")}),
            auto_offset_reset=_choice(doc, "auto.offset.reset", "latest", {  # type: ignore[arg-type]
                "earliest": "earliest", "smallest": "earliest", "latest": "latest",
                "largest": "latest", "none": "none",
            }),
            auto_commit_enable=_choice(doc, "auto.commit.enable", "true",
                                       {"true": "true", "false": "false"}) == "true",
            fetch_min_bytes=_int(doc, "fetch.min.bytes", -1, -1),
            request_timeout_ms=_int(doc, "consumer.request.timeout.ms", 1_000, 0),
            isolation_level=_choice(doc, "isolation.level", "read_committed", {  # type: ignore[arg-type]
                "read_committed": "read_committed", "read_uncommitted": "read_uncommitted",
            }),
        )
