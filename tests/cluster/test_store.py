"""The cluster's catalog tables (laketail.cluster.store.ClusterStore) on real Delta
tables: broker registrations, the controller claim (a conditional overwrite that only
one of several brokers wins) and the replica rows the registrations round-trip
through, fenced by the controller epoch."""

from __future__ import annotations

import threading

import pytest
from deltalake import DeltaTable

from laketail.cluster.metadata import NO_LEADER, PartitionRegistration
from laketail.cluster.store import ClusterStore, Conflict


@pytest.fixture
def store(tmp_path):
    return ClusterStore(str(tmp_path))


def test_register_broker_inserts_then_replaces_the_row(store):
    assert store.brokers() == {}
    store.register_broker(1, "http://127.0.0.1:9001", "first")
    store.register_broker(2, "http://127.0.0.1:9002", "x")
    store.register_broker(1, "http://127.0.0.1:9011", "second")  # a restart elsewhere
    brokers = store.brokers()
    assert sorted(brokers) == [1, 2]
    assert (brokers[1].url, brokers[1].incarnation, brokers[1].alive) == ("http://127.0.0.1:9011", "second", True)
    assert brokers[2].incarnation == "x"
    assert len(DeltaTable(store.brokers_uri).to_pyarrow_table()) == 2


def test_a_registration_keeps_the_kafka_listeners_a_broker_advertises(store):
    store.register_broker(1, "http://127.0.0.1:9001", "a", endpoints="KAFKA://10.0.0.1:9092")
    store.register_broker(2, "http://127.0.0.1:9002", "b")
    brokers = store.brokers()
    assert (brokers[1].endpoints, brokers[2].endpoints) == ("KAFKA://10.0.0.1:9092", "")


def test_set_alive_changes_only_the_named_brokers(store):
    store.register_broker(1, "u1", "a")
    store.register_broker(2, "u2", "b")
    version = DeltaTable(store.brokers_uri).version()
    store.set_alive({2: False, 9: False})
    assert {b: r.alive for b, r in store.brokers().items()} == {1: True, 2: False}
    store.set_alive({2: False})  # no change: no commit
    assert DeltaTable(store.brokers_uri).version() == version + 1
    store.register_broker(2, "u2", "c")
    assert store.brokers()[2].alive


def test_the_first_claim_gives_epoch_one_and_later_claims_need_the_current_epoch(store):
    assert store.controller() == (NO_LEADER, 0)
    assert store.claim_controller(3, 0) == 1
    assert store.controller() == (3, 1)
    with pytest.raises(Conflict):
        store.claim_controller(4, 0)  # it saw no controller, but broker 3 got there first
    assert store.controller() == (3, 1)
    assert store.claim_controller(4, 1) == 2
    with pytest.raises(Conflict):
        store.claim_controller(3, 1)
    assert store.controller() == (4, 2)


