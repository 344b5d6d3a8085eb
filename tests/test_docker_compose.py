"""docker-compose.yml: three brokers on one shared data volume, and a Spark cluster.

There is no Docker engine on the test machines, so the file is checked the way
Compose itself reads it: ``docker-compose -f docker-compose.yml config`` validates it
and prints the resolved configuration (anchors merged, defaults filled in), and the
assertions run on that output. Parsing the file ourselves would not catch what Compose
rejects. The test installs nothing: without ``docker-compose`` (Debian's package of
that name, or Docker's ``docker compose`` plugin) it fails and says what to install.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
COMPOSE_FILE = ROOT / "docker-compose.yml"
BROKERS = {"broker1": 1, "broker2": 2, "broker3": 3}


def _compose_command() -> list[str]:
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    if shutil.which("docker"):
        probe = subprocess.run(["docker", "compose", "version"], capture_output=True, timeout=60)
        if probe.returncode == 0:
            return ["docker", "compose"]
    pytest.fail(
        "docker-compose is not installed, so docker-compose.yml cannot be validated: install it "
        "(`apt-get install -y docker-compose`, or Docker's compose plugin) and run the test again",
        pytrace=False,
    )


@pytest.fixture(scope="module")
def config() -> dict:
    """The configuration Compose resolves from docker-compose.yml."""
    done = subprocess.run(
        [*_compose_command(), "-f", str(COMPOSE_FILE), "config"],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 0, f"docker-compose config rejected the file:\n{done.stderr}"
    return yaml.safe_load(done.stdout)


def _flag(command: list[str], name: str) -> str:
    assert name in command, f"{name} missing from {command}"
    return str(command[command.index(name) + 1])


def _mounts(service: dict) -> dict[str, str]:
    """Container path -> named volume, from either form Compose prints."""
    out = {}
    for volume in service.get("volumes", []):
        if isinstance(volume, str):
            source, target = volume.split(":")[:2]
        else:
            assert volume.get("type", "volume") == "volume", f"{volume} is not a named volume"
            source, target = volume["source"], volume["target"]
        out[target] = source
    return out


def _environment(service: dict) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):
        env = dict(item.split("=", 1) for item in env)
    return {k: str(v) for k, v in env.items()}


def test_three_brokers_serve_with_distinct_ids_and_advertised_urls(config: dict) -> None:
    services = config["services"]
    assert set(BROKERS) <= set(services)
    ids, urls = set(), set()
    for name, broker_id in BROKERS.items():
        command = [str(part) for part in services[name]["command"]]
        assert command[:2] == ["laketail", "serve"]
        assert _flag(command, "--broker-id") == str(broker_id)
        assert _flag(command, "--data") == "/data"
        assert _flag(command, "--log-dir") == "/logs"
        assert _flag(command, "--port") == "8082"
        assert _flag(command, "--host") == "0.0.0.0"
        assert _flag(command, "--advertised-url") == f"https://{name}:8082"  # the CLIENT listener is SASL_SSL
        ids.add(_flag(command, "--broker-id"))
        urls.add(_flag(command, "--advertised-url"))
    assert len(ids) == len(urls) == len(BROKERS)


def test_brokers_share_the_data_volume_and_keep_their_own_logs(config: dict) -> None:
    services = config["services"]
    data = {_mounts(services[name]).get("/data") for name in BROKERS}
    logs = [_mounts(services[name]).get("/logs") for name in BROKERS]
    assert len(data) == 1 and None not in data, f"brokers must share one /data volume, got {data}"
    assert None not in logs and len(set(logs)) == len(BROKERS), f"each broker needs its own /logs volume: {logs}"
    assert data.isdisjoint(logs)
    declared = set(config.get("volumes") or {})
    assert data | set(logs) <= declared, "data and log volumes are named volumes declared at the top level"


def test_brokers_are_built_from_the_repository_dockerfile(config: dict) -> None:
    assert (ROOT / "Dockerfile").is_file()
    for name in BROKERS:
        build = config["services"][name]["build"]
        if isinstance(build, str):
            build = {"context": build}
        assert Path(build["context"]).resolve() == ROOT
        assert build.get("dockerfile", "Dockerfile") == "Dockerfile"


def test_brokers_publish_distinct_host_ports(config: dict) -> None:
    published = []
    for name in BROKERS:
        for port in config["services"][name]["ports"]:
            published.append(str(port["published"]) if isinstance(port, dict) else str(port).split(":")[0])
    assert len(published) == len(set(published)) == len(BROKERS)


def test_every_broker_may_run_maintenance(config: dict) -> None:
    # Only the controller of the moment runs the jobs, so maintenance follows it when it
    # moves; turning it off on some brokers would stop it whenever one of them leads.
    enabled = [name for name in BROKERS
               if _environment(config["services"][name]).get("LAKETAIL_MAINTENANCE_ENABLE", "true").lower() == "true"]
    assert enabled == list(BROKERS)


def test_spark_master_and_worker(config: dict) -> None:
    services = config["services"]
    master = " ".join(str(part) for part in services["spark-master"]["command"])
    worker = services["spark-worker"]
    assert "org.apache.spark.deploy.master.Master" in master and "7077" in master
    worker_command = " ".join(str(part) for part in worker["command"])
    assert "org.apache.spark.deploy.worker.Worker" in worker_command
    assert "spark://spark-master:7077" in worker_command
    assert "spark-master" in worker.get("depends_on", {})
    data = _mounts(services["broker1"])["/data"]
    assert _mounts(worker).get("/data") == data, "executors read the topic tables from the shared volume"


def test_brokers_run_tls_and_scram_with_a_private_inter_broker_listener(config: dict) -> None:
    services = config["services"]
    init = services["init"]
    script = " ".join(str(part) for part in init["command"])
    assert "laketail.security.devcerts /certs broker1 broker2 broker3" in script  # certificates at start-up
    assert "laketail users add admin" in script and "laketail users add app" in script
    assert _mounts(init)["/certs"] == "certs" and _mounts(init)["/data"] == _mounts(services["broker1"])["/data"]
    for name in BROKERS:
        service = services[name]
        env = _environment(service)
        assert env["LAKETAIL_LISTENERS"] == "CLIENT://0.0.0.0:8082,BROKER://0.0.0.0:9093"
        assert env["LAKETAIL_LISTENER_SECURITY_PROTOCOL_MAP"] == "CLIENT:SASL_SSL,BROKER:SSL"
        assert env["LAKETAIL_INTER_BROKER_LISTENER_NAME"] == "BROKER"
        assert env["LAKETAIL_ADVERTISED_LISTENERS"] == f"BROKER://{name}:9093"
        assert env["LAKETAIL_INTER_BROKER_SECRET"]
        assert env["LAKETAIL_SSL_TRUSTSTORE_LOCATION"] == "/certs/ca.pem"
        assert _mounts(service)["/certs"] == "certs"
        assert service["depends_on"]["init"]["condition"] == "service_completed_successfully"
        published = [str(p["published"]) if isinstance(p, dict) else str(p) for p in service["ports"]]
        targets = [str(p["target"]) if isinstance(p, dict) else str(p).rsplit(":", 1)[-1] for p in service["ports"]]
        assert "9093" not in targets, f"{name} must not publish its inter-broker listener: {published}"


def test_brokers_authorize_with_acls_that_a_one_shot_service_adds(config: dict) -> None:
    services = config["services"]
    for name in BROKERS:
        env = _environment(services[name])
        assert env["LAKETAIL_AUTHORIZER_CLASS_NAME"] == "laketail.security.authorizer.AclAuthorizer"
        assert env["LAKETAIL_SUPER_USERS"] == "User:admin"
    acls = services["acls"]
    assert acls["depends_on"]["broker1"]["condition"] == "service_healthy"
    script = " ".join(str(part) for part in acls["command"])
    assert "security.protocol=SASL_SSL" in script and "ssl.ca.location=/certs/ca.pem" in script
    assert script.count("acls --bootstrap-server https://broker1:8082 --add --allow-principal User:app") == 2
    assert "--topic app- --resource-pattern-type prefixed" in script
    assert "--group app- --resource-pattern-type prefixed" in script
