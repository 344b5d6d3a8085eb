"""Typed configuration under Kafka's key names.

Two kinds of configuration, each a frozen dataclass whose fields carry their unit in
the name (``retention_ms``, ``segment_bytes``) and map one-to-one onto Kafka's dotted
keys (``retention.ms``, ``segment.bytes``):

* :class:`TopicConfig` -- per topic, set at create/alter time and stored in the
  catalog. :data:`TOPIC_CONFIGS` lists every key with its type, default, validator and
  doc; a key the table does not know is INVALID_CONFIG.
* :class:`BrokerSettings` -- per broker process, loaded once at the edge (CLI,
  ``create_app``) from ``conf/laketail.toml``, then ``LAKETAIL_*`` environment
  variables, then flags, and passed down. No module-level settings object.

Defaults are Kafka's, except where laketail's design says otherwise (each such key's
doc says why).
"""

from __future__ import annotations

import dataclasses
import os
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

from laketail.errors import InvalidConfig

LONG_MAX = 9223372036854775807


@dataclass(frozen=True)
class ConfigKey:
    """One documented config key: its Kafka name, type, default and validator."""

    name: str
    type: type
    default: Any
    doc: str
    validate: Callable[[Any], bool] = lambda v: True
    choices: tuple[str, ...] | None = None

    @property
    def field_name(self) -> str:
        return self.name.replace(".", "_")

    def parse(self, raw: Any) -> Any:
        value: bool | int | str
        try:
            if self.type is bool:
                if isinstance(raw, bool):
                    value = raw
                elif str(raw).lower() in ("true", "false"):
                    value = str(raw).lower() == "true"
                else:
                    raise ValueError(raw)
            elif self.type is int:
                if isinstance(raw, bool):
                    raise ValueError(raw)
                value = int(str(raw).strip())
                if not -(2**63) <= value < 2**63:  # Kafka's longs; the catalog stores them as such
                    raise ValueError(raw)
            else:
                value = str(raw)
        except (TypeError, ValueError) as exc:
            raise InvalidConfig(
                f"{self.name}={raw!r} is not a valid {self.type.__name__}"
            ) from exc
        if self.choices is not None and value not in self.choices:
            raise InvalidConfig(f"{self.name}={value!r}: must be one of {', '.join(self.choices)}")
        if not self.validate(value):
            raise InvalidConfig(f"{self.name}={value!r} is out of range")
        return value


def _at_least(n: int) -> Callable[[int], bool]:
    return lambda v: v >= n


