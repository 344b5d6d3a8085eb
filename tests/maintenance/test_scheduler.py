"""The broker's maintenance scheduler: wired into Broker.start/close by settings, the
spark-submit command lines it runs, and a running job stopped with the broker."""

from __future__ import annotations

import asyncio
import os
import time

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
