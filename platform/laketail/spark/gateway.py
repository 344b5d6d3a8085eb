"""Spark's side of the HTTP gateway: the few requests the source and the sink send.

Role: one blocking client used by Spark's driver (metadata, offsets, group commits,
batch commits) and by executors (the untiered tail of a read, transactional produce).
It tries ``laketail.servers`` in order and remembers the one that answered.

Errors are translated here, once: an error body ``{"error_code", "message"}`` becomes
the broker's own :class:`~laketail.errors.LaketailError` subclass
(:func:`laketail.errors.from_body`); when no server answers, :class:`GatewayUnavailable`.

Retries ride out a broker restart or a leader change, as Kafka's clients do: a request
that no server answers, or that a broker answers with a retriable error
(LEADER_NOT_AVAILABLE, NOT_LEADER_OR_FOLLOWER, NOT_COORDINATOR, ...), is sent again
after a back-off (:data:`RETRY_BACKOFF_MS`, doubling up to
:data:`RETRY_BACKOFF_MAX_MS`) until ``default.api.timeout.ms`` (the Kafka consumer's
name and default, 60 s; a source and sink option) has passed since the first try.
Only then does it fail, naming what the last try got. A produce retried that way is
deduplicated by the broker (producer id, epoch and sequence); a batch commit retried
after its answer was lost answers ``committed: false`` (committed before).

Clients are shared: every :class:`SparkGateway` of one process with the same timeout and
security settings sends through one ``httpx.Client`` (:func:`shared_client`). Building a
client builds a TLS context (httpx does so even for ``http://`` URLs), about 40 ms of
CPU; a Spark Python worker runs task after task, and each task and each planning built
its own. A shared client also keeps its connections to the gateways open between tasks.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable
from urllib.parse import quote

import httpx
import orjson
import pyarrow as pa

from laketail.errors import LaketailError, from_body
from laketail.records import IsolationLevel

ARROW_STREAM = "application/vnd.apache.arrow.stream"
#: Bound on one request (a long fetch or an acks=all produce), not a speed claim.
REQUEST_TIMEOUT_S = 120.0
#: Kafka's ``default.api.timeout.ms``: how long a request is retried before it fails.
DEFAULT_API_TIMEOUT_MS = 60_000
#: Kafka's ``retry.backoff.ms`` and ``retry.backoff.max.ms``: the pause after a pass over
#: every server, doubling with each further pass.
RETRY_BACKOFF_MS = 100
RETRY_BACKOFF_MAX_MS = 1_000


class GatewayUnavailable(LaketailError):
    """No server of ``laketail.servers`` answered."""

    kafka_code = 13
    kafka_name = "NETWORK_EXCEPTION"
    http_status = 503
    rest_code = 50303
    retriable = True


@dataclass(frozen=True)
class PartitionOffsets:
    """One partition's offsets as the leader reports them (docs/architecture.md §2.2)."""

    partition: int
    log_start_offset: int
    high_watermark: int
    last_stable_offset: int
    tiered_offset: int

    def end(self, isolation: IsolationLevel) -> int:
        """The end a consumer reads to: the LSO for read_committed, else the HW."""
        return self.last_stable_offset if isolation == "read_committed" else self.high_watermark


@dataclass(frozen=True)
class TopicTable:
    """``GET /v1/topics/{t}/table``: where the topic's Delta table is, and its offsets."""

    topic: str
    uri: str
    version: int
    partitions: dict[int, PartitionOffsets]


@dataclass(frozen=True)
class FetchedRecords:
    """One ``/v1`` Arrow fetch: data records (``RECORD_SCHEMA``) and where to go on."""

    records: pa.Table
    next_offset: int
    log_start_offset: int


def parse_servers(raw: str | None) -> tuple[str, ...]:
    """``"http://a:8082,b:8082"`` as URLs (``http://`` added where no scheme is given)."""
    servers = []
    for part in (raw or "").split(","):
        part = part.strip().rstrip("/")
        if part:
            servers.append(part if "://" in part else f"http://{part}")
    return tuple(servers)


def seg(value: str | int) -> str:
    """One path segment, percent-encoded (topic, group and sink ids)."""
    return quote(str(value), safe="")


_ClientKey = tuple[float, tuple[tuple[str, str], ...]]
_clients: dict[_ClientKey, httpx.Client] = {}
_clients_lock = threading.Lock()


