"""The bare Kafka server: the floor laketail's Kafka listener is measured against.

``python -m bench.kafka_bare --port N [--partitions 12]`` is a minimal asyncio server
speaking four APIs, with the same frame codec as laketail's listener
(:mod:`laketail.kafka.protocol`, kio) so the two differ only in what happens between
decoding a request and encoding its answer:

* ApiVersions (v0-v3), listing only these four APIs;
* Metadata (v0-v12): every topic asked for exists with ``--partitions`` partitions,
  led by this server;
* Produce (v3-v9): the request's record batches are kept in memory as received, their
  base offsets rewritten in place (the first 8 bytes; the CRC does not cover them), and
  the answer goes out at once, whatever ``acks`` says: nothing is stored, flushed or
  decoded;
* Fetch (v4-v12): the kept batches from the fetch offset on, up to the partition's
  ``partition_max_bytes`` (at least one batch); when a fetch finds nothing it waits
  ``max_wait_ms`` as a broker's long poll does.

Not a broker: no groups, no ListOffsets (consumers assign explicit offsets), no
retention (a benchmark's records stay in memory until the process ends).
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import struct
from typing import Any

from laketail.kafka.protocol import CloseConnection, Request, build, decode_request, encode_response, ms

SERVED = {18: (0, 3), 3: (0, 12), 0: (3, 9), 1: (4, 12)}
_SIZE = struct.Struct(">i")
_BASE = struct.Struct(">q")
_LENGTH = struct.Struct(">i")  # batchLength at byte 8: the bytes after it
_LAST_DELTA = struct.Struct(">i")  # lastOffsetDelta at byte 23


class Log:
    """One partition's batches in memory: base offsets and the batches' bytes."""

    __slots__ = ("bases", "batches", "next_offset", "grew")

    def __init__(self) -> None:
        self.bases: list[int] = []
        self.batches: list[bytes] = []
        self.next_offset = 0
        self.grew = asyncio.Event()

    def append(self, records: bytes) -> int:
        first = self.next_offset
        pos = 0
        while pos + 61 <= len(records):
            size = 12 + _LENGTH.unpack_from(records, pos + 8)[0]
            batch = bytearray(records[pos:pos + size])
            _BASE.pack_into(batch, 0, self.next_offset)
            self.bases.append(self.next_offset)
            self.batches.append(bytes(batch))
            self.next_offset += _LAST_DELTA.unpack_from(batch, 23)[0] + 1
            pos += size
        self.grew.set()
        self.grew = asyncio.Event()
        return first

    def read(self, offset: int, max_bytes: int) -> bytes:
        i = max(bisect.bisect_right(self.bases, offset) - 1, 0)
        out: list[bytes] = []
        size = 0
        while i < len(self.batches) and (not out or size + len(self.batches[i]) <= max_bytes):
            out.append(self.batches[i])
            size += len(self.batches[i])
            i += 1
        return b"".join(out)


class BareKafka:
    def __init__(self, partitions: int) -> None:
        self.partitions = partitions
        self.logs: dict[tuple[str, int], Log] = {}
        self.port = 0

    def log(self, topic: str, partition: int) -> Log:
        found = self.logs.get((topic, partition))
        if found is None:
            found = self.logs[(topic, partition)] = Log()
        return found

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                (size,) = _SIZE.unpack(await reader.readexactly(4))
                request = decode_request(await reader.readexactly(size))
                if request.api_key not in SERVED:
                    raise CloseConnection(f"API {request.api_key} is not served by the bare server")
                data = await self.answer(request)
                if data is not None:
                    writer.write(encode_response(request, build(request.response_type, data)))
                    await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, CloseConnection):
            pass
        finally:
            writer.close()

    async def answer(self, request: Request) -> dict[str, Any] | None:
        body = request.body
        if request.api_key == 18:
            keys = [{"api_key": k, "min_version": lo, "max_version": hi} for k, (lo, hi) in SERVED.items()]
            lo, hi = SERVED[18]
            return {"error_code": 0 if lo <= request.api_version <= hi else 35, "api_keys": keys, "throttle_time": 0}
        if request.api_key == 3:
            names = sorted({t for t, _ in self.logs}) if body.topics is None else [t.name for t in body.topics]
            parts = [{"error_code": 0, "partition_index": p, "leader_id": 0, "leader_epoch": 0,
                      "replica_nodes": [0], "isr_nodes": [0], "offline_replicas": []} for p in range(self.partitions)]
            return {"throttle_time": 0, "brokers": [{"node_id": 0, "host": "127.0.0.1", "port": self.port,
                                                     "rack": None}],
                    "cluster_id": "bare", "controller_id": 0,
                    "topics": [{"name": n, "error_code": 0, "is_internal": False, "partitions": parts}
                               for n in names]}
        if request.api_key == 0:
            responses = []
            for topic in body.topic_data:
                parts = [{"index": p.index, "error_code": 0, "log_start_offset": 0, "record_errors": [],
                          "error_message": None, "base_offset": self.log(topic.name, p.index).append(p.records or b"")}
                         for p in topic.partition_data]
                responses.append({"name": topic.name, "partition_responses": parts})
            return None if body.acks == 0 else {"responses": responses, "throttle_time": 0}
        return await self.fetch(body)

    async def fetch(self, body: Any) -> dict:
        def read() -> list[dict]:
            out = []
            for t in body.topics:
                parts = []
                for p in t.partitions:
                    log = self.log(t.topic, p.partition)
                    parts.append({"partition_index": p.partition, "error_code": 0,
                                  "high_watermark": log.next_offset, "last_stable_offset": log.next_offset,
                                  "log_start_offset": 0, "aborted_transactions": [], "preferred_read_replica": -1,
                                  "records": log.read(p.fetch_offset, p.partition_max_bytes)})
                out.append({"topic": t.topic, "partitions": parts})
            return out

        responses = read()
        if not any(p["records"] for t in responses for p in t["partitions"]) and ms(body.max_wait) > 0:
            waits = [asyncio.ensure_future(self.log(t.topic, p.partition).grew.wait())
                     for t in body.topics for p in t.partitions]
            if waits:
                _, pending = await asyncio.wait(waits, timeout=ms(body.max_wait) / 1000,
                                                return_when=asyncio.FIRST_COMPLETED)
                for w in pending:
                    w.cancel()
                responses = read()
        return {"throttle_time": 0, "error_code": 0, "session_id": 0, "responses": responses}


async def main(port: int, partitions: int) -> None:
    bare = BareKafka(partitions)
    server = await asyncio.start_server(bare.serve, "127.0.0.1", port)
    bare.port = server.sockets[0].getsockname()[1]
    print(f"bare Kafka server on 127.0.0.1:{bare.port}", flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--partitions", type=int, default=12)
    args = ap.parse_args()
    try:
        asyncio.run(main(args.port, args.partitions))
    except KeyboardInterrupt:
        pass
