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
from tests.conftest import b64
from tests.integration.support import wait_until
from tests.jobs.support import run_job

from .support import VIEW_STATE, commit, committed, console_errors, open_view

pytestmark = pytest.mark.integration


def texts(driver, selector: str) -> list[str]:
    """The visible text of every match, read in one script (a re-render between
    finding and reading elements cannot leave stale references)."""
    return driver.execute_script(
        "return Array.from(document.querySelectorAll(arguments[0]), e => (e.innerText ?? e.textContent).trim())",
        selector)


def test_every_page_loads_without_console_errors(broker, make_topic, chromium):
    rest = broker.rest
    topic = make_topic(2)
    assert rest.produce_binary(topic, [{"key": b"k", "value": b"v"}] * 3, partition=0).status_code == 200
    group = f"pages-{uuid.uuid4().hex[:8]}"
    commit(rest, group, {(topic, 0): 1})
    console_errors(chromium)  # start from an empty log
    routes = ["overview", "topics", f"topics/{topic}", f"messages?topic={topic}&partition=0", f"messages?topic={topic}",
              "groups",
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
    assert texts(chromium, "#record-table tbody td:nth-child(2)") == ["2", "1", "0"]  # newest first
    assert texts(chromium, "#record-table td.value") == values[::-1]
    assert "source: console" in texts(chromium, "#record-table tbody tr:last-child td:nth-child(6)")[0]

    open_view(chromium, broker.url, f"messages?topic={topic}&partition=0&from=oldest&format=json&limit=2")
    pretty = texts(chromium, "#record-table td.value pre")
    assert [json.loads(p) for p in pretty] == [json.loads(v) for v in values[:2]] and "\n" in pretty[0]

    open_view(chromium, broker.url, f"messages?topic={topic}&partition=0&from=offset&at=1&format=hex")
    assert texts(chromium, "#record-table td.key") == ["6b", "6b"]  # "k"

    # Produce a test record from the page: it is then in the partition, and in the list
    # on the same page without opening it again.
    open_view(chromium, broker.url, f"messages?topic={topic}&partition=0&from=newest&limit=2")
    chromium.execute_script("document.getElementById('record-table').dataset.old = 'yes'")
    form = chromium.find_element(By.ID, "produce")
    form.find_element(By.NAME, "key").send_keys("from-the-console")
    form.find_element(By.NAME, "value").send_keys(f"hello {marker}")
    form.find_element(By.TAG_NAME, "button").click()
    wait_until(lambda: "produced at" in chromium.find_element(By.ID, "produce-status").text, "the delivery report")
    assert rest.offsets(topic, 0) == (0, 4)
    assert texts(chromium, "#record-table td.value") == [f"hello {marker}", values[2]]
    assert chromium.execute_script("return document.getElementById('record-table').dataset.old") is None  # redrawn
    open_view(chromium, broker.url, f"messages?topic={topic}&partition=0&from=newest&limit=1")
    assert texts(chromium, "#record-table td.value") == [f"hello {marker}"]
    assert console_errors(chromium) == []


def test_message_browser_labels_every_box_shows_all_partitions_and_searches_contents(broker, make_topic, chromium):
    rest = broker.rest
    topic = make_topic(3)
    needle = uuid.uuid4().hex[:8]
    for p in range(3):
        records = [{"key": f"p{p}-{i}".encode(), "value": f"order {i} of partition {p}".encode()} for i in range(4)]
        records[2]["value"] = f"payment {needle.upper()} in {p}".encode()  # found whatever the case
        assert rest.produce_binary(topic, records, partition=p).status_code == 200
    resp = rest.http.post(f"{rest.v3()}/topics/{topic}/records", json={
        "partition_id": 1, "value": {"type": "STRING", "data": "plain"},
        "headers": [{"name": "trace", "value": b64(needle.encode())}]})
    assert resp.status_code == 200 and resp.json()["error_code"] == 200, resp.text

    open_view(chromium, broker.url, f"messages?topic={topic}")
    unlabeled = chromium.execute_script("""
        return Array.from(document.querySelectorAll('#browse input, #browse select, #produce input, #produce textarea'))
          .filter(el => !el.closest('label') || !el.closest('label').innerText.replace(el.value, '').trim())
          .map(el => el.name)""")
    assert unlabeled == []
    assert chromium.find_element(By.CSS_SELECTOR, "#browse select[name=partition]").get_attribute("value") == "all"
    rows = chromium.execute_script("""return Array.from(document.querySelectorAll('#record-table tbody tr'),
        tr => [tr.children[0].innerText, tr.children[1].innerText])""")
    assert sorted(rows) == sorted([[str(p), str(o)] for p in range(3) for o in range(4)] + [["1", "4"]])

    open_view(chromium, broker.url, f"messages?topic={topic}&partition=all&q={needle}&from=oldest")
    assert sorted(texts(chromium, "#record-table td.value")) == sorted(
        [f"payment {needle.upper()} in {p}" for p in range(3)] + ["plain"])  # "plain": its header matches
    assert "searched 13 records" in texts(chromium, "#records-summary")[0]
    open_view(chromium, broker.url, f"messages?topic={topic}&partition=2&q={needle}")
    assert texts(chromium, "#record-table td.value") == [f"payment {needle.upper()} in 2"]
    assert console_errors(chromium) == []


def test_every_table_aligns_its_headers_with_their_cells(broker, make_topic, chromium):
    rest = broker.rest
    topic = make_topic(2)
    assert rest.produce_binary(topic, [{"key": b"k", "value": b"v"}] * 3, partition=0).status_code == 200
    group = f"align-{uuid.uuid4().hex[:8]}"
    commit(rest, group, {(topic, 0): 1})
    wait_until(lambda: rest.http.get(f"/v1/console/topics/{topic}/table").json()["files"] >= 1, "the table")
    checked = 0
    for route in ("overview", f"topics?q={topic}", f"topics/{topic}", f"messages?topic={topic}", "groups",
                  f"groups/{group}", "transactions", "sql"):
        open_view(chromium, broker.url, route)
        if route == "sql":
            chromium.find_element(By.ID, "sql-run").click()
            wait_until(lambda: chromium.find_elements(By.CSS_SELECTOR, "#sql-table, #sql-result .error"),
                       "the SQL result")
            assert chromium.find_elements(By.CSS_SELECTOR, "#sql-result .error") == [], \
                chromium.find_element(By.ID, "sql-result").text
        # (table, column, header's alignment, first cell's alignment) wherever they differ
        wrong = chromium.execute_script("""
            const out = [];
            let n = 0;
            for (const [t, table] of Array.from(document.querySelectorAll('#view table')).entries()) {
              const heads = table.querySelectorAll('thead th');
              const cells = table.querySelector('tbody tr') ? table.querySelector('tbody tr').children : [];
              if (cells.length !== heads.length) continue;
              heads.forEach((th, i) => {
                n++;
                const a = getComputedStyle(th).textAlign, b = getComputedStyle(cells[i]).textAlign;
                if (a !== b && !(a === 'start' && b === 'left') && !(a === 'left' && b === 'start'))
                  out.push([t, th.innerText, a, b]);
              });
            }
            return [n, out];""")
        assert wrong[1] == [], route
        checked += wrong[0]
    assert checked > 40  # headers compared, numbers among them
    assert console_errors(chromium) == []


def test_sql_page_runs_its_default_query_over_a_topic_that_exists(broker, make_topic, chromium):
    rest = broker.rest
    topic = make_topic(1)
    assert rest.produce_binary(topic, [{"value": b"x"}] * 2, partition=0).status_code == 200
    open_view(chromium, broker.url, "sql")
    query = chromium.find_element(By.ID, "sql-query").get_attribute("value")
    named = query.split('FROM "')[1].split('"')[0]
    assert named in rest.http.get("/topics").json() and "GROUP BY partition" in query
    chromium.find_element(By.ID, "sql-run").click()
    wait_until(lambda: chromium.find_elements(By.ID, "sql-table") or chromium.find_elements(By.CSS_SELECTOR,
               "#sql-result .error"), "the SQL result")
    assert chromium.find_elements(By.CSS_SELECTOR, "#sql-result .error") == []
    assert texts(chromium, "#sql-table th") == ["partition", "records", "first_offset", "last_offset"]

    box = chromium.find_element(By.ID, "sql-query")
    box.clear()
    box.send_keys(f'SELECT partition, count(*) FROM "{topic}" GROUP BY partition')
    wait_until(lambda: rest.http.get(f"/v1/console/topics/{topic}/table").json()["files"] >= 1, "the table")
    chromium.find_element(By.ID, "sql-run").click()
    wait_until(lambda: texts(chromium, "#sql-table tbody td") == ["0", "2"], "the GROUP BY's row")
    assert "num" in chromium.find_element(By.CSS_SELECTOR, "#sql-table tbody td:nth-child(2)").get_attribute("class")
    box.clear()
    box.send_keys(f'DROP TABLE "{topic}"')
    chromium.find_element(By.ID, "sql-run").click()
    wait_until(lambda: "read-only" in chromium.find_element(By.ID, "sql-result").text, "the refusal")
    assert rest.http.get(f"/v1/console/topics/{topic}/partitions").status_code == 200
    assert ["400" in e["message"] and "/v1/console/sql" in e["message"] for e in console_errors(chromium)] == [True]


def test_create_and_delete_a_topic_from_the_console(broker, chromium):
    rest = broker.rest
    name = f"made-in-console-{uuid.uuid4().hex[:8]}"
    console_errors(chromium)  # start from an empty log
    open_view(chromium, broker.url, "topics")
    assert "offsets" in texts(chromium, "#topics th") and "records" not in texts(chromium, "#topics th")
    form = chromium.find_element(By.CSS_SELECTOR, "#create-topic form")
    form.find_element(By.NAME, "topic_name").send_keys(name)
    form.find_element(By.NAME, "partitions_count").send_keys("3")
    Select(form.find_element(By.NAME, "cleanup.policy")).select_by_value("compact")
    chromium.find_element(By.ID, "create-topic-button").click()
    wait_until(lambda: chromium.execute_script("return location.hash") == f"#/topics/{name}"
               and chromium.execute_script(VIEW_STATE) == "ready", "the new topic's page")
    assert texts(chromium, "#partitions tbody tr td:nth-child(1)") == ["0", "1", "2"]
    configs = rest.http.get(f"{rest.v3()}/topics/{name}/configs/cleanup.policy").json()
    assert configs["value"] == "compact"

    open_view(chromium, broker.url, "topics")  # the same name again: the broker's error, shown
    chromium.find_element(By.CSS_SELECTOR, "#create-topic input[name=topic_name]").send_keys(name)
    chromium.find_element(By.ID, "create-topic-button").click()
    wait_until(lambda: "already exists" in chromium.find_element(By.ID, "create-status").text, "the refusal")
    assert ["/topics - " in e["message"] and " 400 " in e["message"] for e in console_errors(chromium)] == [True]

    open_view(chromium, broker.url, f"topics/{name}")
    button = chromium.find_element(By.ID, "delete-topic-button")
    assert not button.is_enabled()  # until the name is typed again
    chromium.find_element(By.CSS_SELECTOR, "#delete-topic input[name=confirm]").send_keys(name)
    assert button.is_enabled()
    button.click()
    wait_until(lambda: texts(chromium, "#topic-deleted") == [f"topic {name} deleted"], "the topics page")
    assert name not in rest.http.get("/topics").json()
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

    for offset in (249, 250):  # small lags: the axis read 1, 1, 1, 0, 0
        commit(rest, group, {(topic, 0): offset})
        run_job(lag.main, "--servers", broker.url, "--data", str(broker.data_dir), "--group", group)
    open_view(chromium, broker.url, f"groups/{group}")
    points = chromium.find_elements(By.CSS_SELECTOR, "#lag-chart .lag-point")
    assert len(points) == 2
    heights = [float(p.get_attribute("cy")) for p in points]
    assert heights[0] < heights[1]  # lag 1, then 0: the second point is lower
    assert texts(chromium, "#lag-chart .chart-y-tick") == ["0", "1"]
    axes = chromium.execute_async_script("""
        const done = arguments[arguments.length - 1];
        import('/console/assets/chart.js').then(m => done(
          [0, 1, 3, 7, 150, 1500].map(v => m.ticks(v, { integer: true }))));""")
    assert axes == [[0, 1], [0, 1], [0, 1, 2, 3], [0, 2, 4, 6, 8], [0, 50, 100, 150], [0, 500, 1000, 1500]]
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
