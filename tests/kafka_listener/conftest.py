"""A real broker with a Kafka-protocol listener beside its HTTP one, for real Kafka
clients (confluent-kafka's librdkafka, kafka-python)."""

from __future__ import annotations

import socket
import time
from typing import Iterator

import pytest

from tests.conftest import READY_TIMEOUT_S, SHARED_BROKER_ENV, BrokerProcess, free_port, running


class KafkaBroker(BrokerProcess):
    """A :class:`BrokerProcess` that also listens for Kafka clients on ``kafka_port``."""

    def __init__(self, data_dir, *, env: dict[str, str] | None = None) -> None:
        self.kafka_port = free_port()
        super().__init__(data_dir, env={
            **SHARED_BROKER_ENV,
            "LAKETAIL_LISTENERS": f"KAFKA://127.0.0.1:{self.kafka_port}",
            "LAKETAIL_LISTENER_SECURITY_PROTOCOL_MAP": "KAFKA:PLAINTEXT",
            "LAKETAIL_GROUP_INITIAL_REBALANCE_DELAY_MS": "0",
            **(env or {}),
        })

    def wait_ready(self, timeout_s: float = READY_TIMEOUT_S) -> None:
        """HTTP answers first; the Kafka listener starts just after the broker, so wait
        for its port too (a test connecting at once would be refused)."""
        super().wait_ready(timeout_s)
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.kafka_port), timeout=5).close()
                return
            except OSError:
                if time.monotonic() > deadline or (self.proc is not None and self.proc.poll() is not None):
                    raise AssertionError(f"the Kafka listener on port {self.kafka_port} never opened\n"
                                         f"{self.output()}") from None
                time.sleep(0.05)

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.kafka_port}"


@pytest.fixture(scope="package")
def kafka_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaBroker]:
    yield from running(KafkaBroker(tmp_path_factory.mktemp("kafka-broker") / "data"))


#: ACLs on; a resource without ACLs is open to everyone, so each test restricts only its
#: own resources (never the cluster, which every other test needs).
ACL_ENV = {
    "LAKETAIL_AUTHORIZER_CLASS_NAME": "laketail.security.authorizer.AclAuthorizer",
    "LAKETAIL_ALLOW_EVERYONE_IF_NO_ACL_FOUND": "true",
    "LAKETAIL_ACL_REFRESH_MS": "200",
}


@pytest.fixture(scope="package")
def acl_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaBroker]:
    """A Kafka-listener broker with the ACL authorizer on (one for the package's modules)."""
    yield from running(KafkaBroker(tmp_path_factory.mktemp("kafka-acl") / "data", env=ACL_ENV))
