"""The broker's maintenance scheduler: wired into Broker.start/close by settings, the
spark-submit command lines it runs, a running job stopped with the broker, and the
maintenance application as one long-lived child (kept, restarted, stopped)."""

from __future__ import annotations

import asyncio
import os
import signal
import time

import pytest

from laketail.broker import Broker
from laketail.config import load_settings
from laketail.maintenance.scheduler import MaintenanceScheduler
from laketail.maintenance.spark_submit import conf_dir


def _tasks(broker: Broker) -> set[str]:
    return {task.get_name() for task in broker._background}


def test_the_broker_starts_the_scheduler_unless_told_not_to(tmp_path):
    async def scenario(enabled: bool) -> set[str]:
        settings = load_settings(None, env={}, data=str(tmp_path / str(enabled)), tier_enabled=False,
                                 maintenance_enabled=enabled, offsets_topic_num_partitions=1,
                                 transaction_state_log_num_partitions=1)
        broker = Broker(settings)
        await broker.start()
        try:
            return _tasks(broker)
        finally:
            await broker.close()

    assert "laketail-maintenance" in asyncio.run(scenario(True))
    assert "laketail-maintenance" not in asyncio.run(scenario(False))


def test_settings_keys_and_environment():
    settings = load_settings(None, env={"LAKETAIL_MAINTENANCE_ENABLE": "false",
                                        "LAKETAIL_MAINTENANCE_INTERVAL_MS": "1000"})
    assert (settings.maintenance_enabled, settings.maintenance_interval_ms) == (False, 1000)
    defaults = load_settings(None, env={})
    assert (defaults.maintenance_enabled, defaults.maintenance_interval_ms) == (True, 300_000)


def test_jobs_run_with_spark_submit_over_the_brokers_data_and_gateway(tmp_path):
    settings = load_settings(None, env={}, data=str(tmp_path), port=9999)
    argv = MaintenanceScheduler(settings).argv("retention")
    assert argv[0].endswith("spark-submit") and argv[argv.index("--master") + 1] == "local[2]"
    assert argv[argv.index("--properties-file") + 1] == str(conf_dir() / "spark-defaults.conf")
    assert argv[-5].endswith("jobs/retention.py")
    assert argv[-4:] == ["--data", str(tmp_path), "--servers", "http://127.0.0.1:9999"]


def test_the_jobs_call_as_a_peer_without_the_brokers_client_credentials(tmp_path, monkeypatch):
    """A shell that ran ``laketail`` commands may hold client credentials; the broker's
    jobs must not send them to its inter-broker listener: they show the cluster secret."""
    monkeypatch.setenv("LAKETAIL_SASL_USERNAME", "someone")
    monkeypatch.setenv("LAKETAIL_COMMAND_CONFIG", str(tmp_path / "client.properties"))
    settings = load_settings(None, env={"LAKETAIL_INTER_BROKER_SECRET": "s3cret"}, data=str(tmp_path))
    env = MaintenanceScheduler(settings).job_env()
    assert "LAKETAIL_SASL_USERNAME" not in env and "LAKETAIL_COMMAND_CONFIG" not in env
    assert env["LAKETAIL_INTER_BROKER_SECRET"] == "s3cret" and env["PYSPARK_PYTHON"]


def test_closing_stops_a_running_job(tmp_path):
    pid_file = tmp_path / "pid"
    scheduler = MaintenanceScheduler(load_settings(None, env={}, data=str(tmp_path)))
    scheduler.argv = lambda job: ["sh", "-c", f"echo $$ > {pid_file}; exec sleep 60"]

    async def scenario() -> int:
        task = asyncio.create_task(scheduler.run_once(["retention"]))
        deadline = time.monotonic() + 30
        while not (pid_file.exists() and pid_file.read_text().strip()):
            assert time.monotonic() < deadline, "the job never started"
            await asyncio.sleep(0.05)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        return int(pid_file.read_text())

    pid = asyncio.run(scenario())
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return
    raise AssertionError(f"job process {pid} still runs")


def test_the_child_is_the_maintenance_application_triggered_every_interval(tmp_path):
    settings = load_settings(None, env={}, data=str(tmp_path), port=9999, maintenance_interval_ms=30_000)
    argv = MaintenanceScheduler(settings).child_argv()
    assert argv[0].endswith("spark-submit") and argv[argv.index("--master") + 1] == "local[2]"
    assert argv[-7].endswith("jobs/maintenance.py") and "--once" not in argv
    assert argv[-6:] == ["--data", str(tmp_path), "--servers", "http://127.0.0.1:9999", "--interval-s", "30"]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie (exited, not reaped yet) counts as gone
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().split(") ", 1)[1][0] != "Z"


@pytest.mark.fault
def test_one_long_lived_child_restarted_after_kill_9_and_gone_with_the_broker(tmp_path, monkeypatch):
    """The broker's scheduler starts the maintenance application once (its pid stays across
    intervals), starts it again after a kill -9, and stops it when the broker closes. The
    JVM is stood in for by a shell that records its pid (the application's own behaviour
    is tested in tests/jobs/test_maintenance_app.py)."""
    pids = tmp_path / "pids"
    pids.touch()
    monkeypatch.setattr(MaintenanceScheduler, "child_argv",
                        lambda self: ["sh", "-c", f"echo $$ >> {pids}; exec sleep 600"])
    settings = load_settings(None, env={}, data=str(tmp_path / "data"), tier_enabled=False, maintenance_enabled=True,
                             maintenance_interval_ms=100, offsets_topic_num_partitions=1,
                             transaction_state_log_num_partitions=1)

    async def until(condition, what: str) -> None:
        deadline = time.monotonic() + 30
        while not condition():
            assert time.monotonic() < deadline, f"timed out waiting for {what}"
            await asyncio.sleep(0.05)

    def started() -> list[int]:
        return [int(line) for line in pids.read_text().split()]

    async def scenario() -> tuple[int, int]:
        broker = Broker(settings)
        await broker.start()
        try:
            scheduler = broker.maintenance
            assert scheduler is not None
            await until(lambda: len(started()) == 1, "the child to start")
            (first,) = started()
            polls = scheduler.polls
            await until(lambda: scheduler.polls >= polls + 10, "ten intervals with the child running")
            assert started() == [first] and _alive(first) and scheduler.starts == 1

            os.kill(first, signal.SIGKILL)
            await until(lambda: len(started()) == 2, "the child to be started again")
            second = started()[1]
            assert second != first and not _alive(first) and _alive(second)
        finally:
            await broker.close()
        return first, second

    _, second = asyncio.run(scenario())
    assert not _alive(second)
