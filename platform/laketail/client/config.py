"""Client configuration: librdkafka's property names, parsed once into typed, frozen values.

``Producer(conf)``, ``Consumer(conf)`` and ``AdminClient(conf)`` take a dict of
librdkafka properties (``"bootstrap.servers"``, ``"linger.ms"``, ...), optionally
overridden by keyword arguments spelled with underscores (``linger_ms=10``), as
confluent-kafka does. :func:`parse` checks every key against its role's table and
turns values into Python types with their units in the field names; an unknown key is
``KafkaError._INVALID_ARG`` ("No such configuration property"), as librdkafka says.

Security properties (``security.protocol``, ``sasl.*``, ``ssl.*``) become the
config's ``security`` (:mod:`laketail.client.security`). Properties that only tune
librdkafka's own machinery (socket buffers, compression, statistics, ...) are
accepted and ignored (:data:`IGNORED`), so a
configuration written for confluent-kafka keeps working; they have no meaning for
laketail's HTTP gateway. ``bootstrap.servers`` lists gateway URLs
(``http://host:8082``; a bare ``host:port`` means ``http://host:port``).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from typing import Any, Callable

from laketail.client.errors import KafkaException, local_error
from laketail.client.security import KEYS as SECURITY_KEYS
from laketail.client.security import ClientSecurity, client_security

#: librdkafka properties accepted for compatibility and without effect here.
IGNORED = frozenset({
    "api.version.request", "api.version.fallback.ms", "broker.version.fallback",
    "broker.address.family", "check.crcs", "client.rack", "compression.codec",
    "compression.level", "compression.type", "connections.max.idle.ms", "debug",
    "enable.ssl.certificate.verification", "fetch.error.backoff.ms", "fetch.min.bytes",
    "fetch.queue.backoff.ms", "group.instance.id", "group.protocol", "log_level", "logger",
    "log.connection.close", "message.copy.max.bytes", "enable.gapless.guarantee",
    "partitioner", "queue.buffering.max.kbytes",
    "queued.max.messages.kbytes", "queued.min.messages",
    "receive.message.max.bytes", "retry.backoff.max.ms", "socket.keepalive.enable",
    "socket.nagle.disable", "socket.receive.buffer.bytes", "socket.send.buffer.bytes",
    "statistics.interval.ms", "stats_cb", "throttle_cb",
    "topic.metadata.propagation.max.ms", "sticky.partitioning.linger.ms",
})
_IGNORED_PREFIXES = ("ssl.", "sasl.", "ssl_", "sasl_")


def _bool(raw: Any) -> bool:
    if isinstance(raw, bool):
        return raw
    text = str(raw).strip().lower()
    if text in ("true", "1", "yes", "on"):
        return True
    if text in ("false", "0", "no", "off"):
        return False
    raise ValueError(f"expected true or false, got {raw!r}")


def _servers(raw: Any) -> tuple[str, ...]:
    items = raw if isinstance(raw, (list, tuple)) else str(raw).split(",")
    out = []
    for item in items:
        url = str(item).strip().rstrip("/")
        if url:
            out.append(url if "://" in url else f"http://{url}")
    if not out:
        raise ValueError("needs at least one gateway URL")
    return tuple(out)


def _tls_servers(raw: Any) -> Any:
    """Bare ``host:port`` entries as ``https://`` (security.protocol SSL or SASL_SSL)."""
    items = raw if isinstance(raw, (list, tuple)) else str(raw).split(",")
    return [str(i).strip() if "://" in str(i) else f"https://{str(i).strip()}" for i in items if str(i).strip()]


def _acks(raw: Any) -> str:
    text = str(raw).strip().lower()
    mapped = {"all": "all", "-1": "all", "1": "1", "0": "0"}.get(text)
    if mapped is None:
        raise ValueError(f"acks must be 0, 1, all or -1, got {raw!r}")
    return mapped


