"""Authorization over a real SASL listener (issue 15's follow-ups).

One real broker: a ``CLIENT`` listener (SASL_PLAINTEXT, HTTP Basic against SCRAM users
made with ``laketail users add``) and the inter-broker ``BROKER`` listener (SSL + the
cluster secret); ACLs on, ``User:admin`` the super user, nothing allowed without an ACL.
Each test grants through the v3 ACL API as admin and acts as an unprivileged user:

* a v2 consumer's subscription auto-creates a topic only with Create (and never one
  the user may not Describe), as Kafka's metadata request does; so does the v2
  metadata route's ``allow_auto_topic_creation``;
* a v2 topic carries its configs, so it needs DescribeConfigs as well (REST Proxy's
  ``describeConfigs`` fails the whole call with 403/40301);
* v3 lags and the lag summary leave out topics the user may not Describe;
* the jobs take client credentials (``--command-config``, ``LAKETAIL_SASL_*``,
  ``laketail --command-config FILE jobs run``); without them it fails with the 401's
  reason and writes nothing.
"""

from __future__ import annotations

import base64
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Iterable, Iterator

import httpx
import pytest
from deltalake import DeltaTable
from security.support import PASSWORD, SECRET, Pki, SecureBroker, add_user, ports

from laketail.jobs import lag, retention

pytestmark = pytest.mark.integration

USERS = ("admin", "alice", "lagbot")
V2 = {"Content-Type": "application/vnd.kafka.v2+json"}


class Secured:
    def __init__(self, broker: SecureBroker, base: Path) -> None:
        self.broker = broker
        self.base = base
        self.url = broker.listener_url("CLIENT", "http")
        self.http = {user: httpx.Client(base_url=self.url, auth=(user, PASSWORD), timeout=30.0) for user in USERS}
        self.cluster_id = self.as_("admin", "GET", "/v3/clusters").json()["data"][0]["cluster_id"]

    def as_(self, user: str, method: str, path: str, **kwargs: Any) -> httpx.Response:
        return self.http[user].request(method, path, **kwargs)

    def grant(self, user: str, operation: str, resource_type: str, name: str, pattern: str = "LITERAL") -> None:
        resp = self.as_("admin", "POST", f"/v3/clusters/{self.cluster_id}/acls", json={
            "resource_type": resource_type, "resource_name": name, "pattern_type": pattern,
            "principal": f"User:{user}", "host": "*", "operation": operation, "permission": "ALLOW"})
        assert resp.status_code == 201, resp.text

    def create_topic(self, name: str, partitions: int = 1, configs: dict[str, str] | None = None) -> None:
        body: dict[str, Any] = {"topic_name": name, "partitions_count": partitions}
        if configs:
            body["configs"] = [{"name": k, "value": v} for k, v in configs.items()]
        resp = self.as_("admin", "POST", f"/v3/clusters/{self.cluster_id}/topics", json=body)
        assert resp.status_code == 201, resp.text

    def exists(self, topic: str) -> bool:
        code = self.as_("admin", "GET", f"/v3/clusters/{self.cluster_id}/topics/{topic}").status_code
        assert code in (200, 404)
        return code == 200

    def produce(self, topic: str, partition: int, n: int) -> None:
        body = {"records": [{"value": base64.b64encode(b"v%d" % i).decode()} for i in range(n)]}
        resp = self.as_("admin", "POST", f"/topics/{topic}/partitions/{partition}", json=body,
                        headers={"Content-Type": "application/vnd.kafka.binary.v2+json"})
        assert resp.status_code == 200, resp.text

    def commit(self, group: str, topic: str, partition: int, offset: int) -> None:
        resp = self.as_("admin", "POST", f"/v1/groups/{group}/commit",
                        json={"offsets": [{"topic": topic, "partition": partition, "offset": offset}]})
        assert resp.status_code == 200, resp.text

    def close(self) -> None:
        for client in self.http.values():
            client.close()