TOPIC_CONFIGS: dict[str, ConfigKey] = {
    k.name: k
    for k in [
        ConfigKey("cleanup.policy", str, "delete", "delete, compact, or compact,delete",
                  choices=("delete", "compact", "compact,delete", "delete,compact")),
        ConfigKey("retention.ms", int, 604_800_000,
                  "How long records are kept before retention may delete them; -1 keeps them forever.",
                  _at_least(-1)),
        ConfigKey("retention.bytes", int, -1,
                  "Per-partition size above which retention deletes the oldest files; -1 for no limit.",
                  _at_least(-1)),
        ConfigKey("segment.bytes", int, 1_073_741_824, "Roll a hot segment at this size.", _at_least(14)),
        ConfigKey("segment.ms", int, 604_800_000, "Roll a hot segment at this age.", _at_least(1)),
        ConfigKey("flush.messages", int, LONG_MAX,
                  "fsync after this many appended records. Kafka's default: the OS writes the page "
                  "cache back and replication protects acknowledged records; 1 fsyncs every group "
                  "commit, which a topic with one replica needs to survive a power loss.", _at_least(1)),
        ConfigKey("flush.ms", int, LONG_MAX, "fsync when the oldest unflushed append is this old.",
                  _at_least(0)),
        ConfigKey("max.message.bytes", int, 1_048_588,
                  "Largest record (key + value + headers) the partition accepts.", _at_least(0)),
        ConfigKey("message.timestamp.type", str, "CreateTime", "CreateTime or LogAppendTime",
                  choices=("CreateTime", "LogAppendTime")),
        ConfigKey("min.insync.replicas", int, 1,
                  "acks=all needs at least this many in-sync replicas.", _at_least(1)),
        ConfigKey("unclean.leader.election.enable", bool, False,
                  "Elect a leader outside the ISR when the ISR is empty (may lose data)."),
        ConfigKey("delete.retention.ms", int, 86_400_000,
                  "How long key compaction keeps tombstones.", _at_least(0)),
        ConfigKey("min.compaction.lag.ms", int, 0,
                  "Records younger than this are never key-compacted.", _at_least(0)),
        ConfigKey("local.retention.ms", int, 3_600_000,
                  "How long hot segments stay on local disk once fully tiered into the table (a read "
                  "cache). Kafka's tiered storage default is -2 (= retention.ms); laketail keeps an "
                  "hour because the table is the durable copy.", _at_least(-2)),
        ConfigKey("local.retention.bytes", int, -2,
                  "Local size cap for fully tiered hot segments; -2 means retention.bytes. On an "
                  "object-store data root also the most a partition's hot log holds untiered: past it "
                  "produce is refused (KAFKA_STORAGE_ERROR, retriable; REST 503) until tiering catches up.",
                  _at_least(-2)),
        ConfigKey("table.flush.interval.ms", int, 1000,
                  "laketail: at most this long between a record's append and its Delta commit.",
                  _at_least(10)),
        ConfigKey("table.flush.bytes", int, 67_108_864,
                  "laketail: tier early when this many bytes wait in a partition.", _at_least(1024)),
        ConfigKey("confluent.value.schema.validation", bool, False,
                  "Confluent Server's: refuse (INVALID_RECORD) a value not in Confluent's wire format "
                  "of a schema registered under <topic>-value (laketail.schemas.validation)."),
        ConfigKey("confluent.key.schema.validation", bool, False,
                  "Confluent Server's: the same for keys, under <topic>-key."),
        ConfigKey("laketail.table.mode", str, "key_value",
                  "laketail: key_value keeps the table's raw key and value only; value_schema_id_prefix "
                  "also writes value_struct, each value decoded by the <topic>-value schema its wire-format "
                  "prefix names; value_schema_latest decodes each value, unframed, by the latest <topic>-value "
                  "schema (Redpanda's Iceberg modes of those names; docs/schema-registry.md).",
                  choices=("key_value", "value_schema_id_prefix", "value_schema_latest")),
        ConfigKey("laketail.table.key.mode", str, "key_raw",
                  "laketail: key_raw keeps the raw key only; key_schema_id_prefix also writes key_struct, "
                  "each key decoded by the <topic>-key schema its wire-format prefix names; key_schema_latest "
                  "decodes each key, unframed, by the latest <topic>-key schema (the key's mirror of "
                  "laketail.table.mode).",
                  choices=("key_raw", "key_schema_id_prefix", "key_schema_latest")),
    ]
}


@dataclass(frozen=True)
class TopicConfig:
    """The effective configuration of one topic (defaults filled in)."""

    cleanup_policy: str = "delete"
    retention_ms: int = 604_800_000
    retention_bytes: int = -1
    segment_bytes: int = 1_073_741_824
    segment_ms: int = 604_800_000
    flush_messages: int = LONG_MAX
    flush_ms: int = LONG_MAX
    max_message_bytes: int = 1_048_588
    message_timestamp_type: str = "CreateTime"
    min_insync_replicas: int = 1
    unclean_leader_election_enable: bool = False
    delete_retention_ms: int = 86_400_000
    min_compaction_lag_ms: int = 0
    local_retention_ms: int = 3_600_000
    local_retention_bytes: int = -2
    table_flush_interval_ms: int = 1000
    table_flush_bytes: int = 67_108_864
    confluent_value_schema_validation: bool = False
    confluent_key_schema_validation: bool = False
    laketail_table_mode: str = "key_value"
    laketail_table_key_mode: str = "key_raw"

    @classmethod
    def from_kafka(
        cls, overrides: Mapping[str, Any], defaults: Mapping[str, Any] | None = None
    ) -> "TopicConfig":
        """Build from Kafka keys; ``defaults`` are broker-level topic defaults."""
        values: dict[str, Any] = {}
        for source in (defaults or {}, overrides):
            for name, raw in source.items():
                key = TOPIC_CONFIGS.get(name)
                if key is None:
                    raise InvalidConfig(f"unknown topic config '{name}'")
                values[key.field_name] = key.parse(raw)
        return cls(**values)

    def to_kafka(self) -> dict[str, str]:
        """Every key as Kafka's string form (booleans lower case)."""
        out = {}
        for key in TOPIC_CONFIGS.values():
            value = getattr(self, key.field_name)
            out[key.name] = str(value).lower() if isinstance(value, bool) else str(value)
        return out


