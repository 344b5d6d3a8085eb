"""Listeners: where a broker listens, with which security protocol, for whom.

Kafka's settings, parsed once at the edge (pure functions, no IO):

* ``listeners`` -- ``NAME://host:port`` entries, comma-separated
  (``CLIENT://0.0.0.0:8082,BROKER://0.0.0.0:9093``). Empty: one ``PLAINTEXT`` listener
  on ``host:port``, which serves clients and brokers alike (the embedded default).
* ``listener.security.protocol.map`` -- ``NAME:PROTOCOL`` entries; a listener named
  like a protocol (``SASL_SSL://...``) needs no entry. Protocols are Kafka's:
  ``PLAINTEXT``, ``SSL`` (TLS; a client certificate, when given, names the principal),
  ``SASL_PLAINTEXT`` and ``SASL_SSL`` (every request carries credentials: HTTP Basic
  checked against SCRAM credentials, or an OAuth bearer token).
* ``advertised.listeners`` -- the same form, the addresses others use (defaults to the
  listener's own, ``https`` for the TLS protocols).
* ``laketail.kafka.listener.names`` -- the listeners that speak Kafka's binary protocol
  instead of HTTP (default ``KAFKA``: ``KAFKA://127.0.0.1:9092`` with
  ``KAFKA:PLAINTEXT`` in the protocol map). They are served by :mod:`laketail.kafka`
  beside the HTTP listeners and are left out of everything below (the inter-broker
  listener, sharing). All four protocols are served on them: TLS from the same
  ``ssl.*`` settings, SASL as Kafka's SaslHandshake/SaslAuthenticate exchange
  (:mod:`laketail.kafka.sasl`).
* ``inter.broker.listener.name`` -- the listener brokers talk to each other on; needed
  when there are several HTTP listeners. ``/internal`` is served there only, and there every request
  must show the cluster secret (``laketail.inter.broker.secret``): a client listener
  does not serve ``/internal`` at all.

Invariants of a :class:`ListenerPlan`: names are unique, exactly one listener is the
inter-broker one, and a plan with a separate inter-broker listener has a secret.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from laketail.errors import InvalidConfig

if TYPE_CHECKING:
    from laketail.config import BrokerSettings

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
#: Kafka's security protocols that run over TLS, and those that authenticate with SASL
#: (here HTTP Basic or Bearer); brokers' listeners and clients read them alike.
TLS_PROTOCOLS = frozenset({"SSL", "SASL_SSL"})
SASL_PROTOCOLS = frozenset({"SASL_PLAINTEXT", "SASL_SSL"})
_ENTRY = re.compile(r"([A-Za-z0-9_]+)://(\[[0-9a-fA-F:.]+\]|[^:/\s]*):(\d{1,5})")


@dataclass(frozen=True)
class Listener:
    """One listener: a name, an address, a security protocol, and its role."""

    name: str
    host: str
    port: int
    protocol: str
    inter_broker: bool
    advertised_url: str
    #: Serves clients too: the one listener of a single-listener broker.
    shared: bool = False

    @property
    def tls(self) -> bool:
        return self.protocol in TLS_PROTOCOLS

    @property
    def sasl(self) -> bool:
        return self.protocol in SASL_PROTOCOLS

    @property
    def authenticates(self) -> bool:
        """Whether every request on it proves who sent it (credentials, or the cluster
        secret on a separate inter-broker listener)."""
        return self.sasl or (self.inter_broker and not self.shared)


@dataclass(frozen=True)
class ListenerPlan:
    listeners: tuple[Listener, ...]
    #: True when one listener serves clients and brokers (no ``listeners`` setting, or one entry).
    shared: bool
    #: Listeners speaking Kafka's protocol (``laketail.kafka.listener.names``), served by
    #: :mod:`laketail.kafka`; never inter-broker, never counted in ``listeners``.
    kafka: tuple[Listener, ...] = ()

    @property
    def inter_broker(self) -> Listener:
        return next(lst for lst in self.listeners if lst.inter_broker)

    @property
    def client_url(self) -> str:
        clients = [lst for lst in self.listeners if not lst.inter_broker] or list(self.listeners)
        return clients[0].advertised_url

    @property
    def inter_broker_url(self) -> str:
        return self.inter_broker.advertised_url


def parse_entries(text: str, what: str) -> list[tuple[str, str, int]]:
    """``NAME://host:port,...`` -> ``[(NAME, host, port)]``, strictly."""
    out = []
    for raw in [p.strip() for p in text.split(",") if p.strip()]:
        found = _ENTRY.fullmatch(raw)
        if found is None:
            raise InvalidConfig(f"{what}: '{raw}' is not NAME://host:port")
        name, host, port = found.group(1).upper(), found.group(2).strip("[]"), int(found.group(3))
        if port > 65535:
            raise InvalidConfig(f"{what}: port {port} is out of range")
        out.append((name, host, port))
    return out


