"""Brokers starting together on one data root agree on the cluster id
(``Catalog._open_cluster``). When two race to create ``_system/cluster``, the one that
loses version 0 appends its own row after it, possibly with an earlier ``created_ms``:
a broker reading before that append saw only the first row, one reading after it took
the row with the smallest ``created_ms``, and the two disagreed (INCONSISTENT_CLUSTER_ID
from a clean-clone CI run, tests/authz/test_cluster_acls.py). Every broker now takes
the first commit's row, whenever it reads."""

from __future__ import annotations

import pyarrow as pa
from deltalake import write_deltalake

from laketail.catalog import CLUSTER_SCHEMA, Catalog


def test_the_cluster_id_is_the_first_commits_whatever_was_appended_after_it(tmp_path) -> None:
    root = tmp_path / "data"
    cluster_uri = f"{root}/_system/cluster"
    first = pa.table({"cluster_id": ["first-committed"], "created_ms": [2_000]}, schema=CLUSTER_SCHEMA)
    write_deltalake(cluster_uri, first, mode="error")
    early = Catalog(root).open()  # a broker that read before the racing append
    racer = pa.table({"cluster_id": ["appended-later"], "created_ms": [1_000]}, schema=CLUSTER_SCHEMA)
    write_deltalake(cluster_uri, racer, mode="append")  # the loser of the race, made earlier
    late = Catalog(root).open()
    assert early == late == "first-committed"


def test_a_fresh_root_gets_one_id_that_every_broker_reads_again(tmp_path) -> None:
    root = tmp_path / "data"
    made = Catalog(root).open()
    assert len(made) == 22  # Kafka's form: URL-safe base64 of a UUID, unpadded
    assert Catalog(root).open() == made
