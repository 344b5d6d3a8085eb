"""State brokers share lives in the bucket: ACLs and SCRAM credentials written through one
store are read by another on the same ``s3://`` root (a second broker), and nothing is
made in the working directory."""

from __future__ import annotations

from laketail.security import scram
from laketail.security.acl import AclBinding
from laketail.security.acl_store import AclStore
from laketail.security.credentials import CredentialStore
from tests.object_store.conftest import Bucket


def test_acls_and_credentials_written_by_one_broker_are_read_by_another(bucket: Bucket, tmp_path,
                                                                         monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    root = bucket.uri("shared")
    binding = AclBinding.of("TOPIC", "orders", "LITERAL", "User:alice", "*", "READ", "ALLOW")
    writer = AclStore(root)
    writer.open()
    writer.mutate(lambda current: current | {binding})
    reader = AclStore(root)
    reader.open()
    assert reader.bindings == frozenset({binding})

    credential = scram.make_credential("pencil", "SCRAM-SHA-512", 4096)
    CredentialStore(root).upsert("alice", credential)
    assert CredentialStore(root).load() == {"alice": {"SCRAM-SHA-512": credential}}

    assert any(k.startswith("shared/_system/acls/_delta_log/") for k in bucket.keys("shared/"))
    assert any(k.startswith("shared/_system/credentials/_delta_log/") for k in bucket.keys("shared/"))
    assert list(tmp_path.iterdir()) == []