def _reset(raw: Any) -> str:
    text = str(raw).strip().lower()
    mapped = {"earliest": "earliest", "smallest": "earliest", "beginning": "earliest",
              "latest": "latest", "largest": "latest", "end": "latest",
              "none": "none", "error": "none"}.get(text)
    if mapped is None:
        raise ValueError(f"auto.offset.reset must be earliest, latest or none, got {raw!r}")
    return mapped


def _isolation(raw: Any) -> str:
    text = str(raw).strip().lower()
    if text not in ("read_committed", "read_uncommitted"):
        raise ValueError(f"isolation.level must be read_committed or read_uncommitted, got {raw!r}")
    return text


def _strategies(raw: Any) -> tuple[str, ...]:
    items = raw if isinstance(raw, (list, tuple)) else str(raw).split(",")
    out = tuple(s.strip().lower() for s in items if str(s).strip())
    known = {"range", "roundrobin", "cooperative-sticky"}
    unknown = [s for s in out if s not in known]
    if unknown or not out:
        raise ValueError(f"partition.assignment.strategy must list {sorted(known)}, got {raw!r}")
    return out


def _callable(raw: Any) -> Callable | None:
    if raw is not None and not callable(raw):
        raise ValueError("expected a callable")
    return raw


def _key(name: str, parse: Callable[[Any], Any] = int, *aliases: str) -> dict:
    """Field metadata: the property's name, parser and aliases."""
    return {"kafka": name, "parse": parse, "aliases": aliases}


@dataclass(frozen=True)
class CommonConfig:
    bootstrap_servers: tuple[str, ...] = field(
        default=("http://127.0.0.1:8082",), metadata=_key("bootstrap.servers", _servers, "metadata.broker.list"))
    client_id: str = field(default="rdkafka", metadata=_key("client.id", str))
    socket_timeout_ms: int = field(default=60_000, metadata=_key("socket.timeout.ms", int, "request.timeout.ms"))
    retry_backoff_ms: int = field(default=100, metadata=_key("retry.backoff.ms"))
    #: How long a broker that could not be reached is tried only after the others,
    #: doubling with each failure in a row up to ``reconnect.backoff.max.ms``.
    reconnect_backoff_ms: int = field(default=100, metadata=_key("reconnect.backoff.ms"))
    reconnect_backoff_max_ms: int = field(default=10_000, metadata=_key("reconnect.backoff.max.ms"))
    metadata_max_age_ms: int = field(
        default=300_000, metadata=_key("topic.metadata.refresh.interval.ms", int, "metadata.max.age.ms"))
    message_max_bytes: int = field(default=1_000_000, metadata=_key("message.max.bytes"))
    error_cb: Callable | None = field(default=None, metadata=_key("error_cb", _callable))
    security: ClientSecurity = field(default_factory=ClientSecurity)  # security.protocol, sasl.*, ssl.*


@dataclass(frozen=True)
class ProducerConfig(CommonConfig):
    acks: str = field(default="all", metadata=_key("acks", _acks, "request.required.acks"))
    linger_ms: float = field(default=5.0, metadata=_key("linger.ms", float, "queue.buffering.max.ms"))
    batch_size: int = field(default=1_000_000, metadata=_key("batch.size"))
    batch_num_messages: int = field(default=10_000, metadata=_key("batch.num.messages"))
    retries: int = field(default=2_147_483_647, metadata=_key("retries", int, "message.send.max.retries"))
    delivery_timeout_ms: int = field(
        default=300_000, metadata=_key("delivery.timeout.ms", int, "message.timeout.ms"))
    enable_idempotence: bool = field(default=True, metadata=_key("enable.idempotence", _bool))
    transactional_id: str | None = field(default=None, metadata=_key("transactional.id", str))
    transaction_timeout_ms: int = field(default=60_000, metadata=_key("transaction.timeout.ms"))
    max_in_flight: int = field(
        default=1_000_000, metadata=_key("max.in.flight", int, "max.in.flight.requests.per.connection"))
    on_delivery: Callable | None = field(default=None, metadata=_key("on_delivery", _callable))
    delivery_report_only_error: bool = field(
        default=False, metadata=_key("delivery.report.only.error", _bool))
    queue_buffering_max_messages: int = field(
        default=100_000, metadata=_key("queue.buffering.max.messages"))
    max_in_flight_batches: int = field(default=4, metadata=_key("laketail.sender.threads"))
    #: The properties the application set itself (librdkafka's "modified" flags), by
    #: Kafka name; :func:`producer_config` tells defaults from explicit choices with it.
    explicit: frozenset[str] = field(default=frozenset(), metadata={})