def secured_broker(base: Path, users: Iterable[str], env: dict[str, str] | None = None) -> Iterator[Secured]:
    """A SASL/PLAIN client listener with ACLs on (admin the super user, nothing allowed
    without an ACL) over ``base``, with ``users``; yields it as :class:`Secured`."""
    pki = Pki(base / "pki")
    data = base / "data"
    for user in users:
        add_user(data, user, PASSWORD)
    client_port, broker_port = ports(2)
    broker = SecureBroker(
        data, {"CLIENT": ("SASL_PLAINTEXT", client_port), "BROKER": ("SSL", broker_port)},
        {**pki.broker_env(), "LAKETAIL_INTER_BROKER_SECRET": SECRET,
         "LAKETAIL_AUTHORIZER_CLASS_NAME": "laketail.security.authorizer.AclAuthorizer",
         "LAKETAIL_SUPER_USERS": "User:admin", "LAKETAIL_ALLOW_EVERYONE_IF_NO_ACL_FOUND": "false",
         **(env or {})},
        ready_auth=httpx.BasicAuth("admin", PASSWORD), ca=pki.ca_pem,
    )
    broker.start()
    setup = None
    try:
        setup = Secured(broker, base)
        yield setup
    finally:
        if setup is not None:
            setup.close()
        broker.stop()


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secured]:
    yield from secured_broker(tmp_path_factory.mktemp("authz-over-sasl"), USERS)


def refused(resp: httpx.Response) -> str:
    """The Kafka error name of a 403/40301 answer."""
    assert resp.status_code == 403, resp.text
    assert resp.json()["error_code"] == 40301, resp.text
    return resp.json()["message"].split(":")[0]


# -- 1. a v2 subscription auto-creates only with Create -----------------------------------------


def test_a_v2_subscription_auto_creates_a_topic_only_with_create(secured):
    secured.grant("alice", "READ", "GROUP", "sub-g")
    secured.grant("alice", "DESCRIBE", "TOPIC", "sub-", "PREFIXED")
    made = secured.as_("alice", "POST", "/consumers/sub-g", json={"name": "c1", "format": "binary"}, headers=V2)
    assert made.status_code == 200, made.text
    subscription = "/consumers/sub-g/instances/c1/subscription"

    # Describe but no Create: refused, nothing created (nor the topic listed first)
    resp = secured.as_("alice", "POST", subscription, json={"topics": ["sub-listed", "sub-new"]}, headers=V2)
    assert refused(resp) == "TOPIC_AUTHORIZATION_FAILED"
    assert not secured.exists("sub-new") and not secured.exists("sub-listed")
    assert secured.as_("alice", "GET", subscription).json() == {"topics": []}
    # the metadata route's auto-creation is the same rule
    meta = secured.as_("alice", "GET", "/topics/sub-meta/partitions", params={"allow_auto_topic_creation": "true"})
    assert refused(meta) == "TOPIC_AUTHORIZATION_FAILED"
    assert not secured.exists("sub-meta")

    # a topic alice may not even Describe is never created, and the answer does not tell
    # it from an existing one she may not read: her poll is what is refused
    secured.create_topic("hidden-existing")
    for topic in ("hidden-new", "hidden-existing"):
        resp = secured.as_("alice", "POST", subscription, json={"topics": [topic]}, headers=V2)
        assert resp.status_code == 204, resp.text
    assert not secured.exists("hidden-new")

    secured.grant("alice", "CREATE", "TOPIC", "sub-", "PREFIXED")
    resp = secured.as_("alice", "POST", subscription, json={"topics": ["sub-new"]}, headers=V2)
    assert resp.status_code == 204, resp.text
    assert secured.exists("sub-new")
    assert secured.as_("alice", "GET", subscription).json() == {"topics": ["sub-new"]}
    meta = secured.as_("alice", "GET", "/topics/sub-meta/partitions", params={"allow_auto_topic_creation": "true"})
    assert meta.status_code == 200 and secured.exists("sub-meta")
    assert secured.as_("alice", "DELETE", "/consumers/sub-g/instances/c1").status_code == 204


# -- 2. a v2 topic's configs need DescribeConfigs -----------------------------------------------


def test_a_v2_topic_with_its_configs_needs_describe_configs(secured):
    secured.create_topic("cfg-topic", configs={"retention.ms": "3600000"})
    secured.grant("alice", "DESCRIBE", "TOPIC", "cfg-topic")
    assert refused(secured.as_("alice", "GET", "/topics/cfg-topic")) == "TOPIC_AUTHORIZATION_FAILED"
    # Describe alone still describes the partitions (Metadata), without configs
    assert secured.as_("alice", "GET", "/topics/cfg-topic/partitions").status_code == 200

    secured.grant("alice", "DESCRIBE_CONFIGS", "TOPIC", "cfg-topic")
    resp = secured.as_("alice", "GET", "/topics/cfg-topic")
    assert resp.status_code == 200, resp.text
    assert resp.json()["configs"]["retention.ms"] == "3600000"
    secured.grant("alice", "DESCRIBE_CONFIGS", "TOPIC", "cfg-other")  # DescribeConfigs alone is not Describe
    secured.create_topic("cfg-other")
    assert refused(secured.as_("alice", "GET", "/topics/cfg-other")) == "TOPIC_AUTHORIZATION_FAILED"


