"""The ``laketail`` data source's options, parsed once and validated (Kafka's names).

Source (as Spark's Kafka source, ``laketail.servers`` playing ``kafka.bootstrap.servers``):

=================================  ===========================================================
``laketail.servers``               gateway URLs, comma-separated (required)
``subscribe``                      topics, comma-separated
``subscribePattern``               a regular expression over topic names
``assign``                         JSON ``{"topic": [0, 1]}``
``startingOffsets``                ``earliest`` / ``latest`` / JSON ``{"t": {"0": 23, "1": -2}}``
                                   (-2 earliest, -1 latest); default latest when streaming,
                                   earliest for a batch query
``endingOffsets``                  batch only: ``latest`` (default) or JSON (-1 latest)
``startingTimestamp``              ms: every partition starts at its first record at or after it
``startingOffsetsByTimestamp``     JSON ``{"t": {"0": ms}}``
``startingOffsetsByTimestampStrategy``  ``error`` (default) or ``latest`` when no record is that recent
``endingTimestamp`` / ``endingOffsetsByTimestamp``  batch only, as the starting ones
``maxOffsetsPerTrigger``           streaming: bound on offsets per micro-batch
``minPartitions``                  split offset ranges so a scan has at least this many tasks
``failOnDataLoss``                 ``true`` (default): fail when a range starts below the log start
                                   or past the log end (a topic deleted and created again);
                                   ``false``: go on from what the partition holds
``includeHeaders``                 ``false`` (default): add the ``headers`` column
``isolation.level``                ``read_committed`` (default) or ``read_uncommitted``
                                   (``kafka.isolation.level`` is accepted too)
``groupId``                        commit each finished batch's end offsets to this group
                                   (a failed commit is logged and retried with the next batch)
``default.api.timeout.ms``         how long a request to the gateways is retried (a broker
                                   restarting, a leader moving) before the query fails;
                                   default 60000, as Kafka's clients
=================================  ===========================================================

A timestamp option wins over ``startingOffsets`` (``startingOffsetsByTimestamp`` over
``startingTimestamp``), as in Spark. A JSON spec must name every subscribed partition,
exactly, as Spark's Kafka source requires (INVALID_CONFIG otherwise); partitions
discovered later by a stream start at their earliest offset.

Sink: ``laketail.servers``, ``topic`` (overrides the ``topic`` column), ``sinkId``
(default: the streaming query's checkpoint, else its id; a fresh id for a batch write),
``batchId`` (batch writes: default the current time in microseconds, so a later write
of the same ``sinkId`` is a later batch), ``transaction.timeout.ms`` (default 900000),
``default.api.timeout.ms`` (as the source's). The sink id derived from a checkpoint
location is the same for every spelling of it (``file:/x``, ``file:///x/``, ``/x``).
"""

from __future__ import annotations

import hashlib
import json
import posixpath
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote

from laketail.errors import InvalidConfig, InvalidRequest
from laketail.records import IsolationLevel
from laketail.spark.gateway import DEFAULT_API_TIMEOUT_MS, parse_servers
from laketail.topic_pattern import TopicPattern

EARLIEST = -2
LATEST = -1

TopicPartition = tuple[str, int]


@dataclass(frozen=True)
class OffsetSpec:
    """Where reading starts (or ends) in each partition.

    ``offsets`` and ``timestamps`` name partitions explicitly (an offset may be
    ``EARLIEST`` or ``LATEST``); ``timestamp`` applies to every partition; a partition
    named nowhere gets ``default`` (``EARLIEST`` or ``LATEST``).
    """

    default: int
    offsets: dict[TopicPartition, int] = field(default_factory=dict)
    timestamps: dict[TopicPartition, int] = field(default_factory=dict)
    timestamp: int | None = None
    explicit_default: bool = False  # "earliest"/"latest" was given, not implied

    def for_partition(self, tp: TopicPartition) -> tuple[str, int]:
        """``("offset", n)`` or ``("timestamp", ms)`` for one partition."""
        if tp in self.timestamps:
            return "timestamp", self.timestamps[tp]
        if self.timestamp is not None:
            return "timestamp", self.timestamp
        if tp in self.offsets:
            return "offset", self.offsets[tp]
        return "offset", self.default


