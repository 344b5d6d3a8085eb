"""A scripted laketail cluster for the client's routing and retry tests: real HTTP servers
(FastAPI under uvicorn, each in a thread of the test process, on 127.0.0.1), sharing
one state.

:class:`StubCluster` runs ``n`` :class:`StubBroker` s that answer the documents the
client reads -- ``/v3/clusters``, ``/v3/clusters/stub/brokers``, ``/brokers``,
``/topics/{t}/partitions``, ``/v3/clusters/stub/topics``, ``POST /v1/producers`` --
from :attr:`StubCluster.leaders`, and serve produce and fetch
(``/v1/topics/{t}/partitions/{p}/records``) from one shared log per partition, as if
every broker forwarded to the leader. An idempotent batch seen before (same producer
id and sequence) is answered with its first offsets, as a broker does.

The script: :attr:`StubCluster.on_produce` / :attr:`StubCluster.on_fetch` are called
with ``(broker_id, topic, partition)`` before a request is served; they return an
``(http_status, body)`` to answer instead, or None to serve it. Every request is
recorded in :attr:`StubCluster.requests` as ``(broker_id, method, path, params)``.
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from typing import Callable

import pyarrow as pa
import uvicorn
from fastapi import FastAPI, Request
from starlette.responses import JSONResponse, Response

from laketail.errors import LaketailError, UnknownTopicOrPartition
from laketail.records import RECORD_SCHEMA

ARROW_STREAM = "application/vnd.apache.arrow.stream"
Script = Callable[[int, str, int], "tuple[int, dict] | None"]


def leader_not_available(topic: str, partition: int) -> tuple[int, dict]:
    """The broker's LEADER_NOT_AVAILABLE answer (spelled out: the client must know it
    by its REST code whether or not laketail.errors has a class for it)."""
    return 503, {"error_code": 50303,
                 "message": f"LEADER_NOT_AVAILABLE: partition {partition} of topic '{topic}' has no leader"}


def answer(err: LaketailError) -> tuple[int, dict]:
    return err.http_status, err.to_body()


class StubBroker:
    """One stub broker: a uvicorn server on a socket bound before it starts."""

    def __init__(self, cluster: "StubCluster", broker_id: int) -> None:
        self.cluster = cluster
        self.broker_id = broker_id
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        config = uvicorn.Config(_app(cluster, broker_id), log_level="warning", lifespan="off")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]},
                                       name=f"stub-broker-{broker_id}", daemon=True)

    def start(self) -> None:
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            assert self.thread.is_alive() and time.monotonic() < deadline, "stub broker did not start"
            time.sleep(0.01)

    def stop(self) -> None:
        """Stop serving: from now on connections to its port are refused."""
        if self.thread.is_alive():
            self.server.should_exit = True
            self.thread.join(30)
        self.sock.close()


class StubCluster:
    """``n`` stub brokers; ``topics`` maps a topic to its partition count, every
    partition led by broker 0 until :attr:`leaders` says otherwise."""

    def __init__(self, n: int, topics: dict[str, int]) -> None:
        self.lock = threading.Lock()
        self.topics = dict(topics)
        self.leaders: dict[tuple[str, int], int] = {(t, p): 0 for t, c in topics.items() for p in range(c)}
        self.logs: dict[tuple[str, int], list[bytes | None]] = {tp: [] for tp in self.leaders}
        self.seen: dict[tuple[str, int, int, int], int] = {}  # (topic, partition, pid, seq) -> base offset
        self.requests: list[tuple[int, str, str, dict[str, str]]] = []
        self.on_produce: Script | None = None
        self.on_fetch: Script | None = None
        self.v3_brokers = True  # False: /v3/clusters/stub/brokers is not there (404)
        self.advertised: dict[int, str] = {}  # broker id -> the url the v3 list gives instead
        self.brokers = [StubBroker(self, i) for i in range(n)]

    def __enter__(self) -> "StubCluster":
        for broker in self.brokers:
            broker.start()
        return self

    def __exit__(self, *exc: object) -> None:
        for broker in self.brokers:
            broker.stop()

    def url(self, broker_id: int) -> str:
        return self.brokers[broker_id].url

    def sent(self, method: str, path: str) -> list[tuple[int, dict[str, str]]]:
        """(broker id, params) of the requests made to ``path``, in order."""
        with self.lock:
            return [(b, p) for b, m, pa_, p in self.requests if m == method and pa_ == path]

    def partition_doc(self, topic: str, partition: int) -> dict:
        leader = self.leaders[(topic, partition)]
        replicas = [{"broker": b.broker_id, "leader": b.broker_id == leader, "in_sync": True} for b in self.brokers]
        return {"partition": partition, "leader": leader, "replicas": replicas}

    # -- serving (called from the brokers' threads) -------------------------------------------------

    def produce(self, topic: str, partition: int, params: dict[str, str], table: pa.Table) -> dict:
        with self.lock:
            log = self.logs[(topic, partition)]
            key = (topic, partition, int(params.get("producer_id", -1)), int(params.get("sequence", -1)))
            if key[2] >= 0 and key in self.seen:
                base = self.seen[key]
            else:
                base = len(log)
                log.extend(table.column("value").to_pylist())
                if key[2] >= 0:
                    self.seen[key] = base
        return {"offsets": [{"partition": partition, "base_offset": base,
                             "last_offset": base + table.num_rows - 1, "count": table.num_rows}]}

    def fetch(self, topic: str, partition: int, offset: int, max_records: int) -> tuple[pa.Table, int, int]:
        with self.lock:
            log = self.logs[(topic, partition)]
            values = log[offset:offset + max_records]
            end = len(log)
        rows = [{
            "partition": partition, "offset": offset + i, "timestamp": 0, "timestamp_type": 0, "key": None,
            "value": v, "headers": None, "producer_id": -1, "producer_epoch": -1, "sequence": -1,
            "transactional": False, "control": None, "leader_epoch": 0,
        } for i, v in enumerate(values)]
        return pa.Table.from_pylist(rows, schema=RECORD_SCHEMA), offset + len(values), end


def _arrow(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


def _app(cluster: StubCluster, broker_id: int) -> FastAPI:  # noqa: C901 - one route per document
    app = FastAPI()

    @app.middleware("http")
    async def record(request: Request, call_next):  # type: ignore[no-untyped-def]
        with cluster.lock:
            cluster.requests.append((broker_id, request.method, request.url.path, dict(request.query_params)))
        return await call_next(request)

    def unknown(topic: str) -> JSONResponse:
        return JSONResponse(UnknownTopicOrPartition.topic(topic).to_body(), status_code=404)

    @app.get("/v3/clusters")
    async def clusters() -> dict:
        controller = f"{cluster.url(0)}/v3/clusters/stub/brokers/0"
        return {"data": [{"cluster_id": "stub", "controller": {"related": controller}}]}

    @app.get("/v3/clusters/stub/brokers")
    async def brokers() -> Response:
        if not cluster.v3_brokers:
            return JSONResponse({"error_code": 40400, "message": "INVALID_REQUEST: Not Found"}, status_code=404)
        return JSONResponse({"data": [
            {"broker_id": b.broker_id, "host": "127.0.0.1", "port": b.port,
             "url": cluster.advertised.get(b.broker_id, b.url)} for b in cluster.brokers]})

    @app.get("/brokers")
    async def broker_ids() -> dict:
        return {"brokers": [b.broker_id for b in cluster.brokers]}

    @app.get("/v3/clusters/stub/topics")
    async def topics() -> dict:
        return {"data": [{"topic_name": t} for t in cluster.topics]}

    @app.get("/topics/{topic}/partitions")
    async def partitions(topic: str) -> Response:
        if topic not in cluster.topics:
            return unknown(topic)
        return JSONResponse([cluster.partition_doc(topic, p) for p in range(cluster.topics[topic])])

    @app.post("/v1/producers")
    async def producers() -> dict:
        return {"producer_id": 7, "producer_epoch": 0}

    @app.post("/v1/topics/{topic}/partitions/{partition}/records")
    async def produce(topic: str, partition: int, request: Request) -> Response:
        scripted = cluster.on_produce(broker_id, topic, partition) if cluster.on_produce else None
        if scripted is not None:
            return JSONResponse(scripted[1], status_code=scripted[0])
        table = pa.ipc.open_stream(pa.py_buffer(await request.body())).read_all()
        return JSONResponse(cluster.produce(topic, partition, dict(request.query_params), table))

    @app.get("/v1/topics/{topic}/partitions/{partition}/offsets")
    async def offsets(topic: str, partition: int, timestamp: str = "latest") -> dict:
        with cluster.lock:
            end = len(cluster.logs[(topic, partition)])
        return {"offset": 0 if timestamp == "earliest" else end}

    @app.get("/v1/topics/{topic}/partitions/{partition}/records")
    async def fetch(topic: str, partition: int, offset: int, max_records: int = 500, timeout: int = 0) -> Response:
        scripted = cluster.on_fetch(broker_id, topic, partition) if cluster.on_fetch else None
        if scripted is not None:
            return JSONResponse(scripted[1], status_code=scripted[0])
        table, next_offset, end = cluster.fetch(topic, partition, offset, max_records)
        if table.num_rows == 0:
            await asyncio.sleep(min(timeout, 50) / 1000.0)  # a short long-poll, so clients do not spin
        headers = {"X-Laketail-Next-Offset": str(next_offset), "X-Laketail-Log-Start-Offset": "0",
                   "X-Laketail-High-Watermark": str(end)}
        return Response(_arrow(table), media_type=ARROW_STREAM, headers=headers)

    return app
