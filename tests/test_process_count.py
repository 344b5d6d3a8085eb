"""How many request processes ``laketail serve`` runs when not told (issue 41): one per
usable core, read from fake cgroup files in a temporary directory (the real processes
are under test in tests/fault/test_request_processes.py)."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import pytest

from laketail.config import BrokerSettings
from laketail.errors import InvalidConfig
from laketail.request_processes import AUTO, check, decide, usable_cores


def _cgroups(tmp_path: Path, proc: str, files: dict[str, str]) -> tuple[Path, Path]:
    root = tmp_path / "cgroup"
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    root.mkdir(exist_ok=True)
    proc_cgroup = tmp_path / "proc-self-cgroup"
    proc_cgroup.write_text(proc)
    return root, proc_cgroup


def test_without_a_quota_every_cpu_of_the_affinity_mask_counts(tmp_path):
    root, proc = _cgroups(tmp_path, "0::/\n", {"cpu.max": "max 100000\n"})
    assert usable_cores(root, proc, affinity=8) == 8
    assert usable_cores(root, tmp_path / "absent", affinity=3) == 3  # no cgroup file at all


def test_a_cgroup_v2_quota_caps_the_cores_rounded_up(tmp_path):
    root, proc = _cgroups(tmp_path, "0::/\n", {"cpu.max": "150000 100000\n"})
    assert usable_cores(root, proc, affinity=8) == 2  # docker run --cpus 1.5
    root, proc = _cgroups(tmp_path / "b", "0::/\n", {"cpu.max": "50000 100000\n"})
    assert usable_cores(root, proc, affinity=8) == 1
    root, proc = _cgroups(tmp_path / "c", "0::/\n", {"cpu.max": "1600000 100000\n"})
    assert usable_cores(root, proc, affinity=4) == 4  # the affinity mask is tighter


def test_the_tightest_quota_over_the_cgroup_and_its_ancestors_wins(tmp_path):
    root, proc = _cgroups(tmp_path, "0::/kubepods/pod1/ctr\n", {
        "kubepods/cpu.max": "300000 100000",
        "kubepods/pod1/cpu.max": "200000 100000",
        "kubepods/pod1/ctr/cpu.max": "max 100000",
    })
    assert usable_cores(root, proc, affinity=16) == 2


def test_a_cgroup_v1_quota_counts_too(tmp_path):
    root, proc = _cgroups(tmp_path, "4:memory:/x\n2:cpu,cpuacct:/docker/abc\n", {
        "cpu/docker/abc/cpu.cfs_quota_us": "250000\n",
        "cpu/docker/abc/cpu.cfs_period_us": "100000\n",
    })
    assert usable_cores(root, proc, affinity=8) == 3
    root, proc = _cgroups(tmp_path / "b", "2:cpu,cpuacct:/\n", {
        "cpu/cpu.cfs_quota_us": "-1\n", "cpu/cpu.cfs_period_us": "100000\n"})
    assert usable_cores(root, proc, affinity=8) == 8


def test_unreadable_cgroup_files_leave_the_affinity_mask(tmp_path):
    root, proc = _cgroups(tmp_path, "garbage\n0::/\n", {"cpu.max": "lots\n"})
    assert usable_cores(root, proc, affinity=6) == 6


def test_this_machines_count_is_at_most_its_affinity_mask():
    assert 1 <= usable_cores() <= len(os.sched_getaffinity(0))


def test_the_default_is_one_process_per_core_and_a_set_number_stands():
    settings = BrokerSettings(port=8082)
    assert settings.request_processes == AUTO
    decided, why = decide(settings, cores=4)
    assert decided.request_processes == 4 and "usable core" in why
    assert decide(settings, cores=500)[0].request_processes == 64
    decided, _ = decide(BrokerSettings(port=8082, request_processes=1), cores=4)
    assert decided.request_processes == 1


def test_not_set_it_is_one_process_where_several_cannot_share_the_listeners():
    decided, why = decide(BrokerSettings(port=0), cores=4)
    assert decided.request_processes == 1 and "port 0" in why
    kafka = BrokerSettings(port=8082, listeners="KAFKA://127.0.0.1:9092",
                           listener_security_protocol_map="KAFKA:PLAINTEXT")
    assert decide(kafka, cores=4)[0].request_processes == 4  # every process serves the Kafka listener too
    decided, why = decide(dataclasses.replace(kafka, listeners="KAFKA://127.0.0.1:0"), cores=4)
    assert decided.request_processes == 1 and "port 0" in why
    for other_hosts in ({"advertised_url": "https://broker1:8082"}, {"inter_broker_listener_name": "BROKER"},
                        {"advertised_listeners": "BROKER://broker1:9093"}):
        decided, why = decide(BrokerSettings(port=8082, **other_hosts), cores=4)
        assert decided.request_processes == 1 and "other hosts" in why


def test_several_processes_asked_for_on_port_0_are_refused_with_the_reason():
    with pytest.raises(InvalidConfig, match="port 0 would give each its own"):
        check(BrokerSettings(port=0, request_processes=2))


def test_the_processes_of_consecutive_brokers_never_share_an_id():
    from laketail.request_processes import PROCESS_ID_STRIDE, process_settings

    ids = set()
    for broker_id in (0, 1, 2):
        group = BrokerSettings(port=8082, broker_id=broker_id, request_processes=3, data="/tmp/d")
        members = {process_settings(group, k).broker_id for k in range(3)}
        assert members == {broker_id + k * PROCESS_ID_STRIDE for k in range(3)}
        assert set(process_settings(group, 1).request_process_log_dirs) == members
        ids |= members
    assert len(ids) == 9
    for processes in (2, 1):  # ids from the stride up are members, shown as their broker's
        with pytest.raises(InvalidConfig, match=f"below {PROCESS_ID_STRIDE}"):
            check(BrokerSettings(port=8082, broker_id=PROCESS_ID_STRIDE + 5, request_processes=processes))
    check(BrokerSettings(port=8082, broker_id=PROCESS_ID_STRIDE - 1, request_processes=1))


def test_a_member_is_shown_as_its_broker():
    """The one outward mapping: members of broker 7 are broker 7, each broker once, in
    order; no leader (-1) stays -1."""
    from laketail.request_processes import PROCESS_ID_STRIDE, broker_id_of, broker_ids_of, process_id

    assert [broker_id_of(process_id(7, k)) for k in range(3)] == [7, 7, 7]
    assert broker_id_of(-1) == -1
    assert broker_ids_of([process_id(2, 1), 0, 2, PROCESS_ID_STRIDE, 1]) == [2, 0, 1]


def test_the_processes_of_a_broker_with_only_a_kafka_listener_keep_http_on_its_port():
    """``make run``'s layout (only a Kafka listener named): each process serves HTTP on
    host:port and the Kafka listener as configured, and reaches its siblings on a
    loopback listener of its own."""
    from laketail.request_processes import process_settings
    from laketail.security.listeners import listener_plan

    group = BrokerSettings(port=8082, request_processes=2, data="/tmp/d", listeners="KAFKA://127.0.0.1:9092",
                           listener_security_protocol_map="KAFKA:PLAINTEXT")
    plan = listener_plan(process_settings(group, 1))
    assert [(k.name, k.host, k.port) for k in plan.kafka] == [("KAFKA", "127.0.0.1", 9092)]
    client, peer = plan.listeners
    assert (client.host, client.port, client.inter_broker) == ("127.0.0.1", 8082, False)
    assert peer.host == "127.0.0.1" and peer.inter_broker and peer.port != 8082