def parse_protocol_map(text: str) -> dict[str, str]:
    mapping = {p: p for p in PROTOCOLS}
    for raw in [p.strip() for p in text.split(",") if p.strip()]:
        name, sep, protocol = raw.partition(":")
        protocol = protocol.strip().upper()
        if not sep or not name.strip() or protocol not in PROTOCOLS:
            raise InvalidConfig(
                f"listener.security.protocol.map: '{raw}' is not NAME:PROTOCOL with PROTOCOL one of "
                + ", ".join(PROTOCOLS)
            )
        mapping[name.strip().upper()] = protocol
    return mapping


def listener_plan(settings: "BrokerSettings") -> ListenerPlan:
    """The broker's listeners from its settings; :class:`InvalidConfig` when they do not
    make a whole plan."""
    url = settings.advertised_url or f"http://{settings.host}:{settings.port}"
    default = (Listener("PLAINTEXT", settings.host, settings.port, "PLAINTEXT", True, url, True),)
    if not settings.listeners:
        return ListenerPlan(default, True)
    entries = parse_entries(settings.listeners, "listeners")
    if not entries:
        raise InvalidConfig("listeners: no listener given")
    names = [name for name, _, _ in entries]
    if len(set(names)) != len(names):
        raise InvalidConfig(f"listeners: each name once ({', '.join(names)})")
    protocols = parse_protocol_map(settings.listener_security_protocol_map)
    advertised = {name: (host, port) for name, host, port in parse_entries(settings.advertised_listeners,
                                                                            "advertised.listeners")}
    unknown = set(advertised) - set(names)
    if unknown:
        raise InvalidConfig(f"advertised.listeners: no listener named {', '.join(sorted(unknown))}")
    kafka_names = {n.strip().upper() for n in settings.kafka_listener_names.split(",") if n.strip()}
    kafka = _kafka_listeners([e for e in entries if e[0] in kafka_names], protocols, advertised, settings)
    entries = [e for e in entries if e[0] not in kafka_names]
    names = [name for name, _, _ in entries]
    if not entries:  # only Kafka listeners given: HTTP stays on host:port
        return ListenerPlan(default, True, kafka)
    inter = settings.inter_broker_listener_name.strip().upper()
    if inter in kafka_names:
        raise InvalidConfig(f"inter.broker.listener.name={inter} speaks Kafka's protocol; brokers talk HTTP")
    if not inter:
        if len(entries) > 1:
            raise InvalidConfig("inter.broker.listener.name is needed when there are several listeners")
        inter = names[0]
    if inter not in names:
        raise InvalidConfig(f"inter.broker.listener.name={inter} is not one of the listeners ({', '.join(names)})")
    shared = len(entries) == 1
    if not shared and not settings.inter_broker_secret:
        raise InvalidConfig(
            "a separate inter-broker listener authenticates every peer: set laketail.inter.broker.secret "
            "(LAKETAIL_INTER_BROKER_SECRET) on every broker of the cluster"
        )
    out = []
    for name, host, port in entries:
        if name not in protocols:
            raise InvalidConfig(f"listener.security.protocol.map has no protocol for listener {name}")
        protocol = protocols[name]
        keystore = settings.ssl_keystore_certificate_chain and settings.ssl_keystore_key
        if protocol in ("SSL", "SASL_SSL") and not keystore:
            raise InvalidConfig(f"listener {name} is {protocol}: set ssl.keystore.certificate.chain and "
                                "ssl.keystore.key")
        adv_host, adv_port = advertised.get(name, (host, port))
        if adv_host in ("", "0.0.0.0", "::"):
            adv_host = "127.0.0.1" if adv_host != "::" else "::1"
        scheme = "https" if protocol in ("SSL", "SASL_SSL") else "http"
        shown = f"[{adv_host}]" if ":" in adv_host else adv_host
        out.append(Listener(name, host, port, protocol, name == inter, f"{scheme}://{shown}:{adv_port}",
                            shared))
    return ListenerPlan(tuple(out), shared, kafka)