@dataclass(frozen=True)
class ConsumerConfig(CommonConfig):
    group_id: str | None = field(default=None, metadata=_key("group.id", str))
    auto_offset_reset: str = field(default="latest", metadata=_key("auto.offset.reset", _reset))
    enable_auto_commit: bool = field(default=True, metadata=_key("enable.auto.commit", _bool))
    auto_commit_interval_ms: int = field(default=5_000, metadata=_key("auto.commit.interval.ms"))
    enable_auto_offset_store: bool = field(default=True, metadata=_key("enable.auto.offset.store", _bool))
    enable_partition_eof: bool = field(default=False, metadata=_key("enable.partition.eof", _bool))
    isolation_level: str = field(default="read_committed", metadata=_key("isolation.level", _isolation))
    session_timeout_ms: int = field(default=45_000, metadata=_key("session.timeout.ms"))
    heartbeat_interval_ms: int = field(default=3_000, metadata=_key("heartbeat.interval.ms"))
    max_poll_interval_ms: int = field(default=300_000, metadata=_key("max.poll.interval.ms"))
    partition_assignment_strategy: tuple[str, ...] = field(
        default=("range", "roundrobin"), metadata=_key("partition.assignment.strategy", _strategies))
    fetch_wait_max_ms: int = field(default=500, metadata=_key("fetch.wait.max.ms", int, "fetch.max.wait.ms"))
    max_partition_fetch_bytes: int = field(
        default=1_048_576, metadata=_key("max.partition.fetch.bytes", int, "fetch.message.max.bytes"))
    fetch_max_bytes: int = field(default=52_428_800, metadata=_key("fetch.max.bytes"))
    fetch_max_records: int = field(default=500, metadata=_key("laketail.fetch.max.records"))
    on_commit: Callable | None = field(default=None, metadata=_key("on_commit", _callable))
    #: librdkafka's default (false; Java's consumer says true): a subscription by name
    #: asks the broker to auto-create the topic (the broker's auto.create.topics.enable decides).
    allow_auto_create_topics: bool = field(default=False, metadata=_key("allow.auto.create.topics", _bool))


@dataclass(frozen=True)
class AdminConfig(CommonConfig):
    pass


def _table(cls: type) -> dict[str, Any]:
    out = {}
    for f in fields(cls):
        meta = f.metadata
        if not meta:
            continue
        for name in (meta["kafka"], *meta["aliases"]):
            out[name] = f
    return out


def parse(cls: type, conf: dict[str, Any] | None, kwargs: dict[str, Any]):
    """``cls`` (a config dataclass) from a librdkafka property dict and keyword overrides."""
    table = _table(cls)
    merged: dict[str, Any] = dict(conf or {})
    for key, value in kwargs.items():
        native = key in table or key in IGNORED
        merged[key if native else key.replace("_", ".")] = value
    values: dict[str, Any] = {}
    explicit: set[str] = set()
    try:
        values["security"] = client_security({k: v for k, v in merged.items() if k in SECURITY_KEYS})
    except ValueError as exc:
        raise KafkaException(local_error("_INVALID_ARG", f"Invalid security configuration: {exc}")) from None
    if values["security"].tls and "bootstrap.servers" in merged:
        merged["bootstrap.servers"] = _tls_servers(merged["bootstrap.servers"])
    for name, raw in merged.items():
        if name in SECURITY_KEYS:
            continue
        f = table.get(name)
        if f is None:
            if name in IGNORED or name.startswith(_IGNORED_PREFIXES) or name.startswith("default.topic.config"):
                continue
            raise KafkaException(local_error("_INVALID_ARG", f'No such configuration property: "{name}"'))
        try:
            values[f.name] = f.metadata["parse"](raw)
        except (TypeError, ValueError) as exc:
            raise KafkaException(
                local_error("_INVALID_ARG", f'Invalid value "{raw}" for configuration property "{name}": {exc}')
            ) from None
        explicit.add(f.metadata["kafka"])
    if "explicit" in {f.name for f in fields(cls)}:
        values["explicit"] = frozenset(explicit)
    return cls(**values)


