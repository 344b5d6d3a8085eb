"""The baselines' server: bare FastAPI endpoints under the same uvicorn settings as
``laketail serve`` (uvicorn.run, default loop and HTTP parser, access log off).

Role: measure what FastAPI + uvicorn cost on this machine, so that each laketail figure
is a ratio against the same stack doing only the unavoidable work:

* ``GET /static`` -- a constant answer (shows how fast the load generator can go);
* ``POST /sink`` -- reads the body and answers ``{}`` (the same, with a request body);
* ``POST /produce`` -- a Confluent v2 binary body parsed with orjson, every value (and
  key) base64-decoded, ``{"count": n}`` answered: the REST produce baseline;
* ``PUT /blob/{name}`` then ``GET /blob/{name}`` -- stores bytes once, then returns
  those pre-encoded bytes: the fetch baseline;
* ``POST /naive/{topic}`` -- the naive design benchmark 4 plots: one
  ``write_deltalake(mode="append")`` per request into ``<data>/naive/<topic>``.

Run as ``python -m bench.baseline_app --port P --data DIR``.
"""

from __future__ import annotations

import argparse
import asyncio
import binascii
import time
from pathlib import Path

import orjson
from fastapi import FastAPI, Request
from starlette.responses import Response

_a2b = binascii.a2b_base64


def decode_v2(body: bytes) -> tuple[list[bytes | None], list[bytes | None]]:
    """Values and keys of a v2 binary body, base64-decoded."""
    items = orjson.loads(body)["records"]
    values: list[bytes | None] = []
    keys: list[bytes | None] = []
    for item in items:
        value = item.get("value")
        values.append(None if value is None else _a2b(value))
        key = item.get("key")
        keys.append(None if key is None else _a2b(key))
    return values, keys


def create_app(data: Path) -> FastAPI:
    app = FastAPI(openapi_url=None, docs_url=None, redoc_url=None)
    blobs: dict[str, tuple[bytes, str]] = {}
    naive_offsets: dict[str, int] = {}
    naive_locks: dict[str, asyncio.Lock] = {}

    @app.get("/static")
    async def static() -> Response:
        return Response(b"ok", media_type="text/plain")

    @app.post("/sink")
    async def sink(request: Request) -> Response:
        await request.body()
        return Response(b"{}", media_type="application/json")

    @app.post("/produce")
    async def produce(request: Request) -> Response:
        values, _ = decode_v2(await request.body())
        return Response(orjson.dumps({"count": len(values)}), media_type="application/json")

    @app.put("/blob/{name}")
    async def put_blob(name: str, request: Request) -> Response:
        blobs[name] = (await request.body(), request.headers.get("content-type", "application/octet-stream"))
        return Response(status_code=204)

    @app.get("/blob/{name}")
    async def get_blob(name: str) -> Response:
        body, media_type = blobs[name]
        return Response(body, media_type=media_type)

    @app.post("/naive/{topic}")
    async def naive(topic: str, request: Request) -> Response:
        values, keys = decode_v2(await request.body())
        lock = naive_locks.setdefault(topic, asyncio.Lock())
        async with lock:
            base = naive_offsets.get(topic, 0)
            naive_offsets[topic] = base + len(values)
            await asyncio.to_thread(_naive_append, data / "naive" / topic, base, values, keys)
        return Response(orjson.dumps({"base_offset": base}), media_type="application/json")

    return app


def _naive_append(path: Path, base: int, values: list, keys: list) -> None:
    """One Delta commit per produce request: the design docs/architecture.md §7 avoids."""
    import pyarrow as pa
    from deltalake import write_deltalake

    n = len(values)
    now_us = int(time.time() * 1_000_000)
    table = pa.table({
        "partition": pa.array([0] * n, pa.int32()),
        "offset": pa.array(range(base, base + n), pa.int64()),
        "timestamp": pa.array([now_us] * n, pa.timestamp("us", tz="UTC")),
        "key": pa.array(keys, pa.binary()),
        "value": pa.array(values, pa.binary()),
    })
    write_deltalake(str(path), table, mode="append", partition_by=["partition"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--data", type=Path, required=True)
    parser.add_argument("--log-level", default="warning")
    args = parser.parse_args()
    import uvicorn

    uvicorn.run(
        create_app(args.data), host=args.host, port=args.port,
        log_level=args.log_level, access_log=False, lifespan="on",
    )


if __name__ == "__main__":
    main()
