"""Clients the consumer-group tests share, each a thin layer over raw HTTP calls.

* :class:`V2Consumer` -- a Confluent REST Proxy v2 consumer instance, driven as the
  Confluent docs show (create, subscribe, records, offsets, delete);
* :class:`V1Member` -- a member speaking laketail's /v1 group protocol (join, sync,
  heartbeat, commit), as the Python client does;
* :func:`records_until` -- read from an instance until a condition holds.

Nothing here sleeps a fixed time: waiting is polling with a deadline.
"""

from __future__ import annotations

import base64
import time
import uuid
from typing import Any, Callable
from urllib.parse import urlsplit

import httpx

V2 = "application/vnd.kafka.v2+json"
BINARY_V2 = "application/vnd.kafka.binary.v2+json"
JSON_V2 = "application/vnd.kafka.json.v2+json"

#: A join may wait for every member to rejoin (or a silent one to expire).
JOIN_TIMEOUT_S = 120.0


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def unb64(text: str | None) -> bytes | None:
    return None if text is None else base64.b64decode(text)


class V2Consumer:
    """One v2 consumer instance; the HTTP answers are returned raw where a test
    checks them, decoded where it only needs the data."""

    def __init__(self, url: str, group: str, name: str | None = None, **config: Any) -> None:
        self.http = httpx.Client(base_url=url, timeout=60.0)
        self.group = group
        body = dict(config)
        if name is not None:
            body["name"] = name
        self.created = self.http.post(f"/consumers/{group}", json=body, headers={"Content-Type": V2})
        assert self.created.status_code == 200, self.created.text
        doc = self.created.json()
        self.instance_id = doc["instance_id"]
        self.base_uri = doc["base_uri"]
        self.path = urlsplit(self.base_uri).path

    def close(self) -> None:
        self.http.close()

    def post(self, suffix: str, body: Any = None) -> httpx.Response:
        kwargs: dict[str, Any] = {"headers": {"Content-Type": V2}}
        if body is not None:
            kwargs["json"] = body
        return self.http.post(self.path + suffix, **kwargs)

    def subscribe(self, topics: list[str] | None = None, pattern: str | None = None) -> httpx.Response:
        body = {"topics": topics} if pattern is None else {"topic_pattern": pattern}
        return self.post("/subscription", body)

    def assignments(self) -> list[tuple[str, int]]:
        resp = self.http.get(self.path + "/assignments", headers={"Accept": V2})
        assert resp.status_code == 200, resp.text
        return sorted((p["topic"], p["partition"]) for p in resp.json()["partitions"])

    def records_response(self, timeout_ms: int = 500, accept: str = BINARY_V2,
                         max_bytes: int | None = None) -> httpx.Response:
        params: dict[str, Any] = {"timeout": timeout_ms}
        if max_bytes is not None:
            params["max_bytes"] = max_bytes
        return self.http.get(self.path + "/records", params=params, headers={"Accept": accept})

    def records(self, timeout_ms: int = 500, accept: str = BINARY_V2) -> list[dict]:
        resp = self.records_response(timeout_ms, accept)
        assert resp.status_code == 200, resp.text
        return resp.json()

    def commit(self, offsets: list[tuple[str, int, int]] | None = None) -> httpx.Response:
        if offsets is None:
            return self.post("/offsets")
        return self.post("/offsets", {"offsets": [
            {"topic": t, "partition": p, "offset": o} for t, p, o in offsets
        ]})

    def committed(self, partitions: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
        resp = self.http.request(
            "GET", self.path + "/offsets", headers={"Content-Type": V2, "Accept": V2},
            json={"partitions": [{"topic": t, "partition": p} for t, p in partitions]},
        )
        assert resp.status_code == 200, resp.text
        return {(o["topic"], o["partition"]): o["offset"] for o in resp.json()["offsets"]}

    def delete(self) -> httpx.Response:
        return self.http.delete(self.path, headers={"Content-Type": V2})


def records_until(consumer: V2Consumer, done: Callable[[list[dict]], bool], what: str,
                  timeout_s: float = 60.0) -> list[dict]:
    """Read records until ``done(all read so far)``; fail after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    seen: list[dict] = []
    while not done(seen):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out reading {what}; read {len(seen)} record(s): "
                                 f"{[(r['partition'], r['offset']) for r in seen][:50]}")
        seen.extend(consumer.records(timeout_ms=500))
    return seen


class V1Member:
    """A member of a group through laketail's /v1 protocol."""

    def __init__(self, url: str, group: str, topics: list[str], client_id: str = "v1-member",
                 session_timeout_ms: int = 1000) -> None:
        self.http = httpx.Client(base_url=url, timeout=JOIN_TIMEOUT_S)
        self.group, self.topics, self.client_id = group, topics, client_id
        self.session_timeout_ms = session_timeout_ms
        self.member_id = ""
        self.generation_id = -1
        self.assignment: list[tuple[str, int]] = []

    def close(self) -> None:
        self.http.close()

    def join(self) -> dict:
        resp = self.http.post(f"/v1/groups/{self.group}/join", json={
            "member_id": self.member_id, "client_id": self.client_id, "topics": self.topics,
            "strategies": ["range"], "session_timeout_ms": self.session_timeout_ms,
            "rebalance_timeout_ms": 60_000,
        })
        assert resp.status_code == 200, resp.text
        doc = resp.json()
        self.member_id, self.generation_id = doc["member_id"], doc["generation_id"]
        return doc

    def sync(self) -> list[tuple[str, int]]:
        resp = self.http.post(f"/v1/groups/{self.group}/sync",
                              json={"generation_id": self.generation_id, "member_id": self.member_id})
        assert resp.status_code == 200, resp.text
        self.assignment = sorted((a["topic"], a["partition"]) for a in resp.json()["assignment"])
        return self.assignment

    def heartbeat(self) -> httpx.Response:
        return self.http.post(f"/v1/groups/{self.group}/heartbeat",
                              json={"generation_id": self.generation_id, "member_id": self.member_id})

    def commit(self, offsets: dict[tuple[str, int], int], generation_id: int | None = None) -> httpx.Response:
        return self.http.post(f"/v1/groups/{self.group}/commit", json={
            "generation_id": self.generation_id if generation_id is None else generation_id,
            "member_id": self.member_id,
            "offsets": [{"topic": t, "partition": p, "offset": o} for (t, p), o in offsets.items()],
        })


def committed_v1(url: str, group: str, partitions: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
    resp = httpx.post(f"{url}/v1/groups/{group}/committed", timeout=60.0,
                      json={"partitions": [{"topic": t, "partition": p} for t, p in partitions]})
    assert resp.status_code == 200, resp.text
    return {(o["topic"], o["partition"]): o["offset"] for o in resp.json()["offsets"]}


def describe_v1(url: str, group: str) -> dict:
    resp = httpx.get(f"{url}/v1/groups/{group}", timeout=60.0)
    assert resp.status_code == 200, resp.text
    return resp.json()


def error_of(resp: httpx.Response) -> tuple[int, int]:
    """(HTTP status, error_code) of an error answer."""
    return resp.status_code, resp.json().get("error_code")