@dataclass(frozen=True)
class Subscription:
    """Which topics (and partitions) a query reads: exactly one of the three is set."""

    topics: tuple[str, ...] = ()
    pattern: str | None = None
    assignment: dict[str, tuple[int, ...]] | None = None

    def matches(self, topic: str) -> bool:
        if self.assignment is not None:
            return topic in self.assignment
        if self.pattern is not None:
            return TopicPattern(self.pattern).fullmatch(topic)
        return topic in self.topics


@dataclass(frozen=True)
class SourceOptions:
    servers: tuple[str, ...]
    subscription: Subscription
    starting: OffsetSpec
    ending: OffsetSpec
    max_offsets_per_trigger: int | None = None
    min_partitions: int | None = None
    fail_on_data_loss: bool = True
    include_headers: bool = False
    isolation: IsolationLevel = "read_committed"
    group_id: str | None = None
    timestamp_strategy: str = "error"
    security: tuple[tuple[str, str], ...] = ()  # laketail.security.protocol, laketail.sasl.*, laketail.ssl.*
    api_timeout_ms: int = DEFAULT_API_TIMEOUT_MS  # default.api.timeout.ms

    @property
    def whole_partitions(self) -> bool:
        """A batch read of every partition from earliest to latest, as a view does:
        its ranges are bound when the tasks run (see ``OffsetRange.late``)."""
        def open_ended(spec: OffsetSpec, default: int) -> bool:
            return not spec.offsets and not spec.timestamps and spec.timestamp is None and spec.default == default

        return (open_ended(self.starting, EARLIEST) and open_ended(self.ending, LATEST)
                and self.min_partitions is None and self.group_id is None)

    @classmethod
    def parse(cls, options: Mapping[str, str], *, streaming: bool) -> "SourceOptions":
        opts = _lower(options)
        servers = parse_servers(opts.get("laketail.servers"))
        if not servers:
            raise InvalidConfig("option 'laketail.servers' is required (gateway URLs, comma-separated)")
        starting = _offset_spec(opts, "starting", LATEST if streaming else EARLIEST)
        ending = _offset_spec(opts, "ending", LATEST)
        if streaming and any(k in opts for k in ("endingoffsets", "endingtimestamp", "endingoffsetsbytimestamp")):
            raise InvalidConfig("ending offsets are for batch queries; a stream reads on")
        if not streaming and starting.default == LATEST and starting.explicit_default:
            raise InvalidConfig("startingOffsets=latest is for streaming queries")
        if EARLIEST in ending.offsets.values():
            raise InvalidConfig("endingOffsets cannot be -2 (earliest)")
        if starting.offsets and ending.offsets and not streaming:
            for tp, start in starting.offsets.items():
                end = ending.offsets.get(tp)
                if start >= 0 and end is not None and end >= 0 and start > end:
                    raise InvalidConfig(f"startingOffsets {start} is after endingOffsets {end} for {tp[0]}-{tp[1]}")
        isolation = opts.get("isolation.level", opts.get("kafka.isolation.level", "read_committed"))
        if isolation not in ("read_committed", "read_uncommitted"):
            raise InvalidConfig(f"isolation.level must be read_committed or read_uncommitted, got {isolation!r}")
        strategy = opts.get("startingoffsetsbytimestampstrategy", "error").lower()
        if strategy not in ("error", "latest"):
            raise InvalidConfig(f"startingOffsetsByTimestampStrategy must be error or latest, got {strategy!r}")
        return cls(
            servers=servers,
            subscription=_subscription(opts),
            starting=starting,
            ending=ending,
            max_offsets_per_trigger=_positive_int(opts, "maxoffsetspertrigger", "maxOffsetsPerTrigger"),
            min_partitions=_positive_int(opts, "minpartitions", "minPartitions"),
            fail_on_data_loss=_bool(opts, "failondataloss", True),
            include_headers=_bool(opts, "includeheaders", False),
            isolation=isolation,  # type: ignore[arg-type]
            group_id=opts.get("groupid") or None,
            timestamp_strategy=strategy,
            security=security_options(opts),
            api_timeout_ms=_api_timeout_ms(opts),
        )


