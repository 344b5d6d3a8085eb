"""The web console in a real headless Chromium against a real broker.

Every page loads without an error in the browser's console; the message browser shows
records produced in the test (text, pretty JSON, hex, headers, newest first) and
produces a test record; the lag chart has a point per lag-job measurement; offsets are
reset from the group's page. Waiting is polling the page with a deadline.
"""

from __future__ import annotations

import json
import uuid

import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select

from laketail.jobs import lag
from tests.integration.support import wait_until
from tests.jobs.support import run_job

from .support import commit, committed, console_errors, open_view

pytestmark = pytest.mark.integration


def texts(driver, selector: str) -> list[str]:
    """The visible text of every match, read in one script (a re-render between
    finding and reading elements cannot leave stale references)."""
    return driver.execute_script(
        "return Array.from(document.querySelectorAll(arguments[0]), e => e.innerText.trim())", selector)


def test_every_page_loads_without_console_errors(broker, make_topic, chromium):
    rest = broker.rest
    topic = make_topic(2)
    assert rest.produce_binary(topic, [{"key": b"k", "value": b"v"}] * 3, partition=0).status_code == 200
    group = f"pages-{uuid.uuid4().hex[:8]}"
    commit(rest, group, {(topic, 0): 1})
    console_errors(chromium)  # start from an empty log
    routes = ["overview", "topics", f"topics/{topic}", f"messages?topic={topic}&partition=0", "groups",
              f"groups/{group}", "transactions", "sql", "signin"]
    for route in routes:
        assert open_view(chromium, broker.url, route) == "ready", route
        assert console_errors(chromium) == [], route
        assert texts(chromium, "#view h1")[0], route
    open_view(chromium, broker.url, "topics")
    assert topic in texts(chromium, "#topics td a")
    open_view(chromium, broker.url, f"topics/{topic}")
    assert texts(chromium, "#partitions tbody tr td:nth-child(1)") == ["0", "1"]
    assert "cleanup.policy" in texts(chromium, "#configs td:nth-child(1)")


def test_message_browser_shows_records_produced_in_the_test(broker, make_topic, chromium):
    rest = broker.rest
    topic = make_topic(1)
    marker = uuid.uuid4().hex[:8]
    values = [json.dumps({"order": i, "marker": marker}) for i in range(3)]
    resp = rest.http.post(f"{rest.v3()}/topics/{topic}/records", json={
        "partition_id": 0, "key": {"type": "STRING", "data": "first"},
        "value": {"type": "STRING", "data": values[0]},
        "headers": [{"name": "source", "value": "Y29uc29sZQ=="}],  # "console"
    })
    assert resp.status_code == 200 and resp.json()["error_code"] == 200, resp.text
    assert rest.produce_binary(topic, [{"key": b"k", "value": v.encode()} for v in values[1:]]).status_code == 200

    open_view(chromium, broker.url, f"messages?topic={topic}&partition=0&from=newest&format=text")
    assert texts(chromium, "#record-table tbody td:nth-child(1)") == ["2", "1", "0"]  # newest first
    assert texts(chromium, "#record-table td.value") == values[::-1]
    assert "source: console" in texts(chromium, "#record-table tbody tr:last-child td:nth-child(5)")[0]

    open_view(chromium, broker.url, f"messages?topic={topic}&partition=0&from=oldest&format=json&limit=2")
    pretty = texts(chromium, "#record-table td.value pre")
    assert [json.loads(p) for p in pretty] == [json.loads(v) for v in values[:2]] and "\n" in pretty[0]

    open_view(chromium, broker.url, f"messages?topic={topic}&partition=0&from=offset&at=1&format=hex")
    assert texts(chromium, "#record-table td.key") == ["6b", "6b"]  # "k"

    # Produce a test record from the page; it is then in the partition.
    open_view(chromium, broker.url, f"messages?topic={topic}&partition=0")
    form = chromium.find_element(By.ID, "produce")
    form.find_element(By.NAME, "key").send_keys("from-the-console")
    form.find_element(By.NAME, "value").send_keys(f"hello {marker}")
    form.find_element(By.TAG_NAME, "button").click()
    wait_until(lambda: "produced at" in chromium.find_element(By.ID, "produce-status").text, "the delivery report")
    assert rest.offsets(topic, 0) == (0, 4)
    open_view(chromium, broker.url, f"messages?topic={topic}&partition=0&from=newest&limit=1")
    assert texts(chromium, "#record-table td.value") == [f"hello {marker}"]
    assert console_errors(chromium) == []