def _kafka_listeners(entries: list[tuple[str, str, int]], protocols: dict[str, str],
                     advertised: dict[str, tuple[str, int]], settings: "BrokerSettings") -> tuple[Listener, ...]:
    """The Kafka-protocol listeners; their ``advertised_url`` is ``kafka://host:port``,
    the address Metadata answers."""
    out = []
    for name, host, port in entries:
        if name not in protocols:
            raise InvalidConfig(f"listener.security.protocol.map has no protocol for listener {name} "
                                f"(for example {name}:PLAINTEXT)")
        protocol = protocols[name]
        if protocol in TLS_PROTOCOLS and not (settings.ssl_keystore_certificate_chain and settings.ssl_keystore_key):
            raise InvalidConfig(f"listener {name} is {protocol}: set ssl.keystore.certificate.chain and "
                                "ssl.keystore.key")
        adv_host, adv_port = advertised.get(name, (host, port))
        if adv_host in ("", "0.0.0.0", "::"):
            adv_host = "127.0.0.1" if adv_host != "::" else "::1"
        shown = f"[{adv_host}]" if ":" in adv_host else adv_host
        out.append(Listener(name, host, port, protocol, False, f"kafka://{shown}:{adv_port}"))
    return tuple(out)


def advertised_endpoints(settings: "BrokerSettings") -> str:
    """The Kafka-protocol listeners' advertised addresses in Kafka's ``NAME://host:port``
    form: what a broker registers so that every broker's Metadata can list it."""
    if not settings.listeners:
        return ""
    kafka = listener_plan(settings).kafka
    return ",".join(f"{lst.name}://{lst.advertised_url.removeprefix('kafka://')}" for lst in kafka)


def is_loopback(host: str) -> bool:
    """Whether ``host`` (a listener's bind address) is reachable from this machine only."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a name, or "" (every interface): assume reachable


def unprotected_exposure(plan: ListenerPlan) -> list[Listener]:
    """The listeners that bind beyond loopback without authenticating anyone: what
    ``laketail serve`` refuses unless told ``--allow-anonymous``. A client certificate
    required by ``ssl.client.auth=required`` would also authenticate; the caller passes
    that in the settings check (see :func:`exposure_problems`)."""
    return [lst for lst in plan.listeners + plan.kafka if not is_loopback(lst.host) and not lst.authenticates]


def exposure_problems(plan: ListenerPlan, ssl_client_auth: str) -> list[str]:
    """Human sentences for every listener ``serve`` must not open without ``--allow-anonymous``."""
    out = []
    for lst in unprotected_exposure(plan):
        if lst.tls and ssl_client_auth == "required":
            continue  # every client shows a certificate the truststore signed
        out.append(f"listener {lst.name} ({lst.protocol}://{lst.host}:{lst.port}) is not on loopback "
                   "and authenticates no one")
    return out