@dataclass(frozen=True)
class SinkOptions:
    servers: tuple[str, ...]
    topic: str | None
    sink_id: str | None
    batch_id: int | None
    transaction_timeout_ms: int
    security: tuple[tuple[str, str], ...] = ()
    api_timeout_ms: int = DEFAULT_API_TIMEOUT_MS  # default.api.timeout.ms

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> "SinkOptions":
        opts = _lower(options)
        servers = parse_servers(opts.get("laketail.servers"))
        if not servers:
            raise InvalidConfig("option 'laketail.servers' is required (gateway URLs, comma-separated)")
        sink_id = opts.get("sinkid") or None
        if sink_id is None and opts.get("checkpointlocation"):
            sink_id = checkpoint_sink_id(opts["checkpointlocation"])
        batch_id = opts.get("batchid")
        return cls(
            servers=servers,
            topic=opts.get("topic") or None,
            sink_id=sink_id,
            batch_id=int(batch_id) if batch_id not in (None, "") else None,
            transaction_timeout_ms=_positive_int(opts, "transaction.timeout.ms", "transaction.timeout.ms") or 900_000,
            security=security_options(opts),
            api_timeout_ms=_api_timeout_ms(opts),
        )


def checkpoint_sink_id(location: str) -> str:
    """A sink id that names a streaming query's checkpoint (stable across restarts and
    across spellings of the location: see :func:`normalize_location`)."""
    digest = hashlib.sha1(normalize_location(location).encode()).hexdigest()[:16]
    return f"spark-checkpoint-{digest}"


def normalize_location(location: str) -> str:
    """One spelling of a checkpoint location: a local one (``file:/x``, ``file:///x``,
    ``file://localhost/x``, ``/x/``, ``/a/../x``) as its absolute path without a trailing
    slash -- what an unchanged ``/x`` always hashed to, so existing sink ids stay -- and
    any other URI (``s3a://b/x/``) without its trailing slashes."""
    if location.startswith("file:"):
        rest = location[len("file:"):]
        if rest.startswith("//"):
            authority, _, path = rest[2:].partition("/")
            rest = "/" + path if authority in ("", "localhost") else rest
        location = unquote(rest)
    if "://" not in location:
        return posixpath.normpath(posixpath.abspath(location)) if location else location
    return location.rstrip("/")


def _api_timeout_ms(opts: dict[str, str]) -> int:
    return _positive_int(opts, "default.api.timeout.ms", "default.api.timeout.ms") or DEFAULT_API_TIMEOUT_MS


# -- parsing helpers ------------------------------------------------------------------------------


