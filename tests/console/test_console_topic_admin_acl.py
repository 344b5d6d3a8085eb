"""Creating and deleting a topic from the console asks for the same ACLs as v3's API.

A SASL listener with ACLs on (tests/authz's secured broker); alice signs in through the
console's own form and is refused until the admin grants Create, then Delete, on her
topics. The page only calls v3's CreateTopics and DeleteTopics routes, so the refusals
are the broker's.
"""

from __future__ import annotations

import uuid
from typing import Iterator

import pytest
from authz.test_over_sasl import Secured, secured_broker
from security.support import PASSWORD
from selenium.webdriver.common.by import By

from tests.integration.support import wait_until

from .support import VIEW_STATE, open_view

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secured]:
    yield from secured_broker(tmp_path_factory.mktemp("console-topic-acl"), ("admin", "alice"))


def text_of(driver, element_id: str) -> str:
    return driver.execute_script("const e = document.getElementById(arguments[0]); return e ? e.innerText : ''",
                                 element_id)


def test_create_and_delete_need_the_same_acls_as_the_api(secured, chromium):
    name = f"alice-{uuid.uuid4().hex[:8]}"
    open_view(chromium, secured.url, "signin")
    chromium.find_element(By.NAME, "user").send_keys("alice")
    chromium.find_element(By.NAME, "secret").send_keys(PASSWORD)
    chromium.find_element(By.CSS_SELECTOR, "#view form button").click()
    wait_until(lambda: chromium.find_element(By.ID, "signin-link").text == "User:alice", "alice signed in")
    try:
        open_view(chromium, secured.url, "topics")
        chromium.find_element(By.CSS_SELECTOR, "#create-topic input[name=topic_name]").send_keys(name)
        chromium.find_element(By.ID, "create-topic-button").click()
        wait_until(lambda: "AUTHORIZATION_FAILED" in text_of(chromium, "create-status"), "the refusal")
        assert not secured.exists(name)

        for operation in ("CREATE", "DESCRIBE", "DESCRIBE_CONFIGS"):
            secured.grant("alice", operation, "TOPIC", "alice-", pattern="PREFIXED")
        chromium.find_element(By.ID, "create-topic-button").click()
        wait_until(lambda: chromium.execute_script("return location.hash") == f"#/topics/{name}"
                   and chromium.execute_script(VIEW_STATE) == "ready", "the new topic's page")
        assert secured.exists(name)

        chromium.find_element(By.CSS_SELECTOR, "#delete-topic input[name=confirm]").send_keys(name)
        chromium.find_element(By.ID, "delete-topic-button").click()
        wait_until(lambda: "TOPIC_AUTHORIZATION_FAILED" in text_of(chromium, "delete-status"), "the refusal")
        assert secured.exists(name)

        secured.grant("alice", "DELETE", "TOPIC", "alice-", pattern="PREFIXED")
        chromium.find_element(By.ID, "delete-topic-button").click()
        wait_until(lambda: text_of(chromium, "topic-deleted") == f"topic {name} deleted", "the topics page")
        assert not secured.exists(name)
    finally:
        chromium.execute_script("sessionStorage.clear()")  # later tests go anonymous
