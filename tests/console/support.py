"""Helpers of the console tests: open a view and wait for it, read the browser's log."""

from __future__ import annotations

from typing import Any

from tests.integration.support import wait_until

#: A view is drawn once ``#view`` leaves ``data-state="loading"``.
VIEW_STATE = "return document.getElementById('view') && document.getElementById('view').dataset.state"


def open_view(driver: Any, base_url: str, route: str) -> str:
    """Load ``/console#/<route>`` afresh and wait until the view is drawn; its state."""
    driver.get("about:blank")
    driver.get(f"{base_url}/console#/{route}")
    return wait_until(lambda: (driver.execute_script(VIEW_STATE) or "loading") != "loading" and
                      driver.execute_script(VIEW_STATE), f"the console's {route} view", timeout_s=60)


def console_errors(driver: Any) -> list[dict]:
    """Entries of the browser's console log at level SEVERE since the last call."""
    return [e for e in driver.get_log("browser") if e.get("level") == "SEVERE"]


def commit(rest: Any, group: str, offsets: dict[tuple[str, int], int]) -> None:
    """A standalone commit (generation -1) through /v1's group protocol."""
    body = {"offsets": [{"topic": t, "partition": p, "offset": o} for (t, p), o in offsets.items()]}
    resp = rest.http.post(f"/v1/groups/{group}/commit", json=body)
    assert resp.status_code == 200, resp.text


def committed(rest: Any, group: str, topic: str, partitions: list[int]) -> dict[int, int]:
    resp = rest.http.post(f"/v1/groups/{group}/committed",
                          json={"partitions": [{"topic": topic, "partition": p} for p in partitions]})
    assert resp.status_code == 200, resp.text
    return {o["partition"]: o["offset"] for o in resp.json()["offsets"]}