def _race(store_root: str, seen_epoch: int, contenders: int) -> tuple[list[tuple[int, int]], list[BaseException]]:
    wins: list[tuple[int, int]] = []
    errors: list[BaseException] = []
    barrier = threading.Barrier(contenders)

    def claim(broker_id: int) -> None:
        mine = ClusterStore(store_root)  # each broker its own view of the tables
        barrier.wait()
        try:
            wins.append((broker_id, mine.claim_controller(broker_id, seen_epoch)))
        except BaseException as exc:  # noqa: BLE001 - collected and checked below
            errors.append(exc)

    threads = [threading.Thread(target=claim, args=(b,)) for b in range(contenders)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return wins, errors


@pytest.mark.parametrize("existing", [False, True], ids=["first-election", "re-election"])
def test_brokers_claiming_at_once_elect_exactly_one(tmp_path, existing):
    """Three brokers that saw the same epoch claim at the same moment (a whole cluster
    starting together, or the controller dying); a few rounds, since it is a race."""
    for round_ in range(3):
        store = ClusterStore(str(tmp_path / f"round{round_}"))
        seen = store.claim_controller(9, 0) if existing else 0
        wins, errors = _race(store.root, seen, contenders=3)
        assert len(wins) == 1, f"round {round_}: {len(wins)} controllers at epoch {seen + 1}: {wins}, {errors}"
        assert len(errors) == 2 and all(isinstance(e, Conflict) for e in errors), errors
        winner, epoch = wins[0]
        assert epoch == seen + 1
        assert store.controller() == (winner, seen + 1)
        assert len(DeltaTable(store.controller_uri).to_pyarrow_table()) == 1


def test_a_claim_that_read_the_epoch_before_another_broker_claimed_loses(store, monkeypatch):
    """The claim is read-check-write: a broker that read epoch 1, then lost the race
    to another broker's claim, must not overwrite it (the commit conflicts)."""
    store.claim_controller(9, 0)
    slow = ClusterStore(store.root)
    rival = ClusterStore(store.root)
    real_rows = ClusterStore._rows

    def rows_then_rival_claims(self, uri, schema):
        found = real_rows(self, uri, schema)
        if self is slow and uri == slow.controller_uri:
            assert rival.claim_controller(2, 1) == 2
        return found

    monkeypatch.setattr(ClusterStore, "_rows", rows_then_rival_claims)
    with pytest.raises(Conflict):
        slow.claim_controller(1, 1)
    monkeypatch.undo()
    assert store.controller() == (2, 2)


def _registrations() -> dict[tuple[str, int], PartitionRegistration]:
    regs = [
        PartitionRegistration("orders", 0, [1, 2, 3], 1, 4, [1, 2, 3], 7),
        PartitionRegistration("orders", 1, [2, 3, 1], 3, 2, [3, 1], 5),
        PartitionRegistration("orders", 2, [3, 1, 2], NO_LEADER, 6, [3], 9),
        PartitionRegistration("audit", 0, [2], 2, 0, [2], 0),
    ]
    return {(r.topic, r.partition): r for r in regs}


def test_partitions_round_trip_through_the_replica_rows(store):
    epoch = store.claim_controller(1, 0)
    regs = _registrations()
    leos = {("orders", 0, 1): 40, ("orders", 0, 2): 38, ("audit", 0, 2): 5}
    store.write_partitions(regs, leos, epoch)
    assert store.partitions() == regs

    rows = DeltaTable(store.replicas_uri).to_pyarrow_table().to_pylist()
    by_replica = {(r["topic"], r["partition"], r["broker"]): r for r in rows}
    assert len(rows) == 3 + 3 + 3 + 1
    roles = {k: (r["role"], r["in_isr"]) for k, r in by_replica.items() if k[0] == "orders"}
    assert roles == {
        ("orders", 0, 1): ("leader", True), ("orders", 0, 2): ("follower", True), ("orders", 0, 3): ("follower", True),
        ("orders", 1, 2): ("follower", False), ("orders", 1, 3): ("leader", True), ("orders", 1, 1): ("follower", True),
        ("orders", 2, 3): ("offline", True), ("orders", 2, 1): ("offline", False), ("orders", 2, 2): ("offline", False),
    }
    assert by_replica[("orders", 0, 2)]["log_end_offset"] == 38
    assert by_replica[("orders", 0, 3)]["log_end_offset"] == -1
    assert [by_replica[("orders", 1, b)]["replica_index"] for b in (2, 3, 1)] == [0, 1, 2]

    # A later write replaces the rows: a deleted topic's go, a change shows.
    del regs[("audit", 0)]
    regs[("orders", 2)] = PartitionRegistration("orders", 2, [3, 1, 2], 3, 7, [3], 10)
    store.write_partitions(regs, {}, epoch)
    assert store.partitions() == regs


def test_no_partitions_before_the_first_write(store):
    assert store.partitions() == {}


def test_a_deposed_controller_cannot_write_partitions(store):
    old = store.claim_controller(1, 0)
    regs = _registrations()
    store.write_partitions(regs, {}, old)
    new = ClusterStore(store.root).claim_controller(2, old)
    changed = dict(regs)
    changed[("audit", 0)] = PartitionRegistration("audit", 0, [2], NO_LEADER, 1, [2], 1)
    with pytest.raises(Conflict):
        store.write_partitions(changed, {}, old)
    assert store.partitions() == regs
    store.write_partitions(changed, {}, new)
    assert store.partitions() == changed


def test_a_write_that_checked_the_epoch_just_before_a_new_controller_took_over_does_not_land(store, monkeypatch):
    """write_partitions checks the controller epoch (one table) and then overwrites the
    replica rows (another table): the commit only conflicts with changes to the replica
    rows. If a new controller claims (and reads the registrations, as activate() does)
    between the deposed controller's check and its commit, the deposed controller's
    write lands anyway, after the new controller read the state it will build on."""
    old = store.claim_controller(1, 0)
    regs = _registrations()
    store.write_partitions(regs, {}, old)
    deposed = ClusterStore(store.root)
    successor = ClusterStore(store.root)
    seen_by_successor = {}
    real_controller = ClusterStore.controller

    def check_then_successor_takes_over(self):
        found = real_controller(self)
        if self is deposed and not seen_by_successor:
            successor.claim_controller(2, old)
            seen_by_successor.update(successor.partitions())
        return found

    monkeypatch.setattr(ClusterStore, "controller", check_then_successor_takes_over)
    changed = dict(regs)
    changed[("audit", 0)] = PartitionRegistration("audit", 0, [2], NO_LEADER, 1, [2], 1)
    with pytest.raises(Conflict):
        deposed.write_partitions(changed, {}, old)
    monkeypatch.undo()
    assert store.partitions() == seen_by_successor == regs


def test_producer_id_blocks_are_disjoint_even_when_taken_at_once(store):
    """Issue 35 finding 3: producer ids come from durable blocks. Brokers taking blocks
    concurrently each get their own, and a later block never reaches back below one
    already taken, nor below the floor the caller asks for."""
    blocks: list[tuple[int, int]] = []
    errors: list[BaseException] = []

    def take(broker: int) -> None:
        try:
            for _ in range(3):
                blocks.append(store.allocate_producer_ids(broker, 10))
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=take, args=(b,)) for b in (1, 2, 3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    ids = [pid for first, end in blocks for pid in range(first, end)]
    assert len(ids) == 90 and len(set(ids)) == 90
    assert store.allocate_producer_ids(1, 10, at_least=5) == (90, 100)  # the floor never goes back
    assert store.allocate_producer_ids(1, 10, at_least=500) == (500, 510)
    assert ClusterStore(store.root).allocate_producer_ids(2, 1) == (510, 511)  # read back from the table
