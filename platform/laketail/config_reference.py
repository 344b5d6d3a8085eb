"""The configuration reference, ``docs/configuration.md``, generated from the settings table.

Topic keys come from :data:`laketail.config.TOPIC_CONFIGS` (type, default, doc, choices);
broker keys from the Kafka-name table in :mod:`laketail.config` and the
:class:`~laketail.config.BrokerSettings` field each one sets (type and default), with the
description below. ``tests/test_docs.py`` regenerates the page and fails when the
committed file differs, and fails when a broker key has no description here (or a
description names a key that no longer exists), so the reference cannot drift.

Regenerate after changing a key::

    python -m laketail.config_reference            # writes docs/configuration.md
    python -m laketail.config_reference --check    # exit 1 when the file is stale
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path
from typing import Any

from laketail.config import _BROKER_KEYS, LONG_MAX, SENSITIVE_BROKER_KEYS, TOPIC_CONFIGS, BrokerSettings

#: What each broker key does. Kafka's keys keep Kafka's meaning; a key laketail adds says
#: so with ``laketail.`` in its name (or here).
BROKER_KEY_DOCS: dict[str, str] = {
    "data": "The data root every broker of a cluster shares: topic tables and the `_system` "
            "catalog. A folder, or an object-store URI delta-rs understands (`s3://`, `gs://`, "
            "`abfss://`).",
    "log.dirs": "This broker's local directory for hot segments; empty means "
                "`<data>/logs/broker-<broker.id>`.",
    "log.dir": "Kafka's older spelling of `log.dirs`; sets the same value.",
    "broker.id": "This broker's id in the cluster, below 1,000,000 (from there the ids are request processes' "
                 "member ids).",
    "host": "Interface of the default listener (used when `listeners` is empty).",
    "port": "Port of the default listener (used when `listeners` is empty).",
    "advertised.url": "URL clients and other brokers use for this one; empty means "
                      "`http://<host>:<port>`.",
    "auto.create.topics.enable": "Create a topic on its first produce, or on a v2 consumer "
                                 "instance's subscription by name; never for an invalid or "
                                 "internal (`__`) name. False answers 404.",
    "num.partitions": "Partitions of a topic created without a count (auto-creation too).",
    "default.replication.factor": "Replication factor of a topic created without one.",
    "message.max.bytes": "Largest record the broker accepts; a topic's `max.message.bytes` "
                         "overrides it.",
    "socket.request.max.bytes": "Largest request body; an Arrow IPC body is also bounded by the "
                                "sizes it declares once decompressed.",
    "fetch.max.wait.ms": "Longest a fetch long-polls at the end of the log: caps the fetch "
                         "endpoints' `timeout`.",
    "request.timeout.ms": "Longest a produce with `acks=all` waits for the in-sync replicas; "
                          "also the consumer instances' default request timeout.",
    "tier.enable": "Move records from the hot logs into the topics' Delta tables. Off only in "
                   "tests of the hot tier alone.",
    "laketail.tierer.process": "Run tier passes in a child process of the broker "
                               "(`laketail.storage.tier_child`); false runs them in a worker "
                               "thread of the broker.",
    "group.min.session.timeout.ms": "Smallest session timeout a group member may ask for.",
    "group.max.session.timeout.ms": "Largest session timeout a group member may ask for.",
    "group.initial.rebalance.delay.ms": "How long the first rebalance of an empty group waits "
                                        "for more members to join.",
    "offsets.topic.num.partitions": "Partitions of `__consumer_offsets`.",
    "offsets.retention.minutes": "Committed offsets of a group with no members are expired "
                                 "after this long.",
    "offsets.retention.check.interval.ms": "How often expired committed offsets are looked for.",
    "log.cleaner.backoff.ms": "How often the internal-topic cleaner runs (producer-id expiry, "
                              "compaction of the coordinators' topics).",
    "transaction.state.log.num.partitions": "Partitions of `__transaction_state`.",
    "transaction.max.timeout.ms": "Largest `transaction.timeout.ms` a producer may ask for.",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms":
        "How often transactions open past their timeout are looked for and aborted.",
    "producer.id.expiration.ms": "A producer id's state is dropped this long after its last "
                                 "write.",
    "consumer.instance.timeout.ms": "A v2 consumer instance unused for this long is deleted.",
    "broker.session.timeout.ms": "The controller declares a broker dead after this long "
                                 "without a heartbeat.",
    "broker.heartbeat.interval.ms": "How often a broker heartbeats into the catalog.",
    "replica.lag.time.max.ms": "A follower not caught up for this long leaves the ISR.",
    "replica.fetch.wait.max.ms": "Longest a follower's fetch waits at the leader's log end.",
    "replica.fetch.max.bytes": "Bytes a follower asks for per partition per fetch.",
    "offsets.topic.replication.factor": "Replicas of `__consumer_offsets` (capped at the "
                                        "brokers alive when it is created).",
    "transaction.state.log.replication.factor": "Replicas of `__transaction_state` (capped at "
                                                "the brokers alive when it is created).",
    "laketail.maintenance.enable": "The controller runs retention, file compaction and key "
                                   "compaction of user topics as one long-lived Spark "
                                   "application; false leaves them to `laketail jobs run`.",
    "laketail.maintenance.interval.ms": "Trigger interval of the maintenance application.",
    "laketail.fetch.cache.bytes": "Memory for decoded hot-tier frames and table row groups that "
                                  "the next fetches slice; 0 turns the cache off.",
    "laketail.request.processes": "Request processes on the same port (`SO_REUSEPORT`), each "
                                  "leading its share of the partitions "
                                  "(`laketail serve --processes N`); 0: one per usable core "
                                  "(CPU affinity and the cgroup's CPU quota), or one with "
                                  "port 0, or an advertised URL, "
                                  "advertised listeners or inter-broker listener (brokers on "
                                  "other hosts).",
    "max.connections": "Past this many open connections a new one is closed at once.",
    "connections.max.idle.ms": "A kept-alive connection idle this long between requests is "
                               "closed (30 s rather than Kafka's 10 min: HTTP clients open "
                               "connections freely).",
    "laketail.request.header.timeout.ms": "A request's line and headers must arrive within "
                                          "this long.",
    "laketail.request.body.timeout.ms": "A request body may not go this long without a byte "
                                        "(a streaming v3 produce included).",
    "max.connections.per.ip": "Connections one client address may hold (Kafka's default: "
                              "unlimited).",
    "max.connections.per.ip.overrides": "Per-address quotas, `10.0.0.7:500,[::1]:50`.",
    "connection.failed.authentication.delay.ms": "A failed authentication is answered only "
                                                 "after this delay.",
    "laketail.request.line.max.bytes": "A request line longer than this is answered 414 before "
                                       "the rest is read.",
    "laketail.request.header.max.bytes": "A request head (line and header fields) longer than "
                                         "this is answered 431 before the rest is read.",
    "laketail.topic.max.partitions": "Partitions one topic may have; more is "
                                     "INVALID_PARTITIONS.",
    "laketail.max.partitions": "Partitions all client topics together may have (internal "
                               "topics not counted); more is INVALID_PARTITIONS.",
    "authorizer.class.name": "The authorizer; empty turns authorization off (every request "
                             "allowed). `laketail.security.authorizer.AclAuthorizer`, or "
                             "Kafka's AclAuthorizer / StandardAuthorizer names.",
    "super.users": "Principals allowed everything, `User:admin;User:broker`.",
    "allow.everyone.if.no.acl.found": "Allow an action on a resource no ACL names.",
    "laketail.acl.refresh.ms": "How often a broker looks for ACL changes made through another "
                               "broker.",
    "listeners": "One server per entry, `NAME://host:port,...`; empty means one PLAINTEXT "
                 "listener on `host:port`.",
    "advertised.listeners": "What other brokers and clients are told, per listener; empty "
                            "means the bound addresses.",
    "listener.security.protocol.map": "Each listener's protocol: `PLAINTEXT`, `SSL`, "
                                      "`SASL_PLAINTEXT` or `SASL_SSL`.",
    "inter.broker.listener.name": "The listener brokers use for each other; `/internal` is "
                                  "served there only.",
    "laketail.kafka.listener.names": "Listeners that speak Kafka's binary protocol rather "
                                     "than HTTP.",
    "laketail.kafka.connections.max.idle.ms": "How long a Kafka-protocol connection may stay idle "
                                              "before the broker closes it (Kafka's "
                                              "`connections.max.idle.ms` default, 10 minutes; the "
                                              "HTTP listeners keep `connections.max.idle.ms`).",
    "connections.max.reauth.ms": "On SASL Kafka listeners, the session lifetime given to "
                                 "clients (KIP-368): a client re-authenticates on the same "
                                 "connection before it ends, or its next request closes the "
                                 "connection. An OAUTHBEARER session ends at its token's "
                                 "expiry if that comes first. 0: only OAUTHBEARER sessions "
                                 "end (at their token's expiry), as in Kafka.",
    "max.incremental.fetch.session.cache.slots": "Incremental fetch sessions (KIP-227) a broker "
                                                 "keeps for Kafka consumers; past it a new session "
                                                 "evicts a stale or smaller one, or the fetch goes "
                                                 "without a session.",
    "laketail.inter.broker.secret": "The cluster secret every peer shows on the inter-broker "
                                    "listener (laketail's stand-in for Kafka's inter-broker "
                                    "credentials). Keep it in the environment; never shown.",
    "sasl.enabled.mechanisms": "Mechanisms a SASL listener accepts.",
    "laketail.sasl.credential.cache.ms": "How long a verified SCRAM password is remembered.",
    "sasl.oauthbearer.jwks.endpoint.url": "A local JWKS document or PEM public key (path or "
                                          "`file://`) that signs bearer tokens.",
    "sasl.oauthbearer.sub.claim.name": "The JWT claim naming the principal.",
    "sasl.oauthbearer.expected.audience": "When set, a token's audience must be this.",
    "sasl.oauthbearer.expected.issuer": "When set, a token's issuer must be this.",
    "ssl.keystore.certificate.chain": "PEM file: the broker's certificate chain (TLS "
                                      "listeners).",
    "ssl.keystore.key": "PEM file: the broker's private key.",
    "ssl.truststore.location": "PEM file: the CA of client certificates and of peers' "
                               "certificates.",
    "ssl.client.auth": "Client certificates: `none`, `requested` or `required`.",
    "ssl.principal.mapping.rules": "Certificate subject to principal, as Kafka's rules "
                                   "(`RULE:^CN=([^,]+),.*$/$1/L,DEFAULT`).",
}

HEADER = """\
# Configuration reference

