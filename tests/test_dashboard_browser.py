"""The dashboard in a real headless Chromium: the page loads, an operator logs in, a dead row is
retried by a click and the counts change; a form posted from another site is refused.

The browser is Debian's `chromium` driven through its `chromium-driver`, both named by path, so
Selenium Manager never runs and nothing is fetched from the internet (`SE_OFFLINE` says the same
to Selenium). The dashboard is served by uvicorn in a thread, over a SQLite file, on a socket this
test binds and listens on first, so the browser's first request waits in the socket's backlog
instead of the test waiting for the server. Without Chromium the test skips saying so, except in
CI (CI=true), where it fails. Every wait is bounded.
"""

import asyncio
import os
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

import nilo_job as job

CHROMIUM = os.environ.get("NILO_TEST_CHROMIUM", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("NILO_TEST_CHROMEDRIVER", "/usr/bin/chromedriver")
SECRET = "correct horse battery staple"
WAIT_S = 30  # the longest any one step may take


class Rejected(Exception):
    pass


@dataclass
class Mail:
    nilo_job = "mail"
    retry = job.Retry.NONE

    to: str

    def run(self) -> None:
        raise Rejected("no such address")


def _need(path: str) -> str | None:
    return None if os.access(path, os.X_OK) else f"{path} is missing"


@pytest.fixture
def browser(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[object]:
    """A headless Chromium through its ChromeDriver, with a profile of its own."""
    missing = [reason for path in (CHROMIUM, CHROMEDRIVER) if (reason := _need(path))]
    if missing:
        why = f"{'; '.join(missing)} (apt-get install chromium chromium-driver)"
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI runs the browser test: {why}")
        pytest.skip(why)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    monkeypatch.setenv("SE_OFFLINE", "true")
    monkeypatch.setenv("SE_AVOID_STATS", "true")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for argument in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-default-apps",
        "--disable-domain-reliability",
        "--disable-client-side-phishing-detection",
        "--no-pings",
        "--disable-extensions",
        "--no-first-run",
        "--no-default-browser-check",
        f"--user-data-dir={tmp_path / 'profile'}",
    ):
        options.add_argument(argument)
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    try:
        driver.set_page_load_timeout(WAIT_S)
        yield driver
    finally:
        driver.quit()


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[str, job.Jobs, int]]:
    """The dashboard of a queue over a SQLite file holding one dead row, served by uvicorn:
    its base URL, the queue, and the dead row's id."""
    import uvicorn

    from nilo_job.dashboard import dashboard_app

    jobs = job.Jobs(kinds=[Mail], store=job.Table(f"sqlite:///{tmp_path}/q.db"))

    async def prepare() -> int:
        await jobs.store.create_missing()
        row = await jobs.push(Mail(to="bad@example.com"))
        assert await jobs.drain() == 1
        return row

    row = asyncio.run(prepare())
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    port = sock.getsockname()[1]
    config = uvicorn.Config(
        dashboard_app(jobs, secret=SECRET), log_config=None, access_log=False, lifespan="off"
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{port}", jobs, row
    finally:
        server.should_exit = True
        thread.join(WAIT_S)
        sock.close()
        asyncio.run(jobs.store.close())
        assert not thread.is_alive(), "uvicorn did not stop"


def test_a_dead_row_is_retried_by_a_click(
    browser: object, served: tuple[str, job.Jobs, int]
) -> None:
    from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.remote.webdriver import WebDriver
    from selenium.webdriver.support.ui import WebDriverWait

    assert isinstance(browser, WebDriver)
    base, jobs, row = served
    wait = WebDriverWait(
        browser,
        WAIT_S,
        ignored_exceptions=(NoSuchElementException, StaleElementReferenceException),
    )

    def text_of(element_id: str) -> str:
        return str(browser.find_element(By.ID, element_id).text)

    def counts() -> tuple[str, str, str]:
        return (text_of("count-queued"), text_of("count-running"), text_of("count-dead"))

    # The page loads, read by anyone: one dead row, and no button until the operator logs in.
    browser.get(f"{base}/")
    assert browser.title == "nilo-job"
    assert counts() == ("0", "0", "1")
    # The error's name, its message, and its traceback folded away until asked for.
    assert browser.find_element(By.ID, f"row-{row}").text.split()[:7] == [
        str(row), "mail", "Rejected", "no", "such", "address", "traceback",
    ]  # fmt: skip
    assert not browser.find_element(By.CSS_SELECTOR, f"#row-{row} pre").is_displayed()
    browser.find_element(By.CSS_SELECTOR, f"#row-{row} summary").click()
    trace = browser.find_element(By.CSS_SELECTOR, f"#row-{row} pre").text
    assert trace.startswith("Traceback (most recent call last):\n")
    assert trace.endswith("Rejected: no such address")
    assert browser.find_elements(By.ID, f"retry-{row}") == []
    # The stylesheet loaded under the page's Content-Security-Policy.
    collapse = browser.execute_script(
        "return getComputedStyle(document.querySelector('table')).borderCollapse"
    )
    assert collapse == "collapse"

    # Log in with the secret: the session is an HttpOnly, SameSite=Strict cookie.
    browser.find_element(By.ID, "secret").send_keys(SECRET)
    browser.find_element(By.ID, "login").click()
    wait.until(lambda _: text_of("operator") == "Logged in")
    assert text_of("flash") == "Logged in: retry and cancel are on."
    cookie = browser.get_cookie("nilo_job_dashboard")
    assert cookie is not None
    assert (cookie["httpOnly"], cookie["sameSite"], cookie["path"]) == (True, "Strict", "/")

    # Retry the dead row by a click: the page comes back with the counts changed.
    browser.find_element(By.ID, f"retry-{row}").click()
    wait.until(lambda _: text_of("count-dead") == "0")
    assert counts() == ("1", "0", "0")
    assert text_of("flash") == f"Row {row} is queued again, from its first attempt."
    assert browser.find_elements(By.ID, f"retry-{row}") == []
    assert browser.find_element(By.ID, f"cancel-{row}").text == "Cancel"
    assert asyncio.run(jobs.stats()) == (1, 0, 0)


def test_a_form_from_another_site_is_refused(
    browser: object, served: tuple[str, job.Jobs, int]
) -> None:
    from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.remote.webdriver import WebDriver
    from selenium.webdriver.support.ui import WebDriverWait

    assert isinstance(browser, WebDriver)
    base, jobs, row = served
    wait = WebDriverWait(
        browser,
        WAIT_S,
        ignored_exceptions=(NoSuchElementException, StaleElementReferenceException),
    )
    # The operator is logged in ...
    browser.get(f"{base}/")
    browser.find_element(By.ID, "secret").send_keys(SECRET)
    browser.find_element(By.ID, "login").click()
    wait.until(lambda _: browser.find_element(By.ID, "operator").text == "Logged in")
    # ... and another page (another origin) posts a retry form to the dashboard.
    browser.get(
        "data:text/html,<form method=post "
        f"action='{base}/rows/{row}/retry'><input name=csrf value=x>"
        "<button id=go>go</button></form>"
    )
    browser.find_element(By.ID, "go").click()
    wait.until(lambda _: "refused" in browser.find_element(By.TAG_NAME, "body").text)
    assert browser.find_element(By.TAG_NAME, "body").text == (
        "refused: the form was not sent from this dashboard"
    )
    assert asyncio.run(jobs.stats()) == (0, 0, 1)