def validate_topic_overrides(overrides: Mapping[str, Any]) -> dict[str, str]:
    """Check Kafka-keyed overrides; return them normalised to strings."""
    out = {}
    for name, raw in overrides.items():
        key = TOPIC_CONFIGS.get(name)
        if key is None:
            raise InvalidConfig(f"unknown topic config '{name}'")
        value = key.parse(raw)
        out[name] = str(value).lower() if isinstance(value, bool) else str(value)
    return out


@dataclass(frozen=True)
class BrokerSettings:
    """One broker process's settings (Kafka's ``server.properties`` in spirit).

    ``data`` is the shared data root (tables, catalog): a local folder or an object
    store URI (``s3://bucket/prefix``); ``log_dir`` is this broker's local hot-segment
    directory (``log.dirs``); defaults to ``<data>/logs/broker-<id>``, and to
    ``./laketail-logs/broker-<id>`` (under the working directory) when the root is remote.
    """

    data: str = "./laketail-data"
    log_dir: str | None = None
    broker_id: int = 0
    host: str = "127.0.0.1"
    port: int = 8082
    advertised_url: str | None = None
    auto_create_topics_enable: bool = True
    num_partitions: int = 1
    default_replication_factor: int = 1
    message_max_bytes: int = 1_048_588
    socket_request_max_bytes: int = 104_857_600
    fetch_max_wait_ms: int = 500
    request_timeout_ms: int = 30_000
    tier_enabled: bool = True
    tier_process: bool = True  # tier passes run in a child process of the broker (laketail.storage.tier_child)
    group_min_session_timeout_ms: int = 6_000
    group_max_session_timeout_ms: int = 1_800_000
    group_initial_rebalance_delay_ms: int = 3_000
    offsets_topic_num_partitions: int = 50
    offsets_retention_minutes: int = 10_080
    offsets_retention_check_interval_ms: int = 600_000
    log_cleaner_backoff_ms: int = 15_000
    transaction_state_log_num_partitions: int = 50
    transaction_max_timeout_ms: int = 900_000
    transaction_abort_timed_out_transaction_cleanup_interval_ms: int = 10_000
    producer_id_expiration_ms: int = 86_400_000
    consumer_instance_timeout_ms: int = 300_000
    # Replication (Kafka's names and defaults).
    broker_session_timeout_ms: int = 9_000
    broker_heartbeat_interval_ms: int = 2_000
    replica_lag_time_max_ms: int = 30_000
    replica_fetch_wait_max_ms: int = 500
    replica_fetch_max_bytes: int = 1_048_576
    offsets_topic_replication_factor: int = 3
    transaction_state_log_replication_factor: int = 3
    maintenance_enabled: bool = True
    maintenance_interval_ms: int = 300_000
    fetch_cache_bytes: int = 134_217_728
    # Request processes of this broker (laketail.request_processes): 1 serves every
    # partition from this process; N > 1 runs N processes, each leading its own share;
    # 0 (not set): `laketail serve` runs one per usable core (request_processes.decide).
    request_processes: int = 0
    #: set by ``request_processes.process_settings``, not a key: every request process's
    #: hot log directory, by broker id (a process reads its siblings' partitions there)
    request_process_log_dirs: dict[int, str] = field(default_factory=dict)
    # Slow clients and resource bounds (laketail.api.connections; partition limits).
    max_connections: int = 1000
    connections_max_idle_ms: int = 30_000
    request_header_timeout_ms: int = 10_000
    request_body_timeout_ms: int = 30_000
    # Before authentication (laketail.api.connections, laketail.api.authentication):
    # Kafka's per-address quota and failed-login delay (their keys and defaults), and the
    # size of a request's head (Jetty's and Confluent's REST Proxy's 8 KiB).
    max_connections_per_ip: int = 2_147_483_647
    max_connections_per_ip_overrides: str = ""  # "10.0.0.7:500,[::1]:50"
    connection_failed_authentication_delay_ms: int = 100
    request_line_max_bytes: int = 8192
    request_header_max_bytes: int = 8192
    max_partitions_per_topic: int = 1000
    max_partitions: int = 10_000
    # Authorization (Kafka's keys; laketail.security.authorizer). Off while
    # authorizer.class.name is empty: every request is allowed, as before ACLs existed.
    authorizer_class_name: str = ""
    super_users: str = ""  # "User:admin;User:broker"
    allow_everyone_if_no_acl_found: bool = False
    acl_refresh_ms: int = 500  # how often a broker looks for ACL changes made through another broker
    # Listeners, TLS and authentication (laketail.security.listeners; Kafka's names). With
    # ``listeners`` empty the broker has one PLAINTEXT listener on host:port serving
    # everything, as before; see docs/security.md.
    listeners: str = ""
    advertised_listeners: str = ""
    listener_security_protocol_map: str = ""
    inter_broker_listener_name: str = ""
    kafka_listener_names: str = "KAFKA"  # listeners speaking Kafka's protocol (laketail.kafka)
    # Kafka's connections.max.idle.ms and its default (10 min) for the Kafka listeners, whose
    # clients keep connections open between requests; connections.max.idle.ms above is HTTP's.
    kafka_connections_max_idle_ms: int = 600_000
    connections_max_reauth_ms: int = 0  # Kafka's: SASL session lifetime on Kafka listeners (KIP-368)
    max_incremental_fetch_session_cache_slots: int = 1000  # Kafka's: fetch sessions per broker (KIP-227)
    inter_broker_secret: str = ""
    sasl_enabled_mechanisms: str = "SCRAM-SHA-256,SCRAM-SHA-512,OAUTHBEARER"
    sasl_credential_cache_ms: int = 30_000
    sasl_oauthbearer_jwks_endpoint_url: str = ""
    sasl_oauthbearer_sub_claim_name: str = "sub"
    sasl_oauthbearer_expected_audience: str = ""
    sasl_oauthbearer_expected_issuer: str = ""
    ssl_keystore_certificate_chain: str = ""
    ssl_keystore_key: str = ""
    ssl_truststore_location: str = ""
    ssl_client_auth: str = "none"
    ssl_principal_mapping_rules: str = "DEFAULT"
    topic_defaults: dict[str, Any] = field(default_factory=dict)

    @property
    def hot_log_dir(self) -> Path:
        if self.log_dir:
            return Path(self.log_dir)
        if "://" in self.data and not self.data.startswith("file://"):  # an object store: hot logs stay local
            return Path("laketail-logs") / f"broker-{self.broker_id}"
        return Path(self.data) / "logs" / f"broker-{self.broker_id}"

    @property
    def url(self) -> str:
        """The URL clients reach this broker at (its client listener's, advertised)."""
        if self.advertised_url:
            return self.advertised_url
        if self.listeners:
            from laketail.security.listeners import listener_plan

            return listener_plan(self).client_url
        return f"http://{self.host}:{self.port}"

    @property
    def inter_broker_url(self) -> str:
        """The URL other brokers reach this one at (its inter-broker listener's)."""
        if self.listeners:
            from laketail.security.listeners import listener_plan

            return listener_plan(self).inter_broker_url
        return self.url

    def topic_config(self, overrides: Mapping[str, Any]) -> TopicConfig:
        defaults = dict(self.topic_defaults)
        defaults.setdefault("max.message.bytes", self.message_max_bytes)
        return TopicConfig.from_kafka(overrides, defaults)