def security_options(opts: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    """The client security settings among the options, as Spark's Kafka source takes
    ``kafka.``-prefixed ones: ``laketail.security.protocol``, ``laketail.sasl.mechanism``,
    ``laketail.sasl.username``, ``laketail.sasl.password``, ``laketail.ssl.ca.location``, ...
    (prefix removed, checked now so a bad one fails the query's planning)."""
    from laketail.client.security import KEYS, client_security

    found = tuple(sorted((k[len("laketail."):], v) for k, v in opts.items()
                         if k.startswith("laketail.") and k[len("laketail."):] in KEYS))
    if found:
        try:
            client_security(dict(found))
        except ValueError as exc:
            raise InvalidConfig(f"laketail.* security options: {exc}") from exc
    return found


def _lower(options: Mapping[str, str]) -> dict[str, str]:
    return {str(k).lower(): str(v) for k, v in options.items() if v is not None}


def _bool(opts: dict[str, str], key: str, default: bool) -> bool:
    raw = opts.get(key)
    if raw is None:
        return default
    if raw.strip().lower() not in ("true", "false"):
        raise InvalidConfig(f"option '{key}' must be true or false, got {raw!r}")
    return raw.strip().lower() == "true"


def _positive_int(opts: dict[str, str], key: str, name: str) -> int | None:
    raw = opts.get(key)
    if raw is None or raw == "":
        return None
    try:
        value = int(raw)
    except ValueError:
        raise InvalidConfig(f"option '{name}' must be a positive integer, got {raw!r}") from None
    if value <= 0:
        raise InvalidConfig(f"option '{name}' must be a positive integer, got {raw!r}")
    return value


def _json(opts: dict[str, str], key: str, name: str) -> Any:
    try:
        return json.loads(opts[key])
    except ValueError as exc:
        raise InvalidConfig(f"option '{name}' is not valid JSON: {exc}") from None


def _subscription(opts: dict[str, str]) -> Subscription:
    given = [k for k in ("subscribe", "subscribepattern", "assign") if opts.get(k)]
    if len(given) != 1:
        raise InvalidConfig("exactly one of 'subscribe', 'subscribePattern' or 'assign' is required")
    kind = given[0]
    if kind == "subscribe":
        topics = tuple(t.strip() for t in opts["subscribe"].split(",") if t.strip())
        if not topics:
            raise InvalidConfig("option 'subscribe' names no topic")
        return Subscription(topics=topics)
    if kind == "subscribepattern":
        try:
            TopicPattern(opts["subscribepattern"])
        except InvalidRequest as exc:
            raise InvalidConfig(f"option 'subscribePattern': {exc}") from None
        return Subscription(pattern=opts["subscribepattern"])
    doc = _json(opts, "assign", "assign")
    if not isinstance(doc, dict) or not all(
        isinstance(ps, list) and all(isinstance(p, int) and p >= 0 for p in ps) for ps in doc.values()
    ):
        raise InvalidConfig('option \'assign\' must look like {"topic": [0, 1]}')
    return Subscription(assignment={t: tuple(sorted(set(ps))) for t, ps in doc.items()})


def _per_partition(opts: dict[str, str], key: str, name: str) -> dict[TopicPartition, int]:
    doc = _json(opts, key, name)
    if not isinstance(doc, dict):
        raise InvalidConfig(f'option \'{name}\' must look like {{"topic": {{"0": 23}}}}')
    out: dict[TopicPartition, int] = {}
    for topic, parts in doc.items():
        if not isinstance(parts, dict):
            raise InvalidConfig(f'option \'{name}\' must look like {{"topic": {{"0": 23}}}}')
        for p, value in parts.items():
            try:
                partition, number = int(p), int(value)
            except (TypeError, ValueError):
                raise InvalidConfig(f"option '{name}': {topic}-{p} = {value!r} is not a number") from None
            if partition < 0 or number < -2:
                raise InvalidConfig(f"option '{name}': {topic}-{p} = {value!r} is out of range")
            out[(topic, partition)] = number
    return out


def _offset_spec(opts: dict[str, str], which: str, default: int) -> OffsetSpec:
    """``which`` is ``starting`` or ``ending``."""
    title = which
    offsets: dict[TopicPartition, int] = {}
    explicit = False
    raw = opts.get(f"{which}offsets")
    if raw is not None:
        word = raw.strip().lower()
        if word == "earliest":
            default, explicit = EARLIEST, True
        elif word == "latest":
            default, explicit = LATEST, True
        else:
            offsets = _per_partition(opts, f"{which}offsets", f"{title}Offsets")
    timestamps: dict[TopicPartition, int] = {}
    if opts.get(f"{which}offsetsbytimestamp"):
        timestamps = _per_partition(opts, f"{which}offsetsbytimestamp", f"{title}OffsetsByTimestamp")
    timestamp = None
    if opts.get(f"{which}timestamp"):
        try:
            timestamp = int(opts[f"{which}timestamp"])
        except ValueError:
            raise InvalidConfig(f"option '{title}Timestamp' must be milliseconds since the epoch") from None
        if timestamp < 0:
            raise InvalidConfig(f"option '{title}Timestamp' must be milliseconds since the epoch")
    return OffsetSpec(default, offsets, timestamps, timestamp, explicit)
