"""The registry on a three-broker cluster: one registry (on the controller), whichever
broker is asked, and its state replicated: after the controller is killed -9, the new
controller answers the same subjects and ids, rebuilt from ``__schemas``."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from tests.replication.support import Cluster, wait_until

pytestmark = pytest.mark.integration

SCHEMA = json.dumps({"type": "record", "name": "R", "fields": [{"name": "a", "type": "string"}]})


def controller_of(cluster: Cluster) -> int:
    broker = cluster.live()[0]
    cid = cluster.get(broker, "/v3/clusters").json()["data"][0]
    return int(cid["controller"]["related"].rsplit("/", 1)[1])


def latest(url: str, subject: str) -> dict | None:
    try:
        resp = httpx.get(f"{url}/subjects/{subject}/versions/latest", timeout=60.0)
    except httpx.HTTPError:
        return None
    return resp.json() if resp.status_code == 200 else None


@pytest.mark.timeout(600)
@pytest.mark.fault
def test_one_registry_for_the_cluster_surviving_its_controller(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path).start()
    try:
        controller = controller_of(cluster)
        a, b = cluster.others(controller)
        first = json.dumps({"type": "record", "name": "First", "fields": []})
        assert httpx.post(f"{a.url}/subjects/first-value/versions", json={"schema": first},
                          timeout=60.0).json() == {"id": 1}
        resp = httpx.post(f"{a.url}/subjects/orders-value/versions", json={"schema": SCHEMA}, timeout=60.0)
        assert resp.status_code == 200, resp.text
        schema_id = resp.json()["id"]
        other = httpx.post(f"{b.url}/subjects/copy-value/versions", json={"schema": SCHEMA}, timeout=60.0)
        # one registry: the same id through another broker (a registry of b's own would say 1)
        assert schema_id == 2 and other.json() == {"id": schema_id}
        seen = latest(b.url, "orders-value")
        assert seen is not None and (seen["version"], seen["id"]) == (1, schema_id)

        cluster[controller].kill9()
        assert wait_until(lambda: controller_of(cluster) != controller, "a new controller")
        back = wait_until(lambda: latest(a.url, "orders-value"), "the subject through the new controller")
        assert (back["version"], back["id"]) == (1, schema_id)
        assert httpx.get(f"{b.url}/schemas/ids/{schema_id}/subjects", timeout=60.0).json() == [
            "copy-value", "orders-value"]
    finally:
        cluster.close()


@pytest.mark.timeout(600)
def test_schemad_produce_and_validation_through_a_broker_without_the_registry(tmp_path: Path) -> None:
    """A broker other than the controller registers through it, resolves ids in its copy
    of __schemas, and validates a validating topic's records against that copy."""
    cluster = Cluster(tmp_path).start()
    try:
        controller = controller_of(cluster)
        via = cluster.others(controller)[0]
        topic = cluster.make_topic("checked", 1, 3, {"confluent.value.schema.validation": "true"})
        produce = httpx.post(f"{via.url}/topics/{topic}", timeout=60.0, content=json.dumps({
            "value_schema": SCHEMA, "records": [{"value": {"a": "x"}}]}),
            headers={"Content-Type": "application/vnd.kafka.avro.v2+json"})
        assert produce.status_code == 200, produce.text
        schema_id = produce.json()["value_schema_id"]
        assert latest(cluster[controller].url, f"{topic}-value")["id"] == schema_id  # registered there
        by_id = httpx.post(f"{via.url}/topics/{topic}", timeout=60.0, content=json.dumps({
            "value_schema_id": schema_id, "records": [{"value": {"a": "y"}}]}),
            headers={"Content-Type": "application/vnd.kafka.avro.v2+json"})
        assert by_id.status_code == 200, by_id.text
        raw = httpx.post(f"{via.url}/topics/{topic}", timeout=60.0,
                         json={"records": [{"value": "cGxhaW4="}]},
                         headers={"Content-Type": "application/vnd.kafka.binary.v2+json"})
        assert (raw.status_code, raw.json()["error_code"]) == (422, 42206), raw.text
        end = httpx.get(f"{via.url}/topics/{topic}/partitions/0/offsets", timeout=60.0).json()["end_offset"]
        assert end == 2
    finally:
        cluster.close()
