"""What the object-store tests rely on, checked against the S3 server itself: delta-rs
commits to a bucket with no lock provider nor ``AWS_S3_ALLOW_UNSAFE_RENAME`` (it writes
each commit file with ``If-None-Match: *``), two writers from one stale version both
land, and the server refuses a second put of an existing key under that header."""

from __future__ import annotations

import botocore.exceptions
import pyarrow as pa
import pytest
from deltalake import CommitProperties, DeltaTable, Transaction

from tests.object_store.conftest import Bucket

SCHEMA = pa.schema([("x", pa.int64())])


def test_server_refuses_put_over_an_existing_key_with_if_none_match(bucket: Bucket) -> None:
    client = bucket.server.client()
    client.put_object(Bucket=bucket.name, Key="k", Body=b"first", IfNoneMatch="*")
    with pytest.raises(botocore.exceptions.ClientError) as caught:
        client.put_object(Bucket=bucket.name, Key="k", Body=b"second", IfNoneMatch="*")
    assert caught.value.response["Error"]["Code"] == "PreconditionFailed"
    assert client.get_object(Bucket=bucket.name, Key="k")["Body"].read() == b"first"


def test_delta_commits_from_one_stale_version_both_land(bucket: Bucket) -> None:
    uri = bucket.uri("t")
    DeltaTable.create(uri, SCHEMA)
    first, second = DeltaTable(uri), DeltaTable(uri)  # both at version 0
    for table, app in ((first, "a"), (second, "b")):
        table.create_write_transaction([], mode="append", schema=SCHEMA,
                                       commit_properties=CommitProperties(app_transactions=[Transaction(app, 1)]))
    table = DeltaTable(uri)
    assert table.version() == 2
    assert (table.transaction_version("a"), table.transaction_version("b")) == (1, 1)
    assert sorted(k.rsplit("/", 1)[1] for k in bucket.keys("t/_delta_log/")) == [
        f"{v:020d}.json" for v in range(3)]
