"""Screenshots of the web console for docs/console.md: ``docs/console/*.png``.

    .venv/bin/python scripts/console_screenshots.py [--out docs/console]

Starts a broker of its own (a temporary data directory, a free port on 127.0.0.1),
fills it with demo data -- topics with JSON records and headers, consumer groups at
every lag grade, a few lag-job measurements for the chart, an open transaction --
then drives Debian's headless chromium (``chromium`` and ``chromium-driver``, as the
console tests do) through the main pages and saves one PNG per page. Run it again
after changing the console to refresh the pictures.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parent.parent
PAGES = [
    ("overview", "overview"),
    ("topics", "topics"),
    ("topic", "topics/orders"),
    ("messages", "messages?topic=orders&partition=all&from=newest&format=json&limit=8"),
    ("groups", "groups"),
    ("group", "groups/billing"),
    ("transactions", "transactions"),
    ("sql", "sql"),
]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait(check, what: str, timeout_s: float = 120.0):
    deadline = time.monotonic() + timeout_s
    while True:
        with contextlib.suppress(Exception):
            value = check()
            if value:
                return value
        if time.monotonic() > deadline:
            raise SystemExit(f"gave up waiting for {what}")
        time.sleep(0.1)


def fill(http: httpx.Client, url: str, data: Path) -> None:
    """Demo data: topics, records, groups at every lag grade, lag history, a transaction."""
    from laketail.jobs import lag

    cluster = http.get("/v3/clusters").json()["data"][0]["cluster_id"]
    for name, partitions in (("orders", 6), ("payments", 3), ("clicks", 12)):
        http.post(f"/v3/clusters/{cluster}/topics", json={"topic_name": name, "partitions_count": partitions})
    http.post(f"/v3/clusters/{cluster}/topics", json={
        "topic_name": "customers", "partitions_count": 3,
        "configs": [{"name": "cleanup.policy", "value": "compact"}]})
    rng = random.Random(19)
    for i in range(60):
        record = {"partition_id": i % 6, "key": {"type": "STRING", "data": f"order-{1000 + i}"},
                  "value": {"type": "JSON", "data": {"order_id": 1000 + i, "customer": f"c-{rng.randint(1, 40)}",
                                                     "amount": round(rng.uniform(5, 500), 2), "currency": "EUR"}},
                  "headers": [{"name": "source", "value": "d2Vic2hvcA=="}]}  # "webshop"
        http.post(f"/v3/clusters/{cluster}/topics/orders/records", json=record)

    def produce(topic: str, partition: int, n: int) -> None:
        body = {"records": [{"value": "eA=="} for _ in range(n)]}
        http.post(f"/topics/{topic}/partitions/{partition}", json=body,
                  headers={"Content-Type": "application/vnd.kafka.binary.v2+json"})

    for p in range(12):
        produce("clicks", p, 400 + 90 * p)
    for p in range(3):
        produce("payments", p, 2000)

    def commit(group: str, offsets: dict[tuple[str, int], int]) -> None:
        http.post(f"/v1/groups/{group}/commit", json={"offsets": [
            {"topic": t, "partition": p, "offset": o} for (t, p), o in offsets.items()]})

    commit("fraud-detector", {("orders", p): 10 for p in range(6)})
    commit("analytics", {("clicks", p): 100 for p in range(12)})
    commit("ledger", {("payments", p): 1990 for p in range(3)})
    # billing falls behind and catches up: a lag-job measurement after each step.
    for step, behind in enumerate((1500, 2600, 3900, 3100, 2200, 900, 400, 120)):
        produce("payments", 0, 500)
        end = 2000 + 500 * (step + 1)
        commit("billing", {("payments", 0): end - behind, ("payments", 1): 1900, ("payments", 2): 1995})
        with contextlib.redirect_stdout(io.StringIO()):
            lag.main(["--servers", url, "--data", str(data)])
    tid = "payments-writer-1"
    init = http.post("/v1/producers", json={"transactional_id": tid, "transaction_timeout_ms": 60_000}).json()
    http.post(f"/v1/transactions/{tid}/partitions", json={
        "producer_id": init["producer_id"], "producer_epoch": init["producer_epoch"],
        "partitions": [{"topic": "payments", "partition": 1}]})


def shoot(url: str, out: Path) -> None:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By

    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1400,1000",
                "--hide-scrollbars"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)
    try:
        for name, route in PAGES:
            driver.get("about:blank")
            driver.get(f"{url}/console#/{route}")
            wait(lambda: driver.execute_script("return document.getElementById('view').dataset.state") == "ready",
                 f"the {name} page")
            if name == "overview":  # the page refreshes itself; its second look measures the rates
                wait(lambda: "records/s" in driver.find_element(By.ID, "view").text, "the overview's rates")
            if name == "sql":
                box = driver.find_element(By.ID, "sql-query")
                box.clear()
                box.send_keys('SELECT partition, count(*) AS orders, max("offset") AS last_offset, '
                              "max(timestamp) AS newest FROM orders GROUP BY partition ORDER BY partition")
                driver.find_element(By.ID, "sql-run").click()
                wait(lambda: "rows" in driver.find_element(By.ID, "sql-result").text, "the SQL result")
            height = driver.execute_script("return document.body.scrollHeight")
            driver.set_window_size(1400, max(700, min(height + 160, 2400)))
            driver.save_screenshot(str(out / f"{name}.png"))
            driver.set_window_size(1400, 1000)
            print(f"saved {out / (name + '.png')}")
    finally:
        driver.quit()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(REPO / "docs" / "console"), help="folder for the PNGs")
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with tempfile.TemporaryDirectory(prefix="laketail-console-") as tmp:
        data = Path(tmp) / "data"
        env = {k: v for k, v in os.environ.items() if not k.startswith("LAKETAIL_")}
        proc = subprocess.Popen(
            [sys.executable, "-m", "laketail.cli", "serve", "--data", str(data), "--host", "127.0.0.1",
             "--port", str(port), "--processes", "1"],
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
        )
        try:
            with httpx.Client(base_url=url, timeout=60) as http:
                wait(lambda: http.get("/v3/clusters").status_code == 200, "the broker")
                fill(http, url, data)
                wait(lambda: http.get("/v1/console/topics/orders/table").json()["files"] > 0, "the orders table")
            shoot(url, out)
        finally:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=60)
    print(json.dumps({"screenshots": [f"{name}.png" for name, _ in PAGES], "folder": str(out)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