# -- 3. v3 lags leave out topics without Describe ------------------------------------------------


def test_v3_lags_and_the_lag_summary_leave_out_topics_without_describe(secured, monkeypatch):
    secured.create_topic("lag-visible", partitions=2)
    secured.create_topic("lag-hidden")
    secured.produce("lag-visible", 0, 5)
    secured.produce("lag-visible", 1, 3)
    secured.produce("lag-hidden", 0, 50)
    secured.commit("lag-g", "lag-visible", 0, 1)
    secured.commit("lag-g", "lag-visible", 1, 3)
    secured.commit("lag-g", "lag-hidden", 0, 0)
    group = f"/v3/clusters/{secured.cluster_id}/consumer-groups/lag-g"

    admin = secured.as_("admin", "GET", group + "/lags").json()["data"]
    assert {(d["topic_name"], d["partition_id"]) for d in admin} == {("lag-visible", 0), ("lag-visible", 1),
                                                                        ("lag-hidden", 0)}
    secured.grant("alice", "DESCRIBE", "GROUP", "lag-g")
    secured.grant("alice", "DESCRIBE", "TOPIC", "lag-visible")
    lags = secured.as_("alice", "GET", group + "/lags")
    assert lags.status_code == 200, lags.text
    assert [(d["topic_name"], d["partition_id"], d["lag"]) for d in lags.json()["data"]] == [
        ("lag-visible", 0, 4), ("lag-visible", 1, 0)]
    summary = secured.as_("alice", "GET", group + "/lag-summary").json()
    assert summary["total_lag"] == 4 and summary["max_lag_topic_name"] == "lag-visible"
    assert secured.as_("admin", "GET", group + "/lag-summary").json()["total_lag"] == 54
    one = secured.as_("alice", "GET", group + "/lags/lag-hidden/partitions/0")
    assert refused(one) == "TOPIC_AUTHORIZATION_FAILED"
    console = secured.as_("alice", "GET", "/v1/console/groups/lag-g").json()
    assert {d["topic"] for d in console["lags"]["data"]} == {"lag-visible"} and console["total_lag"] == 4

    # the console's lag history (rows of the lag job, run here as admin) is filtered the same way
    for var, value in (("LAKETAIL_SECURITY_PROTOCOL", "SASL_PLAINTEXT"), ("LAKETAIL_SASL_MECHANISM", "SCRAM-SHA-256"),
                       ("LAKETAIL_SASL_USERNAME", "admin"), ("LAKETAIL_SASL_PASSWORD", PASSWORD)):
        monkeypatch.setenv(var, value)
    assert lag.main(["--servers", secured.url, "--data", str(secured.broker.data_dir), "--group", "lag-g"]) == 0
    history = "/v1/console/groups/lag-g/lag-history"
    assert [(p["lag"], p["partitions"]) for p in secured.as_("admin", "GET", history).json()["points"]] == [(54, 3)]
    assert [(p["lag"], p["partitions"]) for p in secured.as_("alice", "GET", history).json()["points"]] == [(4, 2)]
    assert refused(secured.as_("alice", "GET", history, params={"topic": "lag-hidden"})) == \
        "TOPIC_AUTHORIZATION_FAILED"


# -- 4. the lag job's client credentials ----------------------------------------------------------


def _job_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAKETAIL_")}
    return {**env, "PYTHONUNBUFFERED": "1", **extra}


def _rows(table: Path) -> list[dict]:
    return DeltaTable(str(table)).to_pyarrow_table().to_pylist()


def _lagging_group(secured, group: str, topic: str, produced: int, committed: int) -> None:
    """``group`` committed ``committed`` of ``produced`` records of a new ``topic``, and
    lagbot may Describe both (what the lag job asks)."""
    secured.create_topic(topic)
    secured.produce(topic, 0, produced)
    secured.commit(group, topic, 0, committed)
    secured.grant("lagbot", "DESCRIBE", "GROUP", group)
    secured.grant("lagbot", "DESCRIBE", "TOPIC", topic)


def _lagbot_properties(path: Path, comment: str = "") -> Path:
    """A client properties file with lagbot's SCRAM credentials."""
    path.write_text(f"{comment}security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-256\n"
                    f"sasl.username=lagbot\nsasl.password={PASSWORD}\n")
    return path