_BROKER_KEYS = {
    "data": "data",
    "log.dirs": "log_dir",
    "log.dir": "log_dir",
    "broker.id": "broker_id",
    "host": "host",
    "port": "port",
    "advertised.url": "advertised_url",
    "auto.create.topics.enable": "auto_create_topics_enable",
    "num.partitions": "num_partitions",
    "default.replication.factor": "default_replication_factor",
    "message.max.bytes": "message_max_bytes",
    "socket.request.max.bytes": "socket_request_max_bytes",
    "fetch.max.wait.ms": "fetch_max_wait_ms",
    "request.timeout.ms": "request_timeout_ms",
    "tier.enable": "tier_enabled",
    "laketail.tierer.process": "tier_process",
    "group.min.session.timeout.ms": "group_min_session_timeout_ms",
    "group.max.session.timeout.ms": "group_max_session_timeout_ms",
    "group.initial.rebalance.delay.ms": "group_initial_rebalance_delay_ms",
    "offsets.topic.num.partitions": "offsets_topic_num_partitions",
    "offsets.retention.minutes": "offsets_retention_minutes",
    "offsets.retention.check.interval.ms": "offsets_retention_check_interval_ms",
    "log.cleaner.backoff.ms": "log_cleaner_backoff_ms",
    "transaction.state.log.num.partitions": "transaction_state_log_num_partitions",
    "transaction.max.timeout.ms": "transaction_max_timeout_ms",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms":
        "transaction_abort_timed_out_transaction_cleanup_interval_ms",
    "producer.id.expiration.ms": "producer_id_expiration_ms",
    "consumer.instance.timeout.ms": "consumer_instance_timeout_ms",
    "broker.session.timeout.ms": "broker_session_timeout_ms",
    "broker.heartbeat.interval.ms": "broker_heartbeat_interval_ms",
    "replica.lag.time.max.ms": "replica_lag_time_max_ms",
    "replica.fetch.wait.max.ms": "replica_fetch_wait_max_ms",
    "replica.fetch.max.bytes": "replica_fetch_max_bytes",
    "offsets.topic.replication.factor": "offsets_topic_replication_factor",
    "transaction.state.log.replication.factor": "transaction_state_log_replication_factor",
    # laketail: the broker runs the maintenance application of user topics (retention and compaction,
    # one long-lived spark-submit child in local mode, looking at the tables every interval); false
    # leaves them to `laketail jobs run` or another scheduler.
    "laketail.maintenance.enable": "maintenance_enabled",
    "laketail.maintenance.interval.ms": "maintenance_interval_ms",
    "laketail.fetch.cache.bytes": "fetch_cache_bytes",
    "laketail.request.processes": "request_processes",
    "max.connections": "max_connections",
    "connections.max.idle.ms": "connections_max_idle_ms",
    "laketail.request.header.timeout.ms": "request_header_timeout_ms",
    "laketail.request.body.timeout.ms": "request_body_timeout_ms",
    "max.connections.per.ip": "max_connections_per_ip",
    "max.connections.per.ip.overrides": "max_connections_per_ip_overrides",
    "connection.failed.authentication.delay.ms": "connection_failed_authentication_delay_ms",
    # laketail: a request line longer than this is 414, a head (line and header fields) longer is 431
    "laketail.request.line.max.bytes": "request_line_max_bytes",
    "laketail.request.header.max.bytes": "request_header_max_bytes",
    "laketail.topic.max.partitions": "max_partitions_per_topic",
    "laketail.max.partitions": "max_partitions",
    "authorizer.class.name": "authorizer_class_name",
    "super.users": "super_users",
    "allow.everyone.if.no.acl.found": "allow_everyone_if_no_acl_found",
    "laketail.acl.refresh.ms": "acl_refresh_ms",
    "listeners": "listeners",
    "advertised.listeners": "advertised_listeners",
    "listener.security.protocol.map": "listener_security_protocol_map",
    "inter.broker.listener.name": "inter_broker_listener_name",
    "laketail.kafka.listener.names": "kafka_listener_names",
    "laketail.kafka.connections.max.idle.ms": "kafka_connections_max_idle_ms",
    "connections.max.reauth.ms": "connections_max_reauth_ms",
    "max.incremental.fetch.session.cache.slots": "max_incremental_fetch_session_cache_slots",
    # laketail: the secret every broker shows on the inter-broker listener (a cluster secret,
    # laketail's stand-in for Kafka's inter-broker SASL credentials); keep it in the environment.
    "laketail.inter.broker.secret": "inter_broker_secret",
    "sasl.enabled.mechanisms": "sasl_enabled_mechanisms",
    "laketail.sasl.credential.cache.ms": "sasl_credential_cache_ms",
    "sasl.oauthbearer.jwks.endpoint.url": "sasl_oauthbearer_jwks_endpoint_url",
    "sasl.oauthbearer.sub.claim.name": "sasl_oauthbearer_sub_claim_name",
    "sasl.oauthbearer.expected.audience": "sasl_oauthbearer_expected_audience",
    "sasl.oauthbearer.expected.issuer": "sasl_oauthbearer_expected_issuer",
    "ssl.keystore.certificate.chain": "ssl_keystore_certificate_chain",
    "ssl.keystore.key": "ssl_keystore_key",
    "ssl.truststore.location": "ssl_truststore_location",
    "ssl.client.auth": "ssl_client_auth",
    "ssl.principal.mapping.rules": "ssl_principal_mapping_rules",
}
#: Broker settings never shown (Kafka's sensitive configs: value null, is_sensitive true).
SENSITIVE_BROKER_KEYS = frozenset({"laketail.inter.broker.secret"})


