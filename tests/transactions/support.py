"""What the transaction tests share, each a thin layer over the REST contract.

* :class:`Session` -- one producer session (``POST /v1/producers``) with its own
  per-partition sequences: produce (Confluent v2 or Arrow IPC, idempotent or
  transactional), begin, add partitions and offsets, commit, abort;
* :class:`DroppingProxy` -- a TCP proxy between a client and the broker that forwards
  requests and, for chosen ones, drops the broker's answer: it reads the answer in
  full, keeps it for the test, and closes the client's connection instead of sending
  it (the client sees the connection die after the broker did the work);
* :func:`read_values` / :func:`read_arrow` -- a whole partition under one isolation
  level through the Redpanda-style fetch and the /v1 Arrow fetch;
* :func:`wait_until` -- polling with a deadline (never a fixed sleep).
"""

from __future__ import annotations

import base64
import socket
import threading
import time
import uuid
from typing import Any, Callable
from urllib.parse import quote

import httpx
import pyarrow as pa

V2 = "application/vnd.kafka.v2+json"
BINARY_V2 = "application/vnd.kafka.binary.v2+json"
ARROW = "application/vnd.apache.arrow.stream"


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def wait_until(condition: Callable[[], Any], what: str, timeout_s: float = 60.0, every_s: float = 0.05) -> Any:
    """Poll ``condition`` until it returns something truthy; fail after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        result = condition()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:.0f}s waiting for {what}")
        time.sleep(every_s)


def error_of(resp: httpx.Response) -> tuple[int, int]:
    """(HTTP status, laketail error_code) of an error answer."""
    return resp.status_code, resp.json()["error_code"]


def arrow_body(values: list[bytes]) -> bytes:
    table = pa.table({"value": pa.array(values, pa.binary())})
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


class Session:
    """A producer session: ``transactional_id`` None for an idempotent producer.

    :meth:`produce` sends one batch to one partition with the session's next sequence
    there and advances the sequence only when the broker took the batch, as Kafka's
    producer does; :meth:`produce_at` resends a batch with a sequence of the caller's
    choosing (a retry)."""

    def __init__(self, http: httpx.Client, transactional_id: str | None = None,
                 timeout_ms: int = 60_000) -> None:
        self.http = http
        self.transactional_id = transactional_id
        resp = http.post("/v1/producers", json={
            "transactional_id": transactional_id, "transaction_timeout_ms": timeout_ms,
        })
        assert resp.status_code == 200, resp.text
        self.producer_id: int = resp.json()["producer_id"]
        self.epoch: int = resp.json()["producer_epoch"]
        self.sequences: dict[tuple[str, int], int] = {}

    @classmethod
    def adopt(cls, http: httpx.Client, transactional_id: str, producer_id: int, epoch: int) -> "Session":
        """A session someone else initialised (a sink's enlist hands one out)."""
        session = cls.__new__(cls)
        session.http, session.transactional_id = http, transactional_id
        session.producer_id, session.epoch, session.sequences = producer_id, epoch, {}
        return session

    @property
    def ident(self) -> dict[str, int]:
        return {"producer_id": self.producer_id, "producer_epoch": self.epoch}

    def params(self, sequence: int, transactional: bool) -> dict[str, Any]:
        return {**self.ident, "sequence": sequence, "transactional": "true" if transactional else "false"}

    def produce_at(self, topic: str, partition: int, values: list[bytes], sequence: int, *,
                   transactional: bool | None = None, arrow: bool = False,
                   http: httpx.Client | None = None, headers: dict[str, str] | None = None) -> httpx.Response:
        txn = self.transactional_id is not None if transactional is None else transactional
        client = http or self.http
        params = self.params(sequence, txn)
        if arrow:
            return client.post(f"/v1/topics/{topic}/partitions/{partition}/records", params=params,
                               content=arrow_body(values), headers={"Content-Type": ARROW, **(headers or {})})
        return client.post(
            f"/topics/{topic}/partitions/{partition}", params=params,
            json={"records": [{"value": b64(v)} for v in values]},
            headers={"Content-Type": BINARY_V2, "Accept": V2, **(headers or {})},
        )

    def produce(self, topic: str, partition: int, values: list[bytes], **kwargs: Any) -> httpx.Response:
        sequence = self.sequences.get((topic, partition), 0)
        resp = self.produce_at(topic, partition, values, sequence, **kwargs)
        if resp.status_code == 200:
            self.sequences[(topic, partition)] = sequence + len(values)
        return resp

    # -- the transaction ----------------------------------------------------------------------

    @property
    def path(self) -> str:
        """The transaction's resource, its id percent-encoded (ids may hold ``/``)."""
        return f"/v1/transactions/{quote(self.transactional_id or '', safe='')}"

    def _txn(self, action: str, **extra: Any) -> httpx.Response:
        return self.http.post(f"{self.path}/{action}", json={**self.ident, **extra})

    def begin(self) -> httpx.Response:
        return self._txn("begin")

    def add_partitions(self, partitions: list[tuple[str, int]]) -> httpx.Response:
        return self._txn("partitions", partitions=[{"topic": t, "partition": p} for t, p in partitions])

    def send_offsets(self, group: str, offsets: dict[tuple[str, int], int]) -> httpx.Response:
        return self._txn("offsets", group_id=group, offsets=[
            {"topic": t, "partition": p, "offset": o} for (t, p), o in offsets.items()
        ])

    def commit(self) -> httpx.Response:
        return self._txn("commit")

    def abort(self) -> httpx.Response:
        return self._txn("abort")

    def describe(self) -> dict:
        resp = self.http.get(self.path)
        assert resp.status_code == 200, resp.text
        return resp.json()


def v2_offsets(resp: httpx.Response) -> list[int]:
    assert resp.status_code == 200, resp.text
    return [o["offset"] for o in resp.json()["offsets"]]


# -- reading a whole partition ---------------------------------------------------------------


def _end(http: httpx.Client, topic: str, partition: int, isolation: str) -> int:
    resp = http.get(f"/topics/{topic}/partitions/{partition}/offsets", params={"isolation_level": isolation})
    assert resp.status_code == 200, resp.text
    return resp.json()["end_offset"]


def read_records(http: httpx.Client, topic: str, partition: int, isolation: str = "read_committed") -> list[dict]:
    """Every record a consumer at ``isolation`` sees from offset 0 to the end (the last
    stable offset or the high watermark), through ``GET .../records``."""
    end = _end(http, topic, partition, isolation)
    out: list[dict] = []
    offset = 0
    while offset < end:
        resp = http.get(f"/topics/{topic}/partitions/{partition}/records",
                        params={"offset": offset, "isolation_level": isolation, "max_records": 1000},
                        headers={"Accept": BINARY_V2})
        assert resp.status_code == 200, resp.text
        batch = resp.json()
        if not batch:
            break  # only markers or aborted records were left below the end
        out.extend(batch)
        offset = batch[-1]["offset"] + 1
    return out


def read_values(http: httpx.Client, topic: str, partition: int, isolation: str = "read_committed") -> list[bytes]:
    return [base64.b64decode(r["value"]) for r in read_records(http, topic, partition, isolation)]


def read_arrow(http: httpx.Client, topic: str, partition: int, isolation: str = "read_committed") -> pa.Table:
    """The same through ``GET /v1/topics/{t}/partitions/{p}/records`` (Arrow IPC),
    following ``X-Laketail-Next-Offset``."""
    end = _end(http, topic, partition, isolation)
    tables = []
    offset = 0
    while offset < end:
        resp = http.get(f"/v1/topics/{topic}/partitions/{partition}/records",
                        params={"offset": offset, "isolation_level": isolation, "max_records": 1000})
        assert resp.status_code == 200, resp.text
        table = pa.ipc.open_stream(pa.py_buffer(resp.content)).read_all()
        tables.append(table)
        next_offset = int(resp.headers["X-Laketail-Next-Offset"])
        if next_offset <= offset:
            break
        offset = next_offset
    return pa.concat_tables(tables) if tables else pa.table({})


# -- a proxy that loses answers -------------------------------------------------------------------


class DroppingProxy:
    """``127.0.0.1:<port>`` -> the broker, one upstream connection per client connection.

    Clients must send ``Connection: close`` (one request per connection), so the
    broker's answer ends with its connection. :meth:`drop_next` arms the proxy: the
    next request whose head contains ``marker`` is forwarded, its answer is read in
    full and kept in :attr:`dropped`, and the client's connection is closed without a
    byte of it.
    """

    def __init__(self, target_port: int) -> None:
        self.target = ("127.0.0.1", target_port)
        self._server = socket.create_server(("127.0.0.1", 0))
        self.port = self._server.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._lock = threading.Lock()
        self._armed: list[bytes] = []
        self.dropped: list[bytes] = []  # the raw answers the client never saw
        self.forwarded = 0
        self._closed = False
        self._thread = threading.Thread(target=self._accept, name="dropping-proxy", daemon=True)
        self._thread.start()

    def drop_next(self, marker: bytes = b"", times: int = 1) -> None:
        with self._lock:
            self._armed.extend([marker] * times)

    def close(self) -> None:
        self._closed = True
        self._server.close()

    def __enter__(self) -> "DroppingProxy":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        head = bytearray()
        with client, socket.create_connection(self.target) as upstream:

            def pump_request() -> None:
                try:
                    while chunk := client.recv(65536):
                        if len(head) < 16384:
                            head.extend(chunk[:16384])
                        upstream.sendall(chunk)
                except OSError:
                    pass
                try:
                    upstream.shutdown(socket.SHUT_WR)
                except OSError:
                    pass

            requests = threading.Thread(target=pump_request, daemon=True)
            requests.start()
            answer = bytearray()
            while chunk := upstream.recv(65536):  # the broker closes after its answer
                answer.extend(chunk)
            with self._lock:
                drop = next((i for i, m in enumerate(self._armed) if m in head), None)
                if drop is not None:
                    del self._armed[drop]
                    self.dropped.append(bytes(answer))
                else:
                    self.forwarded += 1
            if drop is None:
                try:
                    client.sendall(answer)
                except OSError:
                    pass
            try:
                client.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            requests.join(timeout=5)


def answer_json(raw: bytes) -> Any:
    """The JSON body of a raw HTTP/1.1 answer the proxy kept."""
    import json

    head, _, body = raw.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200"), head[:200]
    return json.loads(body)