def test_the_lag_job_takes_client_credentials_and_without_them_writes_nothing(secured, tmp_path):
    _lagging_group(secured, "job-g", "job-topic", 7, 2)
    table = tmp_path / "consumer_lag"
    job = [sys.executable, "-m", "laketail.jobs.lag", "--servers", secured.url, "--table", str(table),
           "--group", "job-g"]

    def run(argv: list[str], **env: str) -> subprocess.CompletedProcess:
        return subprocess.run(argv, env=_job_env(**env), capture_output=True, text=True, timeout=300,
                              cwd=tmp_path)

    denied = run(job)
    assert denied.returncode != 0
    assert "SASL_AUTHENTICATION_FAILED" in denied.stderr and "--command-config" in denied.stderr, denied.stderr
    assert not table.exists()  # nothing written
    wrong = tmp_path / "wrong.properties"
    wrong.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-256\n"
                     "sasl.username=lagbot\nsasl.password=not-it\n")
    assert "SASL_AUTHENTICATION_FAILED" in run(job + ["--command-config", str(wrong)]).stderr
    assert not table.exists()
    bad = tmp_path / "bad.properties"
    bad.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=GSSAPI\n")
    refused_conf = run(job + ["--command-config", str(bad)])
    assert refused_conf.returncode == 1 and "sasl.mechanism" in refused_conf.stderr, refused_conf.stderr
    assert not table.exists()

    good = _lagbot_properties(tmp_path / "lagbot.properties", "# Kafka client properties\n")
    done = run(job + ["--command-config", str(good)])
    assert done.returncode == 0, done.stderr
    assert [(r["group_id"], r["topic"], r["partition"], r["current_offset"], r["lag"]) for r in _rows(table)] == [
        ("job-g", "job-topic", 0, 2, 5)]
    # the same from LAKETAIL_* variables, as the laketail command reads them
    by_env = run(job, LAKETAIL_SECURITY_PROTOCOL="SASL_PLAINTEXT", LAKETAIL_SASL_MECHANISM="SCRAM-SHA-256",
                 LAKETAIL_SASL_USERNAME="lagbot", LAKETAIL_SASL_PASSWORD=PASSWORD)
    assert by_env.returncode == 0, by_env.stderr
    assert len(_rows(table)) == 2


def test_the_maintenance_jobs_servers_take_client_credentials_too(secured, tmp_path, monkeypatch, capsys):
    """Retention (and compaction, maintenance: the same topic lookup) asks the gateway for
    the topics' configs; run by hand against a SASL listener it needs credentials."""
    for var in [v for v in os.environ if v.startswith("LAKETAIL_")]:
        monkeypatch.delenv(var)
    secured.create_topic("ret-topic", configs={"retention.ms": "1000"})
    argv = ["--servers", secured.url, "--data", str(secured.broker.data_dir), "--topic", "ret-topic", "--dry-run"]
    assert retention.main(argv) == 1
    assert "SASL_AUTHENTICATION_FAILED" in capsys.readouterr().err
    props = _lagbot_properties(tmp_path / "lagbot.properties")
    # authenticated now: the topic listing hides what lagbot may not Describe ...
    assert retention.main(argv + ["--command-config", str(props)]) == 1
    assert "UNKNOWN_TOPIC_OR_PARTITION" in capsys.readouterr().err
    secured.grant("lagbot", "DESCRIBE", "TOPIC", "ret-topic")
    assert retention.main(argv + ["--command-config", str(props)]) == 1  # ... and its configs need DescribeConfigs
    assert "TOPIC_AUTHORIZATION_FAILED" in capsys.readouterr().err
    secured.grant("lagbot", "DESCRIBE_CONFIGS", "TOPIC", "ret-topic")
    assert retention.main(argv + ["--command-config", str(props)]) == 0
    assert '"topic": "ret-topic"' in capsys.readouterr().out


def test_laketail_jobs_run_passes_the_command_config_to_the_job(secured, tmp_path):
    """``laketail --command-config FILE jobs run lag``: spark-submit runs the job, which
    reads the same file (without it the job fails: the first test)."""
    _lagging_group(secured, "run-g", "run-topic", 4, 1)
    good = _lagbot_properties(tmp_path / "lagbot.properties")
    table = tmp_path / "consumer_lag"
    argv = [sys.executable, "-m", "laketail.cli", "--command-config", str(good), "jobs", "run", "lag",
            "--master", "local[1]", "--servers", secured.url, "--table", str(table), "--group", "run-g"]
    done = subprocess.run(argv, env=_job_env(), capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert [(r["group_id"], r["topic"], r["lag"]) for r in _rows(table)] == [("run-g", "run-topic", 3)]