#: librdkafka's limit on requests in flight per broker for an idempotent producer.
IDEMPOTENT_MAX_IN_FLIGHT = 5


def _conflict(reason: str) -> KafkaException:
    return KafkaException(local_error("_INVALID_ARG", f"Failed to create producer: {reason}"))


def producer_config(conf: dict[str, Any] | None, kwargs: dict[str, Any]) -> ProducerConfig:
    """A :class:`ProducerConfig` with the idempotence and transaction rules applied.

    librdkafka's rules, with Kafka 3's default (idempotence on) where librdkafka's
    default is off:

    * ``transactional.id`` turns idempotence on; an explicit
      ``enable.idempotence=false`` beside it is an error.
    * With idempotence on *explicitly* (or through ``transactional.id``), an explicit
      ``acks`` other than ``all``, ``retries`` < 1 or ``max.in.flight`` > 5 is an
      error (``_INVALID_ARG``, librdkafka's message); unset, they become ``all``,
      ``retries``' default and at most 5.
    * With idempotence on only by default, such an explicit setting turns idempotence
      off instead, as Kafka's Java producer does since 3.2 -- so ``acks=1`` keeps
      meaning what it meant before idempotence became the default.
    * A transactional producer's ``message.timeout.ms`` (``delivery.timeout.ms``) and
      ``socket.timeout.ms`` may not exceed ``transaction.timeout.ms``; unset, they are
      lowered to it.
    """
    config = parse(ProducerConfig, conf, kwargs)
    explicit = config.explicit
    changes: dict[str, Any] = {}
    transactional = config.transactional_id is not None
    if transactional and not config.enable_idempotence:
        raise _conflict("`transactional.id` requires `enable.idempotence=true`")
    conflicts = {
        "acks": (config.acks != "all", "`acks` must be set to `all` when `enable.idempotence` is true"),
        "retries": (config.retries < 1, "`retries` must be set >= 1 when `enable.idempotence` is true"),
        "max.in.flight": (config.max_in_flight > IDEMPOTENT_MAX_IN_FLIGHT,
                          f"`max.in.flight` must be set <= {IDEMPOTENT_MAX_IN_FLIGHT} "
                          "when `enable.idempotence` is true"),
    }
    chosen = [(name, reason) for name, (bad, reason) in conflicts.items() if bad and name in explicit]
    idempotent = config.enable_idempotence
    if idempotent and chosen:
        if transactional or "enable.idempotence" in explicit:
            raise _conflict(chosen[0][1])
        idempotent = False  # on by default only: the explicit setting wins
    changes["enable_idempotence"] = idempotent
    if idempotent:
        changes["acks"] = "all"
        changes["max_in_flight"] = min(config.max_in_flight, IDEMPOTENT_MAX_IN_FLIGHT)
    if transactional:
        limit = config.transaction_timeout_ms
        for key, name, attr in (("delivery.timeout.ms", "message.timeout.ms", "delivery_timeout_ms"),
                                ("socket.timeout.ms", "socket.timeout.ms", "socket_timeout_ms")):
            if getattr(config, attr) > limit:
                if key in explicit:
                    raise _conflict(f"`{name}` must be set <= `transaction.timeout.ms`")
                changes[attr] = limit
    return replace(config, **changes)