def _forget_clients() -> None:
    """In a forked child: the parent's clients hold the parent's sockets."""
    global _clients_lock
    _clients.clear()
    _clients_lock = threading.Lock()


os.register_at_fork(after_in_child=_forget_clients)


def shared_client(timeout_s: float, security: tuple[tuple[str, str], ...]) -> httpx.Client:
    """This process's client for ``timeout_s`` and ``security``, made at first use.
    httpx clients are thread-safe; no caller closes a shared one."""
    key = (timeout_s, security)
    with _clients_lock:
        client = _clients.get(key)
        if client is None or client.is_closed:
            options = {}
            if security:
                from laketail.client.security import client_security

                options = client_security(dict(security)).httpx_options()
            client = _clients[key] = httpx.Client(timeout=httpx.Timeout(timeout_s, connect=10.0), **options)
        return client


class SparkGateway:
    """Blocking requests to a laketail cluster, through this process's shared client
    for its settings (:func:`shared_client`); cheap to make, one per caller."""

    def __init__(self, servers: tuple[str, ...], timeout_s: float = REQUEST_TIMEOUT_S,
                 security: tuple[tuple[str, str], ...] = (), *,
                 api_timeout_ms: int = DEFAULT_API_TIMEOUT_MS,
                 monotonic: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        """``security``: confluent-kafka's ``security.protocol`` / ``sasl.*`` / ``ssl.*``
        settings (the ``laketail.``-prefixed options, prefix removed); ``api_timeout_ms``:
        ``default.api.timeout.ms``, how long a request is retried."""
        if not servers:
            raise LaketailError("laketail.servers names no gateway")
        self.servers = servers
        self.api_timeout_s = api_timeout_ms / 1000.0
        self._monotonic = monotonic
        self._sleep = sleep
        self._preferred = 0
        #: requests sent (retries included): what a caller costs the cluster
        self.requests = 0
        self._http = shared_client(timeout_s, security)

    def close(self) -> None:
        """Nothing to release: the client is the process's (its idle connections close
        after httpx's keep-alive expiry)."""

    def __enter__(self) -> "SparkGateway":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- transport -------------------------------------------------------------------------

    def request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        """The 2xx response of the first server that answers, retried (see the module
        docstring) until ``default.api.timeout.ms`` has passed."""
        deadline = self._monotonic() + self.api_timeout_s
        last: Exception | None = None
        n = len(self.servers)
        backoff_s = RETRY_BACKOFF_MS / 1000.0
        attempt = 0
        while True:
            index = (self._preferred + attempt) % n
            attempt += 1
            self.requests += 1
            try:
                response = self._http.request(method, self.servers[index] + path, **kwargs)
            except httpx.TransportError as exc:
                last = exc
            else:
                self._preferred = index
                if response.is_success:
                    return response
                try:
                    body = response.json()
                except ValueError:
                    body = {"message": response.text[:300]}
                error = from_body(response.status_code, body if isinstance(body, dict) else {})
                # A partition whose leadership is being set up or moving, a coordinator
                # loading, a broker stopping: Kafka's clients retry these after a
                # back-off. Anything else is the answer.
                if not error.retriable:
                    raise error
                last = error
            if attempt % n == 0 or isinstance(last, LaketailError):
                left = deadline - self._monotonic()
                if left <= 0:
                    break
                self._sleep(min(backoff_s, left))
                backoff_s = min(backoff_s * 2, RETRY_BACKOFF_MAX_MS / 1000.0)
        if isinstance(last, LaketailError):
            raise type(last)(
                f"{last.detail} (still so after retrying {method} {path} for default.api.timeout.ms="
                f"{self.api_timeout_s * 1000:.0f})", rest_code=last.rest_code,
            ) from last
        raise GatewayUnavailable(
            f"no gateway of {', '.join(self.servers)} answered {method} {path} within "
            f"default.api.timeout.ms={self.api_timeout_s * 1000:.0f} ({attempt} tries): {last!r}"
        )

    def get_json(self, path: str, **params: Any) -> Any:
        return self.request("GET", path, params=params or None).json()

    def post_json(self, path: str, body: Any = None, **params: Any) -> Any:
        content = orjson.dumps(body if body is not None else {})
        response = self.request(
            "POST", path, content=content, params=params or None,
            headers={"Content-Type": "application/json"},
        )
        return response.json() if response.content else None

    # -- metadata and offsets ----------------------------------------------------------------

    def topics(self) -> list[str]:
        """User topics (internal ones left out, as Kafka's AdminClient lists them)."""
        return sorted(self.get_json("/topics"))

    def table(self, topic: str) -> TopicTable:
        doc = self.get_json(f"/v1/topics/{seg(topic)}/table")
        parts = {
            p["partition"]: PartitionOffsets(
                p["partition"], p["log_start_offset"], p["high_watermark"],
                p["last_stable_offset"], p["tiered_offset"],
            )
            for p in doc["partitions"]
        }
        return TopicTable(doc["topic"], doc["uri"], doc["version"], parts)

    def partition_count(self, topic: str, auto_create: bool = False) -> int:
        """The topic's partitions; ``auto_create`` asks the broker to create a missing
        topic first (a writer's metadata request, as Kafka's producer sends it)."""
        if auto_create:
            return len(self.get_json(f"/topics/{seg(topic)}/partitions", allow_auto_topic_creation="true"))
        return len(self.get_json(f"/topics/{seg(topic)}/partitions"))

    def offset_for_timestamp(self, topic: str, partition: int, timestamp_ms: int) -> int:
        """Kafka's ListOffsets by time: the earliest offset whose timestamp is at or
        after ``timestamp_ms``; -1 when no record is that recent."""
        doc = self.get_json(
            f"/v1/topics/{seg(topic)}/partitions/{partition}/offsets", timestamp=str(timestamp_ms)
        )
        return int(doc["offset"])

    # -- reads -------------------------------------------------------------------------------

    def fetch(
        self, topic: str, partition: int, offset: int, isolation: IsolationLevel, max_records: int
    ) -> FetchedRecords:
        response = self.request(
            "GET", f"/v1/topics/{seg(topic)}/partitions/{partition}/records",
            params={"offset": offset, "max_records": max_records, "isolation_level": isolation},
        )
        records = pa.ipc.open_stream(pa.py_buffer(response.content)).read_all()
        return FetchedRecords(
            records,
            int(response.headers["X-Laketail-Next-Offset"]),
            int(response.headers["X-Laketail-Log-Start-Offset"]),
        )

    # -- consumer groups -----------------------------------------------------------------------

    def commit_offsets(self, group_id: str, offsets: dict[tuple[str, int], int]) -> None:
        """Commit ``offsets`` (each the next offset to read) outside any generation."""
        if not offsets:
            return
        self.post_json(f"/v1/groups/{seg(group_id)}/commit", {
            "generation_id": -1,
            "member_id": "",
            "offsets": [{"topic": t, "partition": p, "offset": o} for (t, p), o in sorted(offsets.items())],
        })

    # -- the exactly-once sink -------------------------------------------------------------------

    def enlist(self, sink_id: str, batch_id: int, timeout_ms: int) -> tuple[str, int, int]:
        """A fresh transactional session for one writer attempt of a batch."""
        doc = self.post_json(
            f"/v1/sinks/{seg(sink_id)}/batches/{batch_id}/enlist", {"transaction_timeout_ms": timeout_ms}
        )
        return doc["transactional_id"], doc["producer_id"], doc["producer_epoch"]

    def produce_transactional(
        self, topic: str, partition: int, table: pa.Table, producer_id: int, epoch: int, sequence: int
    ) -> None:
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, table.schema) as writer:
            writer.write_table(table)
        self.request(
            "POST", f"/v1/topics/{seg(topic)}/partitions/{partition}/records",
            content=sink.getvalue().to_pybytes(),
            headers={"Content-Type": ARROW_STREAM},
            params={
                "acks": "all", "producer_id": producer_id, "producer_epoch": epoch,
                "sequence": sequence, "transactional": "true",
            },
        )

    def commit_batch(self, sink_id: str, batch_id: int, transactional_ids: list[str]) -> bool:
        """True when committed now; False when the batch id was committed before."""
        doc = self.post_json(
            f"/v1/sinks/{seg(sink_id)}/batches/{batch_id}/commit", {"transactional_ids": transactional_ids}
        )
        return bool(doc["committed"])

    def abort_batch(self, sink_id: str, batch_id: int) -> None:
        self.post_json(f"/v1/sinks/{seg(sink_id)}/batches/{batch_id}/abort")

    def committed_batch(self, sink_id: str) -> int:
        return int(self.get_json(f"/v1/sinks/{seg(sink_id)}")["committed_batch"])
