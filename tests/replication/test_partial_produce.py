"""A produce whose records span a partition that fails and one that succeeds is
answered per record (issue 35, item 4).

Before: the whole request got ``503 LEADER_NOT_AVAILABLE`` while the records for the
other partitions were written, so a client retried them all and made duplicates.
Confluent's v2 answer has ``error_code`` and ``error`` per record in ``offsets[i]``
(kafka-rest ``AbstractProduceAction.produceResultsToResponse``: a failed future
becomes ``PartitionOffset(null, null, errorCode, message)``, 50003 for a retriable
Kafka error); Confluent's v3 answers each record of a batch with its own report.

Here: three brokers, a topic with one replica per partition; the broker leading
partition ``dead`` is killed -9 and the cluster sees the partition offline; then one
v2 request (and one v3 batch, and one Arrow stream) carries a record for ``dead`` and one for ``alive``.
"""

from __future__ import annotations

import base64

import httpx
import orjson
import pyarrow as pa
import pytest

from .support import Cluster, b64

pytestmark = [pytest.mark.integration, pytest.mark.fault]

BINARY_V2 = "application/vnd.kafka.binary.v2+json"
V2 = "application/vnd.kafka.v2+json"
ARROW = "application/vnd.apache.arrow.stream"


def test_records_of_a_failed_partition_are_answered_per_record_and_the_rest_written(cluster: Cluster, unique) -> None:
    topic = cluster.make_topic(unique("partial"), 3, 1)
    leaders = {p: cluster.leader(topic, p) for p in range(3)}
    dead = 0
    victim = leaders[dead]
    alive = next(p for p, b in leaders.items() if b != victim)
    via = next(b for b in cluster.live() if b.broker_id != victim)
    cluster[victim].kill9()
    cluster.wait_view(topic, dead, lambda state: state["leader"] == -1 or state["leader"] is None,
                      "offline after its only replica was killed", via=[via])

    resp = httpx.post(f"{via.url}/topics/{topic}", json={"records": [
        {"value": b64("to-dead"), "partition": dead}, {"value": b64("to-alive"), "partition": alive},
    ]}, headers={"Content-Type": BINARY_V2, "Accept": V2}, timeout=120.0)
    assert resp.status_code == 200, resp.text
    failed, written = resp.json()["offsets"]
    assert failed["offset"] is None and failed["error_code"] == 50003, failed  # retriable, as kafka-rest
    assert failed["error"].startswith("LEADER_NOT_AVAILABLE"), failed
    assert written == {"partition": alive, "offset": 0, "error_code": None, "error": None}

    # v3: one report per record of the batch, the failed one an error report
    v3 = httpx.post(f"{via.url}/v3/clusters/{cluster_id(via)}/topics/{topic}/records",
                    content=orjson.dumps({"partition_id": dead, "value": {"data": b64("v3-dead")}})
                    + orjson.dumps({"partition_id": alive, "value": {"data": b64("v3-alive")}}),
                    headers={"Content-Type": "application/json"}, timeout=120.0)
    assert v3.status_code == 200, v3.text
    reports = [orjson.loads(line) for line in v3.content.splitlines() if line.strip()]
    assert reports[0]["error_code"] == 50303, reports  # LeaderNotAvailable's code
    assert reports[0]["message"].startswith("LEADER_NOT_AVAILABLE"), reports
    assert reports[1]["error_code"] == 200 and reports[1]["offset"] == 1, reports

    # Arrow across partitions: the written records summarised per partition, and per
    # record what was written or why not. Before: 503 LEADER_NOT_AVAILABLE for the whole
    # request, while the record for the live partition was written.
    resp = httpx.post(f"{via.url}/v1/topics/{topic}/records", content=arrow_stream(
        ["arrow-dead", "arrow-alive"], [dead, alive]), headers={"Content-Type": ARROW}, timeout=120.0)
    assert resp.status_code == 200, resp.text
    answer = resp.json()
    assert answer["offsets"] == [{"partition": alive, "base_offset": 2, "last_offset": 2, "count": 1}], answer
    failed, written = answer["records"]
    assert failed["partition"] == dead and failed["offset"] is None and failed["error_code"] == 50003, failed
    assert failed["error"].startswith("LEADER_NOT_AVAILABLE"), failed
    assert written == {"partition": alive, "offset": 2, "error_code": None, "error": None}

    # the written records are there once each
    values = [base64.b64decode(r["value"]).decode()
              for r in httpx.get(f"{via.url}/topics/{topic}/partitions/{alive}/records",
                                 params={"offset": 0}, headers={"Accept": BINARY_V2}, timeout=60.0).json()]
    assert values == ["to-alive", "v3-alive", "arrow-alive"]


def arrow_stream(values: list[str], partitions: list[int]) -> bytes:
    table = pa.table({"value": pa.array([v.encode() for v in values], pa.binary()),
                      "partition": pa.array(partitions, pa.int32())})
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


def cluster_id(broker) -> str:
    resp = httpx.get(f"{broker.url}/v3/clusters", timeout=30.0)
    assert resp.status_code == 200, resp.text
    return resp.json()["data"][0]["cluster_id"]
