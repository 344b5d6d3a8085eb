"""A real broker with a Kafka-protocol listener beside its HTTP one, for real Kafka
clients (confluent-kafka's librdkafka, kafka-python)."""

from __future__ import annotations

from typing import Iterator

import pytest

from tests.conftest import SHARED_BROKER_ENV, BrokerProcess, free_port


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

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.kafka_port}"


@pytest.fixture(scope="module")
def kafka_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaBroker]:
    proc = KafkaBroker(tmp_path_factory.mktemp("kafka-broker") / "data")
    try:
        proc.start()
        yield proc
    finally:
        proc.stop()
