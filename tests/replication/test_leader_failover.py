"""acks=all with replication factor 3 and min.insync.replicas 2 loses nothing while
partition leaders are killed -9 again and again under load.

Producer threads send v2 binary produce requests (acks=all, unique values, one
partition per request) round robin over the brokers that are alive, and record every
answer in a :class:`~.history.History`. Meanwhile the leader of a partition is killed
-9; within the broker session timeout plus a few seconds some live broker must report
a different live leader for every partition it led; acks=all must go on with the two
replicas left; the killed broker is restarted and must come back into every ISR before
the next kill. At the end every partition is read back from offset 0 and held against
the history: every acknowledged value exactly once at its acknowledged offset, dense
offsets, no duplicates, nothing that was never sent, nothing that was refused.
"""

from __future__ import annotations

import threading
import time

import httpx
import pytest

from .history import History, check, describe
from .support import NOT_ENOUGH_REPLICAS, SETTLE_S, Cluster, b64, error_code, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.fault]

PARTITIONS = 2
PRODUCERS = 3
KILLS = 3
#: Acknowledgements to wait for before the first kill, with one broker down, and after
#: the restart: each phase must make progress, not just survive.
PROGRESS = 20


class Producer(threading.Thread):
    """Sends acks=all produce requests round robin over the live brokers until told to
    stop; a connection error or an error answer is an unknown outcome (the values are
    never retried: the next request carries new ones), NOT_ENOUGH_REPLICAS a refusal."""

    def __init__(self, cluster: Cluster, topic: str, history: History, name: str) -> None:
        super().__init__(daemon=True, name=name)
        self.cluster, self.topic, self.history = cluster, topic, history
        self.halt = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            with httpx.Client(timeout=60.0) as http:
                self._loop(http)
        except BaseException as exc:  # reported by the test, not lost in the thread
            self.error = exc

    def _loop(self, http: httpx.Client) -> None:
        i = 0
        while not self.halt.is_set():
            i += 1
            live = self.cluster.live()
            if not live:
                time.sleep(0.05)
                continue
            via = live[i % len(live)]
            partition = i % PARTITIONS
            values = [f"{self.name}-{i}-{j}" for j in range(1 + i % 3)]
            self.history.invoke(partition, values)
            try:
                resp = http.post(
                    f"{via.url}/topics/{self.topic}/partitions/{partition}",
                    json={"records": [{"value": b64(v)} for v in values]},
                    params={"acks": "all"},
                    headers={"Content-Type": "application/vnd.kafka.binary.v2+json"},
                )
            except httpx.HTTPError as exc:
                self.history.unknown(values, type(exc).__name__)
                time.sleep(0.05)
                continue
            self._record(partition, values, resp)

    def _record(self, partition: int, values: list[str], resp: httpx.Response) -> None:
        if resp.status_code != 200:
            code = error_code(resp)
            detail = f"HTTP {resp.status_code} {code}"
            if code == NOT_ENOUGH_REPLICAS:
                self.history.failed(values, detail)
            else:
                self.history.unknown(values, detail)
            time.sleep(0.05)
            return
        offsets = resp.json()["offsets"]
        assert len(offsets) == len(values), resp.text
        for value, entry in zip(values, offsets):
            if entry.get("error_code") is None and entry.get("offset") is not None:
                self.history.ok(value, entry["partition"], entry["offset"])
            else:
                self.history.unknown([value], f"record error {entry.get('error_code')}")


def _wait_progress(history: History, producers: list[Producer], what: str) -> None:
    target = history.acked_count() + PROGRESS

    def progressed() -> bool:
        for p in producers:
            assert p.error is None, f"producer {p.name} crashed: {p.error!r}"
        return history.acked_count() >= target

    wait_until(progressed, f"{PROGRESS} more acks=all acknowledgements {what} ({history.summary()})", SETTLE_S)


@pytest.mark.timeout(600)
def test_acks_all_keeps_every_acknowledged_record_through_repeated_leader_kills(cluster, unique):
    topic = cluster.make_topic(unique("failover"), PARTITIONS, 3, {"min.insync.replicas": "2"})
    history = History()
    producers = [Producer(cluster, topic, history, f"w{n}") for n in range(PRODUCERS)]
    for p in producers:
        p.start()
    elections = []
    try:
        _wait_progress(history, producers, "before the first kill")
        for round_ in range(KILLS):
            view = cluster.partitions(topic, cluster.live()[round_ % 3])
            victim = view[round_ % PARTITIONS]["leader"]
            led = [p for p, part in view.items() if part["leader"] == victim]
            cluster[victim].kill9()
            killed_at = time.monotonic()
            new = cluster.wait_new_leaders(topic, led, victim, killed_at)
            elections.append((victim, new, round(time.monotonic() - killed_at, 1)))

            _wait_progress(history, producers, f"with broker {victim} down (round {round_})")
            cluster[victim].restart()
            cluster.wait_healthy(topic, f"after broker {victim} restarted (round {round_})")
            _wait_progress(history, producers, f"after broker {victim} rejoined (round {round_})")
    finally:
        for p in producers:
            p.halt.set()
        for p in producers:
            p.join(90)
    assert not any(p.is_alive() for p in producers), "a producer is stuck in a request"
    for p in producers:
        assert p.error is None, f"producer {p.name} crashed: {p.error!r}"

    cluster.wait_healthy(topic, "at the end")
    reader = cluster.live()[-1]
    logs, ends = cluster.read_all(topic, list(range(PARTITIONS)), reader)
    problems = check(history, logs, ends)
    assert not problems, describe(problems, history) + f"\nelections (killed, new leaders, s): {elections}"
    print(f"elections (killed, new leaders, s): {elections}; history: {history.summary()}; end offsets {ends}")
