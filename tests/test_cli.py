"""The ``laketail`` command against a real broker: every command runs as its own
process (``python -m laketail.cli``), as a user would run it, and talks to the
conftest's ``laketail serve`` subprocess on 127.0.0.1.

What is checked is the outcome: records produced with the command come back through
the command (and through the REST API), admin changes show up in ``describe``,
failures exit non-zero with ``error: <message>`` on stderr.
"""

from __future__ import annotations

import base64
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest
from conftest import free_port

pytestmark = pytest.mark.integration

#: Failure bound for one command (a broken broker must not hang the suite).
COMMAND_TIMEOUT_S = 120.0


def _env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAKETAIL_")}
    env["PYTHONUNBUFFERED"] = "1"
    env["LAKETAIL_REQUEST_PROCESSES"] = "1"  # not one per usable core
    env.update(extra or {})
    return env


def laketail(*args: str, stdin: bytes | None = None, env: dict[str, str] | None = None,
             cwd: Path | None = None) -> subprocess.CompletedProcess:
    """Run ``laketail ARGS`` to completion; stdout and stderr as bytes."""
    return subprocess.run(
        [sys.executable, "-m", "laketail.cli", *args],
        input=stdin if stdin is not None else b"",
        capture_output=True,
        env=_env(env),
        cwd=cwd,
        timeout=COMMAND_TIMEOUT_S,
    )


