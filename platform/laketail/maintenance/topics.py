"""Which topics maintenance works on, with their effective configuration.

Two sources, as a job is given them:

* a gateway (``laketail.servers``): the v3 topic list and each topic's configs, the
  values the broker itself enforces (broker-level topic defaults included);
* the data root alone: the catalog table ``_system/topics`` and the topics' overrides
  over Kafka's defaults (plus, optionally, a settings file's ``[topic-defaults]``).

Internal topics (``__consumer_offsets``, ...) are the broker's own business and are
never returned.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence
from urllib.parse import quote

import httpx
from deltalake import DeltaTable

from laketail.catalog import Catalog
from laketail.config import TopicConfig, load_settings
from laketail.errors import LaketailError, UnknownTopicOrPartition, from_body


@dataclass(frozen=True)
class MaintainedTopic:
    name: str
    partitions: int
    config: TopicConfig

    @property
    def compacted(self) -> bool:
        return "compact" in self.config.cleanup_policy

    @property
    def deleted_by_retention(self) -> bool:
        return "delete" in self.config.cleanup_policy


def _select(available: Mapping[str, object], names: Sequence[str] | None) -> list[str]:
    if not names:
        return sorted(available)
    for name in names:
        if name not in available:
            raise UnknownTopicOrPartition.topic(name)
    return list(names)


def topics_from_catalog(
    root: str, names: Sequence[str] | None = None, settings_path: str | Path | None = None
) -> list[MaintainedTopic]:
    if not DeltaTable.is_deltatable(f"{root}/_system/topics"):
        raise UnknownTopicOrPartition(f"{root} holds no laketail catalog (_system/topics)")
    catalog = Catalog(root)
    catalog.open()
    settings = load_settings(settings_path, env={}, data=root)
    infos = {info.name: info for info in catalog.topics() if not info.internal}
    return [
        MaintainedTopic(name, infos[name].partitions, settings.topic_config(infos[name].configs))
        for name in _select(infos, names)
    ]


def _peer_options() -> dict:
    """When the broker's scheduler runs the job it passes the cluster secret and CA
    (``LAKETAIL_INTER_BROKER_SECRET``, ``LAKETAIL_SSL_TRUSTSTORE_LOCATION``) and the URL of
    its inter-broker listener: the job calls it as a peer."""
    import os

    from laketail.security.peers import peer_headers

    out: dict = {}
    if os.environ.get("LAKETAIL_INTER_BROKER_SECRET"):
        out["headers"] = peer_headers(os.environ["LAKETAIL_INTER_BROKER_SECRET"])
    if os.environ.get("LAKETAIL_SSL_TRUSTSTORE_LOCATION"):
        import ssl

        out["verify"] = ssl.create_default_context(cafile=os.environ["LAKETAIL_SSL_TRUSTSTORE_LOCATION"])
    return out


class Gateway:
    """The few v3 calls maintenance makes, against the first server that answers."""

    def __init__(self, servers: str, timeout_s: float = 30.0, security: Mapping[str, str] | None = None) -> None:
        """``security``: the client properties (``security.protocol``, ``sasl.*``,
        ``ssl.*``) of a job run by hand; the broker's own scheduler passes none and
        the job calls as a peer (:func:`_peer_options`)."""
        self.urls = [u.strip().rstrip("/") for u in servers.split(",") if u.strip()]
        if not self.urls:
            raise LaketailError("laketail.servers is empty")
        options = _peer_options()
        if security:
            from laketail.client.security import client_security

            options.update(client_security(security).httpx_options())
        self.http = httpx.Client(timeout=timeout_s, **options)
        self._cluster: str | None = None

    def close(self) -> None:
        self.http.close()

    def get(self, path: str) -> dict:
        last: Exception | None = None
        for url in self.urls:
            try:
                resp = self.http.get(url + path)
            except httpx.HTTPError as exc:
                last = exc
                continue
            if resp.status_code != 200:
                raise from_body(resp.status_code, resp.json())
            return resp.json()
        raise LaketailError(f"no gateway of {', '.join(self.urls)} answered: {last}")

    @property
    def cluster(self) -> str:
        if self._cluster is None:
            self._cluster = self.get("/v3/clusters")["data"][0]["cluster_id"]
        return self._cluster

    def topics(self, names: Sequence[str] | None = None) -> list[MaintainedTopic]:
        docs = {d["topic_name"]: d for d in self.get(f"/v3/clusters/{self.cluster}/topics")["data"]}
        docs = {name: d for name, d in docs.items() if not d.get("is_internal")}
        out = []
        for name in _select(docs, names):
            configs = self.get(f"/v3/clusters/{self.cluster}/topics/{name}/configs")["data"]
            config = TopicConfig.from_kafka({c["name"]: c["value"] for c in configs if c["value"] is not None})
            out.append(MaintainedTopic(name, int(docs[name]["partitions_count"]), config))
        return out

    def groups(self) -> list[str]:
        return sorted(d["consumer_group_id"] for d in self.get(f"/v3/clusters/{self.cluster}/consumer-groups")["data"])

    def lags(self, group_id: str) -> list[dict]:
        return self.get(f"/v3/clusters/{self.cluster}/consumer-groups/{quote(group_id, safe='')}/lags")["data"]


def maintained_topics(
    root: str, servers: str | None, names: Sequence[str] | None = None, settings_path: str | None = None,
    security: Mapping[str, str] | None = None,
) -> list[MaintainedTopic]:
    """From the gateway when one is given (the broker's effective configs; ``security``:
    the client properties to call it with), else from the catalog under ``root``."""
    if servers:
        gateway = Gateway(servers, security=security)
        try:
            return gateway.topics(names)
        finally:
            gateway.close()
    return topics_from_catalog(root, names, settings_path)
