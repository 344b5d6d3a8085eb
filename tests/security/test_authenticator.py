"""The Authenticator over a real credentials table (a Delta table in a temp dir): the
verified-credential cache keeps PBKDF2 off the hot path, and never outlives the
credential it verified."""

from __future__ import annotations

import asyncio
import base64
import time

import pytest

from laketail.config import BrokerSettings
from laketail.errors import SaslAuthenticationFailed
from laketail.security import authenticator as authn_module
from laketail.security import scram
from laketail.security.authenticator import Authenticator
from laketail.security.credentials import CredentialStore
from laketail.security.principal import KafkaPrincipal


def _basic(user: str, password: str) -> str:
    return base64.b64encode(f"{user}:{password}".encode()).decode()


class CountingVerify:
    """Counts PBKDF2 checks (the real scram.verify does the work)."""

    def __init__(self) -> None:
        self.calls = 0
        self.real = scram.verify

    def __call__(self, credential, password):
        self.calls += 1
        return self.real(credential, password)


@pytest.fixture
def setup(tmp_path, monkeypatch):
    store = CredentialStore(str(tmp_path))
    store.upsert("alice", scram.make_credential("pw1", "SCRAM-SHA-256"))
    counting = CountingVerify()
    monkeypatch.setattr(authn_module.scram, "verify", counting)
    monkeypatch.setattr(authn_module, "RELOAD_S", 0.0)  # re-check the table's version at every request
    return Authenticator(BrokerSettings(data=str(tmp_path)), store), store, counting


def test_pbkdf2_runs_once_per_user_and_password(setup):
    auth, _, counting = setup

    async def many() -> list[KafkaPrincipal]:
        return [await auth.basic(_basic("alice", "pw1")) for _ in range(50)]

    assert set(asyncio.run(many())) == {KafkaPrincipal.user("alice")}
    assert counting.calls == 1


def test_wrong_passwords_are_never_cached_as_right(setup):
    auth, _, counting = setup

    async def run() -> None:
        await auth.basic(_basic("alice", "pw1"))
        for _ in range(3):
            with pytest.raises(SaslAuthenticationFailed):
                await auth.basic(_basic("alice", "pw2"))

    asyncio.run(run())
    assert counting.calls == 4


def test_a_changed_password_invalidates_the_cached_one(setup):
    auth, store, _ = setup

    async def run() -> None:
        assert await auth.basic(_basic("alice", "pw1")) == KafkaPrincipal.user("alice")
        store.upsert("alice", scram.make_credential("pw2", "SCRAM-SHA-256"))
        deadline = time.monotonic() + 30
        while True:  # the reload runs in the background; poll until it has landed
            try:
                await auth.basic(_basic("alice", "pw1"))
            except SaslAuthenticationFailed:
                break
            assert time.monotonic() < deadline, "the old password stayed valid"
            await asyncio.sleep(0.05)
        assert await auth.basic(_basic("alice", "pw2")) == KafkaPrincipal.user("alice")

    asyncio.run(run())


def test_mechanisms_not_enabled_are_not_accepted(tmp_path):
    store = CredentialStore(str(tmp_path))
    store.upsert("bob", scram.make_credential("pw", "SCRAM-SHA-512"))
    only_256 = Authenticator(BrokerSettings(data=str(tmp_path), sasl_enabled_mechanisms="SCRAM-SHA-256"), store)
    with pytest.raises(SaslAuthenticationFailed):
        asyncio.run(only_256.basic(_basic("bob", "pw")))
