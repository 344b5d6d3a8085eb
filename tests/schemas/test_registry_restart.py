"""The registry's state survives a clean stop (SIGTERM) and a crash (kill -9): subjects,
versions (soft-deleted ones too), ids, compatibility configs and modes are replayed
from ``__schemas``, and ids keep growing after a restart."""

from __future__ import annotations

import json

import httpx
import pytest

pytestmark = pytest.mark.fault


def schema(*fields: str) -> str:
    return json.dumps({"type": "record", "name": "R", "fields": [
        {"name": f, "type": "string", "default": ""} for f in fields]})


def snapshot(url: str) -> dict:
    with httpx.Client(base_url=url, timeout=60) as http:
        subjects = http.get("/subjects", params={"deleted": "true"}).json()
        versions = {s: http.get(f"/subjects/{s}/versions", params={"deleted": "true"}).json() for s in subjects}
        live = {s: http.get(f"/subjects/{s}/versions").json() for s in subjects if s != "gone"}
        ids = {f"{s}/{v}": http.get(f"/subjects/{s}/versions/{v}", params={"deleted": "true"}).json()
               for s, vs in versions.items() for v in vs}
        return {
            "subjects": subjects, "versions": versions, "live": live, "ids": ids,
            "config": http.get("/config").json(), "orders_config": http.get("/config/orders-value").json(),
            "mode": http.get("/mode/frozen").json(),
            "by_id": http.get(f"/schemas/ids/{ids['orders-value/1']['id']}").json(),
        }


def test_registry_survives_sigterm_and_kill9(broker_factory) -> None:
    node = broker_factory()
    with httpx.Client(base_url=node.url, timeout=60) as http:
        def register(subject: str, text: str) -> int:
            resp = http.post(f"/subjects/{subject}/versions", json={"schema": text})
            assert resp.status_code == 200, resp.text
            return resp.json()["id"]

        register("orders-value", schema("a"))
        register("orders-value", schema("a", "b"))
        register("orders-value", schema("a", "b", "c"))
        register("other-value", schema("a", "b"))  # the same text: the same id as orders v2
        register("gone", schema("z"))
        assert http.delete("/subjects/orders-value/versions/1").status_code == 200
        assert http.delete("/subjects/gone").status_code == 200
        assert http.put("/config", json={"compatibility": "FULL"}).status_code == 200
        assert http.put("/config/orders-value", json={"compatibility": "NONE"}).status_code == 200
        assert http.put("/mode/frozen", json={"mode": "READONLY"}).status_code == 200
    before = snapshot(node.url)
    assert before["ids"]["orders-value/2"]["id"] == before["ids"]["other-value/1"]["id"]
    assert before["live"]["orders-value"] == [2, 3]

    node.stop()
    node.start()
    assert snapshot(node.url) == before

    node.kill9()
    node.start()
    assert snapshot(node.url) == before
    with httpx.Client(base_url=node.url, timeout=60) as http:
        fresh = http.post("/subjects/new-value/versions", json={"schema": schema("n")}).json()["id"]
    assert fresh > max(v["id"] for v in before["ids"].values())