def ok(result: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    assert result.returncode == 0, (
        f"{result.args} exited {result.returncode}\nstdout: {result.stdout.decode(errors='replace')}"
        f"\nstderr: {result.stderr.decode(errors='replace')}"
    )
    return result


def failed(result: subprocess.CompletedProcess, code: int = 1) -> str:
    """Assert the command failed with ``code``; return its stderr."""
    err = result.stderr.decode(errors="replace")
    assert result.returncode == code, f"{result.args} exited {result.returncode}, wanted {code}\nstderr: {err}"
    return err


def lines(result: subprocess.CompletedProcess) -> list[str]:
    return result.stdout.decode("utf-8").splitlines()


# -- topics -------------------------------------------------------------------------------


def test_topic_lifecycle(broker: Any) -> None:
    name = f"cli-lifecycle-{uuid.uuid4().hex[:10]}"
    out = ok(laketail("topics", "create", name, "--partitions", "3", "--config", "retention.ms=60000",
                      "--server", broker.url))
    assert name in out.stdout.decode()

    listed = ok(laketail("topics", "list", "--server", broker.url)).stdout.decode()
    assert any(line.split()[:2] == [name, "3"] for line in listed.splitlines()), listed

    described = ok(laketail("topics", "describe", name, "--server", broker.url)).stdout.decode()
    partition_rows = [ln.split() for ln in described.splitlines() if ln.split()[:1] in (["0"], ["1"], ["2"])]
    assert [row[0] for row in partition_rows] == ["0", "1", "2"], described
    assert "retention.ms" in described and "60000" in described, described

    ok(laketail("topics", "alter", name, "--config", "retention.ms=120000",
                "--config", "cleanup.policy=compact", "--server", broker.url))
    configs = broker.rest.http.get(broker.rest.v3(f"/topics/{name}/configs")).json()["data"]
    values = {c["name"]: c["value"] for c in configs}
    assert values["retention.ms"] == "120000" and values["cleanup.policy"] == "compact"

    ok(laketail("topics", "alter", name, "--delete-config", "cleanup.policy", "--server", broker.url))
    configs = broker.rest.http.get(broker.rest.v3(f"/topics/{name}/configs")).json()["data"]
    values = {c["name"]: c["value"] for c in configs}
    assert values["cleanup.policy"] == "delete" and values["retention.ms"] == "120000"

    ok(laketail("topics", "delete", name, "--server", broker.url))
    listed = ok(laketail("topics", "list", "--server", broker.url)).stdout.decode()
    assert name not in listed.split()
    err = failed(laketail("topics", "describe", name, "--server", broker.url))
    assert err.startswith("error: UNKNOWN_TOPIC_OR_PARTITION"), err


def test_describe_shows_offsets(broker: Any, make_topic: Any) -> None:
    topic = make_topic(partitions=2)
    ok(laketail("produce", topic, "--partition", "1", "--server", broker.url, stdin=b"a\nb\nc\n"))
    described = ok(laketail("topics", "describe", topic, "--server", broker.url)).stdout.decode()
    rows = {ln.split()[0]: ln.split() for ln in described.splitlines() if ln.split()[:1] in (["0"], ["1"])}
    # partition leader replicas ISR log-start log-end HW
    assert rows["0"][4:7] == ["0", "0", "0"], described
    assert rows["1"][4:7] == ["0", "3", "3"], described


def test_topic_admin_errors(broker: Any, make_topic: Any) -> None:
    topic = make_topic()
    err = failed(laketail("topics", "create", topic, "--partitions", "1", "--server", broker.url))
    assert err.startswith("error: TOPIC_ALREADY_EXISTS"), err
    err = failed(laketail("topics", "create", "bad/name", "--partitions", "1", "--server", broker.url))
    assert err.startswith("error: INVALID_TOPIC_EXCEPTION"), err
    err = failed(laketail("topics", "create", topic + "-x", "--partitions", "1", "--config", "retention.ms=soon",
                          "--server", broker.url))
    assert err.startswith("error: INVALID_CONFIG"), err
    err = failed(laketail("topics", "create", topic + "-y", "--partitions", "1", "--replication-factor", "3",
                          "--server", broker.url))
    assert err.startswith("error: INVALID_REPLICATION_FACTOR"), err
    err = failed(laketail("topics", "alter", topic, "--config", "no.such.key=1", "--server", broker.url))
    assert err.startswith("error: INVALID_CONFIG"), err
    err = failed(laketail("topics", "delete", topic + "-missing", "--server", broker.url))
    assert err.startswith("error: UNKNOWN_TOPIC_OR_PARTITION"), err
    listed = ok(laketail("topics", "list", "--server", broker.url)).stdout.decode().split()
    assert topic + "-x" not in listed and topic + "-y" not in listed


# -- produce and consume -----------------------------------------------------------------


def test_keyed_round_trip_across_partitions(broker: Any, make_topic: Any) -> None:
    topic = make_topic(partitions=3)
    sent = [f"user{i % 7}:event {i}" for i in range(1200)]  # more than one batch
    result = ok(laketail("produce", topic, "--key-separator", ":", "--server", broker.url,
                         stdin=("\n".join(sent) + "\n").encode()))
    summary = result.stderr.decode()
    assert "1200 record(s)" in summary, summary

    got = lines(ok(laketail("consume", topic, "--from-beginning", "--max-records", "1200", "--print-key",
                            "--server", broker.url)))
    assert sorted(got) == sorted(s.replace(":", "\t", 1) for s in sent)
    # One key lives in one partition, so its records come back in the order sent.
    for key in {s.split(":")[0] for s in sent}:
        mine = [g.split("\t")[1] for g in got if g.split("\t")[0] == key]
        assert mine == [s.split(":", 1)[1] for s in sent if s.split(":")[0] == key]

    # The same records through the REST API: every partition holds what the CLI said.
    total = sum(broker.rest.end_offsets(topic).values())
    assert total == 1200


def test_partition_and_offset(broker: Any, make_topic: Any) -> None:
    topic = make_topic(partitions=2)
    ok(laketail("produce", topic, "--partition", "1", "--acks", "1", "--server", broker.url,
                stdin=b"zero\none\ntwo\nthree\n"))
    assert broker.rest.end_offsets(topic) == {0: 0, 1: 4}
    got = lines(ok(laketail("consume", topic, "--partition", "1", "--offset", "2", "--max-records", "2",
                            "--server", broker.url)))
    assert got == ["two", "three"]


def test_values_are_bytes(broker: Any, make_topic: Any) -> None:
    topic = make_topic()
    ok(laketail("produce", topic, "--server", broker.url, stdin=b"caf\xc3\xa9\nbad \xff byte\r\n\nlast-no-newline"))
    records = broker.rest.fetch_range(topic, 0, 0, 4)
    values = [base64.b64decode(r["value"]) for r in records]
    assert values == [b"caf\xc3\xa9", b"bad \xff byte", b"", b"last-no-newline"]
    assert [r["key"] for r in records] == [None] * 4
    got = lines(ok(laketail("consume", topic, "--from-beginning", "--max-records", "4", "--print-key",
                            "--server", broker.url)))
    assert got == ["null\tcafé", "null\tbad \ufffd byte", "null\t", "null\tlast-no-newline"]


def test_consume_follows_from_log_end(broker: Any, make_topic: Any) -> None:
    """Without a starting offset the consumer only sees records produced after it
    started, and exits once --max-records arrived."""
    topic = make_topic(partitions=2)
    ok(laketail("produce", topic, "--server", broker.url, stdin=b"old-1\nold-2\n"))
    consumer = subprocess.Popen(
        [sys.executable, "-m", "laketail.cli", "consume", topic, "--max-records", "3", "--server", broker.url],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, env=_env(),
    )
    sent = []
    try:
        deadline = time.monotonic() + COMMAND_TIMEOUT_S
        i = 0
        while consumer.poll() is None and time.monotonic() < deadline:
            value = f"new-{i}"
            ok(laketail("produce", topic, "--server", broker.url, stdin=value.encode() + b"\n"))
            sent.append(value)
            i += 1
            time.sleep(0.1)
        out, err = consumer.communicate(timeout=COMMAND_TIMEOUT_S)
    finally:
        if consumer.poll() is None:
            consumer.kill()
            consumer.communicate()
    assert consumer.returncode == 0, err.decode(errors="replace")
    got = out.decode().splitlines()
    assert len(got) == 3 and all(g in sent for g in got), (got, sent)
    assert b"consumed 3 record(s)" in err


def test_consume_timeout_ms_stops_when_idle(broker: Any, make_topic: Any) -> None:
    topic = make_topic(partitions=3)
    ok(laketail("produce", topic, "--key-separator", "=", "--server", broker.url, stdin=b"a=1\nb=2\nc=3\n"))
    got = lines(ok(laketail("consume", topic, "--from-beginning", "--timeout-ms", "3000", "--server", broker.url)))
    assert sorted(got) == ["1", "2", "3"]


def test_produce_and_consume_errors(broker: Any, make_topic: Any, tmp_path: Path) -> None:
    topic = make_topic()
    missing = topic + "-missing"
    # auto.create.topics.enable (Kafka's default) makes it, as Kafka's console producer does
    created = topic + "-created"
    ok(laketail("produce", created, "--server", broker.url, stdin=b"x\n"))
    assert broker.rest.offsets(created, 0) == (0, 1)
    err = failed(laketail("produce", topic, "--partition", "5", "--server", broker.url, stdin=b"x\n"))
    assert err.startswith("error: UNKNOWN_TOPIC_OR_PARTITION"), err
    err = failed(laketail("consume", missing, "--server", broker.url))
    assert err.startswith("error: UNKNOWN_TOPIC_OR_PARTITION"), err
    err = failed(laketail("consume", topic, "--offset", "10", "--server", broker.url))
    assert err.startswith("error: OFFSET_OUT_OF_RANGE"), err

    # A line without the key separator stops the command; nothing of its batch is sent.
    err = failed(laketail("produce", topic, "--key-separator", ":", "--server", broker.url, stdin=b"k:v\nno-key\n"))
    assert "line 2 has no key separator" in err, err
    assert broker.rest.end_offsets(topic) == {0: 0}

    # A record over max.message.bytes: a readable error; the broker answers it per record
    # (issue 37: as Confluent's proxy, the other records of the request are written) and
    # the command says what was produced before it.
    small = make_topic(configs={"max.message.bytes": "100"})
    err = failed(laketail("produce", small, "--server", broker.url, stdin=b"ok\n" + b"x" * 500 + b"\n"))
    assert err.startswith("error: MESSAGE_TOO_LARGE"), err
    assert "before that, produced 1 record(s)" in err, err
    assert broker.rest.end_offsets(small) == {0: 1}


def test_no_broker_at_url() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    for args in (["topics", "list"], ["produce", "t"], ["consume", "t"], ["topics", "describe", "t"]):
        err = failed(laketail(*args, "--server", url, stdin=b"x\n"))
        assert err.startswith(f"error: no broker answers at {url}"), err


def test_usage_errors_exit_2(broker: Any) -> None:
    failed(laketail("topics", "create", "t", "--server", broker.url), code=2)  # --partitions missing
    failed(laketail("topics", "create", "t", "--partitions", "0", "--server", broker.url), code=2)
    failed(laketail("topics", "create", "t", "--partitions", "1", "--config", "novalue", "--server", broker.url),
           code=2)
    failed(laketail("consume", "t", "--offset", "1", "--from-beginning", "--server", broker.url), code=2)
    failed(laketail("consume", "t", "--offset", "soon", "--server", broker.url), code=2)
    failed(laketail("produce", "t", "--acks", "2", "--server", broker.url), code=2)
    failed(laketail("topics", "alter", "t", "--server", broker.url), code=2)


def test_server_placement_and_environment(broker: Any, make_topic: Any) -> None:
    topic = make_topic()
    # --server after the subcommand's arguments, between options, and before them.
    ok(laketail("produce", topic, "--server", broker.url, "--key-separator", ":", stdin=b"k:v1\n"))
    ok(laketail("produce", "--server", broker.url, topic, stdin=b"v2\n"))
    got = lines(ok(laketail("consume", topic, "--from-beginning", "--max-records", "2", "--server", broker.url)))
    assert got == ["v1", "v2"]
    # $LAKETAIL_SERVER when --server is absent; --server wins over it.
    env = {"LAKETAIL_SERVER": broker.url}
    assert topic in ok(laketail("topics", "list", env=env)).stdout.decode().split()
    dead = f"http://127.0.0.1:{free_port()}"
    assert failed(laketail("topics", "list", env={"LAKETAIL_SERVER": dead})).startswith(
        f"error: no broker answers at {dead}")
    assert topic in ok(laketail("topics", "list", "--server", broker.url,
                                env={"LAKETAIL_SERVER": dead})).stdout.decode().split()


# -- serve ---------------------------------------------------------------------------------


def test_serve_reads_config_file(tmp_path: Path) -> None:
    """``serve --config`` takes its settings from the file; flags override it."""
    port = free_port()
    conf = tmp_path / "laketail.toml"
    conf.write_text(
        "[broker]\n"
        f'"data" = "{tmp_path / "data"}"\n'
        '"host" = "127.0.0.1"\n'
        f'"port" = {free_port()}\n'
        '"num.partitions" = 4\n'
    )
    url = f"http://127.0.0.1:{port}"
    server = subprocess.Popen(
        [sys.executable, "-m", "laketail.cli", "serve", "--config", str(conf), "--port", str(port)],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, env=_env(), cwd=tmp_path,
    )
    try:
        deadline = time.monotonic() + COMMAND_TIMEOUT_S
        while laketail("topics", "list", "--server", url).returncode != 0:
            assert server.poll() is None, server.communicate()[1].decode(errors="replace")
            assert time.monotonic() < deadline, "broker did not start"
            time.sleep(0.2)
        # A topic created without partitions gets num.partitions from the file.
        with httpx.Client(base_url=url, timeout=30) as http:
            cluster = http.get("/v3/clusters").json()["data"][0]["cluster_id"]
            created = http.post(f"/v3/clusters/{cluster}/topics", json={"topic_name": "defaults"})
            assert created.status_code in (200, 201), created.text
        described = ok(laketail("topics", "describe", "defaults", "--server", url)).stdout.decode()
        assert "partitions: 4" in described, described
        assert (tmp_path / "data" / "topics" / "defaults").is_dir()
    finally:
        server.terminate()
        try:
            server.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.communicate()


def test_serve_refuses_bad_settings(tmp_path: Path) -> None:
    err = failed(laketail("serve", "--config", str(tmp_path / "absent.toml"), cwd=tmp_path))
    assert "absent.toml does not exist" in err, err
    bad = tmp_path / "bad.toml"
    bad.write_text('[broker]\n"no.such.setting" = 1\n')
    err = failed(laketail("serve", "--config", str(bad), cwd=tmp_path))
    assert err.startswith("error: INVALID_CONFIG") and "no.such.setting" in err, err
    failed(laketail("serve", "--port", "70000", cwd=tmp_path), code=2)


def test_repository_config_file_loads() -> None:
    """conf/laketail.toml parses and spells only keys the broker knows, with defaults."""
    from laketail.config import BrokerSettings, load_settings

    conf = Path(__file__).resolve().parents[1] / "conf" / "laketail.toml"
    settings = load_settings(conf, env={})
    defaults = BrokerSettings()
    assert settings.port == 8082 and settings.host == "127.0.0.1"
    assert settings.topic_defaults == {}
    assert settings.num_partitions == defaults.num_partitions
    assert settings.message_max_bytes == defaults.message_max_bytes


# -- consume --group, reset-offsets, delete-offsets -----------------------------------------


def _committed(broker: Any, group: str, topic: str, partitions: int) -> list[int]:
    body = {"partitions": [{"topic": topic, "partition": p} for p in range(partitions)]}
    resp = broker.rest.http.post(f"/v1/groups/{group}/committed", json=body)
    assert resp.status_code == 200, resp.text
    return [o["offset"] for o in sorted(resp.json()["offsets"], key=lambda o: o["partition"])]


def test_consume_in_a_group_commits_what_it_printed(broker: Any, make_topic: Any) -> None:
    topic = make_topic(partitions=2)
    rest = broker.rest
    for p in (0, 1):
        assert rest.produce_binary(topic, [{"value": f"p{p}-{i}".encode()} for i in range(3)],
                                   partition=p).status_code == 200
    group = f"{topic}-console"
    first = ok(laketail("consume", topic, "--group", group, "--from-beginning", "--timeout-ms", "3000",
                        "--server", broker.url))
    assert sorted(lines(first)) == sorted(f"p{p}-{i}" for p in (0, 1) for i in range(3))
    assert _committed(broker, group, topic, 2) == [3, 3]

    # The group starts where it committed: only the new record.
    assert rest.produce_binary(topic, [{"value": b"later"}], partition=1).status_code == 200
    again = ok(laketail("consume", topic, "-g", group, "--from-beginning", "--timeout-ms", "3000",
                        "--server", broker.url))
    assert lines(again) == ["later"]
    assert _committed(broker, group, topic, 2) == [3, 4]
    # --max-records: what was printed is committed, nothing beyond.
    assert rest.produce_binary(topic, [{"value": f"m{i}".encode()} for i in range(4)],
                               partition=0).status_code == 200
    one = ok(laketail("consume", topic, "-g", group, "-n", "1", "--server", broker.url))
    assert lines(one) == ["m0"]
    assert _committed(broker, group, topic, 2) == [4, 4]
    failed(laketail("consume", topic, "--group", group, "--partition", "0", "--server", broker.url), code=2)


def test_reset_offsets_is_a_dry_run_unless_executed(broker: Any, make_topic: Any) -> None:
    topic = make_topic(partitions=2)
    rest = broker.rest
    for p, n in ((0, 6), (1, 4)):
        assert rest.produce_binary(topic, [{"value": b"x"}] * n, partition=p).status_code == 200
    group = f"{topic}-reset"
    commit = {"generation_id": -1, "member_id": "",
              "offsets": [{"topic": topic, "partition": 0, "offset": 5}, {"topic": topic, "partition": 1, "offset": 2}]}
    assert rest.http.post(f"/v1/groups/{group}/commit", json=commit).status_code == 200

    dry = ok(laketail("groups", "reset-offsets", "--group", group, "--topic", topic, "--to-earliest",
                      "--server", broker.url))
    assert "dry run" in dry.stderr.decode()
    assert [line.split()[1:] for line in lines(dry) if line.startswith(group)] == [
        [topic, "0", "5", "0"], [topic, "1", "2", "0"]]
    assert _committed(broker, group, topic, 2) == [5, 2]  # nothing changed

    ok(laketail("groups", "reset-offsets", "-g", group, "--topic", f"{topic}:1", "--shift-by", "-1",
                "--execute", "--server", broker.url))
    assert _committed(broker, group, topic, 2) == [5, 1]
    ok(laketail("groups", "reset-offsets", "-g", group, "--all-topics", "--to-latest", "--execute",
                "--server", broker.url))
    assert _committed(broker, group, topic, 2) == [6, 4]
    ok(laketail("groups", "reset-offsets", "-g", group, "--topic", topic, "--to-offset", "99", "--execute",
                "--server", broker.url))
    assert _committed(broker, group, topic, 2) == [6, 4]  # clamped to the end
    ok(laketail("groups", "reset-offsets", "-g", group, "--topic", topic, "--to-datetime", "2000-01-01T00:00:00Z",
                "--execute", "--server", broker.url))
    assert _committed(broker, group, topic, 2) == [0, 0]  # every record is newer
    ok(laketail("groups", "reset-offsets", "-g", group, "--topic", topic, "--to-datetime", "2999-01-01T00:00:00.000",
                "--execute", "--server", broker.url))
    assert _committed(broker, group, topic, 2) == [6, 4]  # none is that recent: the end

    failed(laketail("groups", "reset-offsets", "-g", group, "--topic", topic, "--server", broker.url), code=2)
    failed(laketail("groups", "reset-offsets", "-g", group, "--topic", topic, "--to-latest", "--dry-run",
                    "--execute", "--server", broker.url), code=2)
    no_commit = failed(laketail("groups", "reset-offsets", "-g", f"{group}-new", "--topic", topic, "--shift-by", "1",
                                "--server", broker.url))
    assert "no committed offset" in no_commit


def test_reset_and_delete_refused_while_the_group_is_active(broker: Any, make_topic: Any) -> None:
    from laketail.client import Consumer, TopicPartition

    topic = make_topic(partitions=1)
    assert broker.rest.produce_binary(topic, [{"value": b"x"}] * 3, partition=0).status_code == 200
    group = f"{topic}-active"
    consumer = Consumer({"bootstrap.servers": broker.url, "group.id": group, "enable.auto.commit": False})
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + 60
        while not consumer.assignment():
            assert time.monotonic() < deadline, "no assignment"
            consumer.poll(0.2)
        consumer.commit(offsets=[TopicPartition(topic, 0, 2)], asynchronous=False)
        err = failed(laketail("groups", "reset-offsets", "-g", group, "--topic", topic, "--to-earliest",
                              "--execute", "--server", broker.url))
        assert f"group '{group}' is inactive, but the current state is Stable" in err, err
        err = failed(laketail("groups", "delete-offsets", "-g", group, "--topic", topic, "--execute",
                              "--server", broker.url))
        assert "GROUP_SUBSCRIBED_TO_TOPIC" in err, err
        assert _committed(broker, group, topic, 1) == [2]
    finally:
        consumer.close()

    dry = ok(laketail("groups", "delete-offsets", "-g", group, "--topic", topic, "--server", broker.url))
    assert "would be deleted" in dry.stdout.decode() and _committed(broker, group, topic, 1) == [2]
    done = ok(laketail("groups", "delete-offsets", "-g", group, "--topic", topic, "--execute", "--server", broker.url))
    assert "deleted" in done.stdout.decode()
    assert _committed(broker, group, topic, 1) == [-1]