def test_lag_chart_has_points_after_the_lag_job_ran(broker, make_topic, chromium):
    rest = broker.rest
    topic = make_topic(1)
    assert rest.produce_binary(topic, [{"value": b"x"}] * 250, partition=0).status_code == 200
    group = f"chart-{uuid.uuid4().hex[:8]}"
    commit(rest, group, {(topic, 0): 0})

    open_view(chromium, broker.url, f"groups/{group}")
    assert chromium.find_elements(By.CSS_SELECTOR, "#lag-chart .lag-point") == []
    assert "no measurements yet" in chromium.find_element(By.ID, "lag-chart").text
    lag_cell = chromium.find_element(By.CSS_SELECTOR, "#lags td.lag")
    assert lag_cell.text == "250" and "lag-caution" in lag_cell.get_attribute("class")

    for offset in (100, 240):
        commit(rest, group, {(topic, 0): offset})
        run_job(lag.main, "--servers", broker.url, "--data", str(broker.data_dir), "--group", group)
    open_view(chromium, broker.url, f"groups/{group}")
    points = chromium.find_elements(By.CSS_SELECTOR, "#lag-chart .lag-point")
    assert len(points) == 2
    heights = [float(p.get_attribute("cy")) for p in points]
    assert heights[0] < heights[1]  # lag 150, then 10: the second point is lower
    assert "lag-ok" in chromium.find_element(By.CSS_SELECTOR, "#lags td.lag").get_attribute("class")
    assert console_errors(chromium) == []


def test_offset_reset_from_the_group_page(broker, make_topic, chromium):
    rest = broker.rest
    topic = make_topic(2)
    for p in (0, 1):
        assert rest.produce_binary(topic, [{"value": b"x"}] * 20, partition=p).status_code == 200
    group = f"reset-ui-{uuid.uuid4().hex[:8]}"
    commit(rest, group, {(topic, 0): 15, (topic, 1): 15})

    open_view(chromium, broker.url, f"groups/{group}")
    Select(chromium.find_element(By.CSS_SELECTOR, "#reset select[name=to]")).select_by_value("earliest")
    chromium.find_element(By.ID, "reset-dry-run").click()
    wait_until(lambda: texts(chromium, "#reset-result td.new-offset") == ["0", "0"], "the dry run's plan")
    assert committed(rest, group, topic, [0, 1]) == {0: 15, 1: 15}

    Select(chromium.find_element(By.CSS_SELECTOR, "#reset select[name=to]")).select_by_value("offset")
    chromium.find_element(By.CSS_SELECTOR, "#reset input[name=arg]").send_keys("7")
    chromium.find_element(By.ID, "reset-execute").click()
    wait_until(lambda: committed(rest, group, topic, [0, 1]) == {0: 7, 1: 7}, "the reset offsets")
    wait_until(lambda: texts(chromium, "#lags td.lag") == ["13", "13"], "the page showing the new lag")
    assert console_errors(chromium) == []


def test_sign_in_sends_the_credentials_with_every_request(broker, chromium):
    open_view(chromium, broker.url, "signin")
    chromium.find_element(By.NAME, "user").send_keys("alice")
    chromium.find_element(By.NAME, "secret").send_keys("alice-secret")
    chromium.find_element(By.CSS_SELECTOR, "#view form button").click()
    wait_until(lambda: texts(chromium, "#signin-link") == ["User:alice"], "the signed-in user in the header")
    # Record what the page sends from now on (the page's own fetch, wrapped).
    chromium.execute_script("""
        window.sent = [];
        const original = window.fetch;
        window.fetch = (url, init) => { window.sent.push([String(url), (init.headers || {}).Authorization]);
                                        return original(url, init); };
        location.hash = '#/topics';
    """)
    sent = wait_until(lambda: chromium.execute_script("return window.sent"), "the topics request")
    assert sent[0][0].startswith("/v1/console/topics")
    assert {auth for _, auth in sent} == {"Basic YWxpY2U6YWxpY2Utc2VjcmV0"}  # alice:alice-secret
    chromium.execute_script("sessionStorage.clear()")  # later tests go anonymous
    assert console_errors(chromium) == []
