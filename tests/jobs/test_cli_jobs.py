"""``laketail jobs``: listing, help, the spark-submit command line, progress output."""

from __future__ import annotations

import sys

from click.testing import CliRunner
from rich.console import Console

from laketail.cli import cli

jobs_cli = sys.modules["laketail.cli.jobs"]


def test_list_names_every_job():
    result = CliRunner().invoke(cli, ["jobs", "list"])
    assert result.exit_code == 0, result.output
    assert [line.split()[0] for line in result.output.splitlines()] == [
        "compaction", "retention", "lag", "eos_pipeline", "maintenance"]


def test_help_after_the_name_shows_the_jobs_options():
    result = CliRunner().invoke(cli, ["jobs", "run", "compaction", "--help"])
    assert result.exit_code == 0, result.output
    assert "--master" in result.output and "--target-file-bytes" in result.output


def test_run_passes_unknown_options_to_the_job_in_order(monkeypatch):
    seen = {}
    monkeypatch.setattr(jobs_cli, "run_with_progress",
                        lambda name, master, argv, console, env: seen.update(argv=argv, env=env) or 0)
    result = CliRunner().invoke(cli, ["jobs", "run", "retention", "--data", "D", "--master", "local[1]",
                                      "--topic", "t", "--conf", "spark.x=1"])
    assert result.exit_code == 0, result.output
    argv = seen["argv"]
    assert argv[argv.index("--master") + 1] == "local[1]" and "spark.x=1" in argv
    assert argv[-5].endswith("jobs/retention.py") and argv[-4:] == ["--data", "D", "--topic", "t"]
    assert "LAKETAIL_COMMAND_CONFIG" not in seen["env"]


def test_run_gives_the_job_the_command_config(monkeypatch, tmp_path):
    """``laketail --command-config FILE jobs run``: the job reads the same file (its own
    ``--command-config`` default is ``$LAKETAIL_COMMAND_CONFIG``)."""
    seen = {}
    monkeypatch.setattr(jobs_cli, "run_with_progress",
                        lambda name, master, argv, console, env: seen.update(env=env) or 0)
    props = tmp_path / "client.properties"
    props.write_text("security.protocol=SASL_PLAINTEXT\n")
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(cli, ["--command-config", "client.properties", "jobs", "run", "lag", "--servers", "S"])
    assert result.exit_code == 0, result.output
    assert seen["env"]["LAKETAIL_COMMAND_CONFIG"] == str(props)


def test_unknown_job_is_a_usage_error():
    result = CliRunner().invoke(cli, ["jobs", "run", "nope"])
    assert result.exit_code == 2 and "unknown job 'nope'" in result.output


def test_progress_prints_report_lines_and_returns_the_exit_code(capsys):
    script = ("import sys; print('laketail-job {\"job\": \"retention\", \"topic\": \"t\", \"files_removed\": 2}');"
              "print('spark noise', file=sys.stderr); sys.exit(int(sys.argv[1]))")
    console = Console(stderr=True, force_terminal=False)
    assert jobs_cli.run_with_progress("retention", "local[1]", [sys.executable, "-c", script, "0"], console) == 0
    out = capsys.readouterr()
    assert "retention t: files_removed=2" in out.out and "spark noise" not in out.err
    assert jobs_cli.run_with_progress("retention", "local[1]", [sys.executable, "-c", script, "3"], console) == 3
    assert "spark noise" in capsys.readouterr().err  # the job's log is shown when it fails