def load_settings(
    path: str | Path | None = None,
    env: Mapping[str, str] | None = None,
    **flags: Any,
) -> BrokerSettings:
    """Settings from a TOML file, then ``LAKETAIL_*`` variables, then flags.

    The file has a ``[broker]`` table with Kafka's broker keys and a
    ``[topic-defaults]`` table with topic keys. ``LAKETAIL_DATA``, ``LAKETAIL_BROKER_ID``,
    ``LAKETAIL_LOG_DIRS``, ``LAKETAIL_HOST``, ``LAKETAIL_PORT`` follow the key names
    upper-cased with dots as underscores (a leading ``laketail.`` dropped:
    ``LAKETAIL_MAINTENANCE_ENABLE``). Flags whose value is ``None`` are ignored.
    """
    env = os.environ if env is None else env
    values: dict[str, Any] = {}
    topic_defaults: dict[str, Any] = {}
    if path is not None and Path(path).exists():
        with open(path, "rb") as fh:
            doc = tomllib.load(fh)
        for key, raw in doc.get("broker", {}).items():
            if key not in _BROKER_KEYS:
                raise InvalidConfig(f"unknown broker setting '{key}' in {path}")
            values[_BROKER_KEYS[key]] = raw
        topic_defaults = dict(doc.get("topic-defaults", {}))
        validate_topic_overrides(topic_defaults)
    for key, attr in _BROKER_KEYS.items():
        var = "LAKETAIL_" + key.removeprefix("laketail.").upper().replace(".", "_")
        if var in env:
            values[attr] = env[var]
    for attr, raw in flags.items():
        if raw is not None:
            values[attr] = raw
    types = {f.name: f.type for f in dataclasses.fields(BrokerSettings)}
    for attr, raw in list(values.items()):
        kind = types[attr]
        try:
            if kind == "int":
                values[attr] = int(raw)
            elif kind == "bool":
                values[attr] = raw if isinstance(raw, bool) else str(raw).lower() == "true"
            elif raw is not None:
                values[attr] = str(raw)
        except ValueError as exc:
            raise InvalidConfig(f"broker setting {attr}={raw!r} is not valid") from exc
    return BrokerSettings(topic_defaults=topic_defaults, **values)
