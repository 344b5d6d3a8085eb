"""A broker whose data root is ``s3://bucket/prefix`` (moto on 127.0.0.1): topic tables,
data files and Delta logs alike, land in the bucket, any reader of the bucket sees the
records, hot segments stay on the local disk, and a broker that comes back with its hot
logs gone (a new host) serves the records from the table in the bucket."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
from deltalake import DeltaTable

from tests.integration.support import TIER_DEADLINE_S, decode_binary, wait_until
from tests.object_store.conftest import Bucket, local_s3_folders

pytestmark = pytest.mark.integration

PARTITIONS = 2
PER_PARTITION = 15
GUIDE = Path(__file__).resolve().parents[2] / "docs" / "object-storage.md"


def readme_example(root: str, options: dict[str, str]) -> dict:
    """Run the object-storage guide's example against ``root`` with ``options`` in place of
    its placeholders; its variables."""
    text = GUIDE.read_text()
    code = re.search(r"<!-- object-store-example -->\n```python\n(.*?)```", text, re.S)
    assert code, "docs/object-storage.md has no object-store example"
    source = code.group(1).replace("s3://lake/cluster-a", root)
    source = re.sub(r"options = \{.*?\}\n", f"options = {options!r}\n", source, flags=re.S)
    scope: dict = {}
    exec(compile(source, "docs/object-storage.md", "exec"), scope)
    return scope


def _table_rows(uri: str, storage_options: dict[str, str]) -> dict[tuple[int, int], bytes]:
    """``(partition, offset) -> value`` of every row of the table, read as any outside
    reader of the bucket would; a row seen twice fails the test."""
    out: dict[tuple[int, int], bytes] = {}
    for row in DeltaTable(uri, storage_options=storage_options).to_pyarrow_table(
            columns=["partition", "offset", "value"]).to_pylist():
        key = (row["partition"], row["offset"])
        assert key not in out, f"row {key} twice in the table"
        out[key] = row["value"]
    return out


def test_topic_on_s3_reaches_the_bucket_and_is_served_from_it_after_a_move(bucket: Bucket, s3_broker_factory):
    root = bucket.uri("cluster-a")
    broker = s3_broker_factory(root)
    rest = broker.rest
    topic = "orders"
    resp = rest.create_topic(topic, PARTITIONS, configs={"table.flush.interval.ms": "100"})
    assert resp.status_code in (200, 201), resp.text

    produced: dict[tuple[int, int], bytes] = {}
    for i in range(PER_PARTITION):
        for p in range(PARTITIONS):
            value = f"order-{p}-{i}".encode()
            resp = rest.produce_binary(topic, [{"key": f"k{i}".encode(), "value": value}], partition=p)
            assert resp.status_code == 200, resp.text
            offset = resp.json()["offsets"][0]["offset"]
            produced[(p, offset)] = value
    assert sorted(produced) == [(p, o) for p in range(PARTITIONS) for o in range(PER_PARTITION)]

    # Read back through delta-rs with the bucket's settings given explicitly, as an outside reader does.
    options = {"AWS_ENDPOINT_URL": bucket.server.endpoint, "AWS_ALLOW_HTTP": "true", "AWS_REGION": "us-east-1",
               "AWS_ACCESS_KEY_ID": bucket.server.env["AWS_ACCESS_KEY_ID"],
               "AWS_SECRET_ACCESS_KEY": bucket.server.env["AWS_SECRET_ACCESS_KEY"]}
    uri = broker.table_uri(topic)
    rows = wait_until(lambda: (lambda r: r if len(r) == len(produced) else None)(_table_rows(uri, options)),
                      f"{len(produced)} records in {uri}", TIER_DEADLINE_S, 0.2)
    assert rows == produced
    orders = readme_example(root, options)["orders"]
    assert sorted(zip(orders.column("partition").to_pylist(), orders.column("offset").to_pylist(),
                      orders.column("value").to_pylist())) == sorted((p, o, v) for (p, o), v in produced.items())
    data_keys = [k for k in bucket.keys(f"cluster-a/topics/{topic}/") if k.endswith(".parquet")]
    assert {k.split("/")[3] for k in data_keys} == {f"partition={p}" for p in range(PARTITIONS)}
    assert bucket.keys("cluster-a/_system/topics/_delta_log/"), "the catalog is not in the bucket"

    # The broker moves to a new host: same bucket, its local hot logs gone.
    broker.stop()
    hot = broker.run_dir / "laketail-logs"
    assert (hot / "broker-0" / f"{topic}-0").is_dir(), f"hot segments were not kept under {hot}"
    shutil.rmtree(hot)
    broker.start()
    fetched = {}
    for p in range(PARTITIONS):
        for entry in broker.rest.fetch_range(topic, p, 0, PER_PARTITION):
            record = decode_binary(entry)
            fetched[(p, record["offset"])] = record["value"]
    assert fetched == produced
    assert broker.rest.offsets(topic, 0) == (0, PER_PARTITION)

    assert local_s3_folders(broker.run_dir, broker.data_dir) == []