<!-- Generated by `python -m laketail.config_reference` from laketail/config.py; do not
edit by hand. tests/test_docs.py fails when this file differs from what it generates. -->

Broker settings come from `conf/laketail.toml`'s `[broker]` table, then `LAKETAIL_*`
environment variables, then `laketail serve` flags (`laketail serve --help`), each
overriding the one before. Topic configs are set when a topic is created or altered
(`laketail topics create --config KEY=VALUE`, v3's configs API, Kafka's admin client);
the `[topic-defaults]` table of `conf/laketail.toml` changes a default for every topic.
Keys are Kafka's wherever Kafka has them, with Kafka's defaults unless the description
says why not. Keys in the TOML file are quoted (`"retention.ms" = 86400000`), since TOML
reads a bare dotted key as nested tables.
"""


def _value(value: Any) -> str:
    if value is None or value == "":
        return "(empty)"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if value == LONG_MAX:
        return "`9223372036854775807` (Long.MAX)"
    return f"`{value}`"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def env_var(key: str) -> str:
    """The ``LAKETAIL_*`` variable of a broker key, as ``load_settings`` reads it."""
    return "LAKETAIL_" + key.removeprefix("laketail.").upper().replace(".", "_")


def missing_docs() -> tuple[set[str], set[str]]:
    """Broker keys without a description, and descriptions of keys that do not exist."""
    return set(_BROKER_KEYS) - set(BROKER_KEY_DOCS), set(BROKER_KEY_DOCS) - set(_BROKER_KEYS)


def render() -> str:
    """The whole of ``docs/configuration.md``."""
    undocumented, unknown = missing_docs()
    if undocumented or unknown:
        raise KeyError(f"broker keys without a description: {sorted(undocumented)}; "
                       f"descriptions of unknown keys: {sorted(unknown)}")
    lines = [HEADER, "## Topic configs", "",
             f"{len(TOPIC_CONFIGS)} keys, validated when set (a bad value or an unknown key is "
             "`INVALID_CONFIG`, and nothing changes).", "",
             "| key | type | default | description |", "|---|---|---|---|"]
    for key in sorted(TOPIC_CONFIGS.values(), key=lambda k: k.name):
        doc = key.doc.rstrip(".") + "."
        if key.choices:
            doc += " One of " + ", ".join(f"`{c}`" for c in key.choices) + "."
        lines.append(f"| `{key.name}` | {key.type.__name__} | {_value(key.default)} | {_cell(doc)} |")
    fields = {f.name: f for f in dataclasses.fields(BrokerSettings)}
    lines += ["", "## Broker settings", "",
              f"{len(_BROKER_KEYS)} keys. A key marked *sensitive* is never shown by the "
              "describe-configs APIs.", "",
              "| key | environment variable | type | default | description |",
              "|---|---|---|---|---|"]
    for name in sorted(_BROKER_KEYS):
        f = fields[_BROKER_KEYS[name]]
        kind = str(f.type).replace(" | None", "")
        doc = BROKER_KEY_DOCS[name] + (" *Sensitive.*" if name in SENSITIVE_BROKER_KEYS else "")
        lines.append(f"| `{name}` | `{env_var(name)}` | {kind} | {_value(f.default)} | {_cell(doc)} |")
    return "\n".join(lines) + "\n"


def default_path() -> Path:
    """``docs/configuration.md`` of the source tree this module is in."""
    return Path(__file__).resolve().parents[2] / "docs" / "configuration.md"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, default=default_path())
    parser.add_argument("--check", action="store_true", help="exit 1 when the file is stale")
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        current = args.output.read_text(encoding="utf-8") if args.output.exists() else ""
        if current != text:
            print(f"{args.output} is stale: run python -m laketail.config_reference", file=sys.stderr)
            return 1
        return 0
    args.output.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
