"""Browser tests: real Chromium (Debian's /usr/bin/chromium) driven by Playwright's sync API against
pytest-django's live server. Run them with `-m e2e`; the default run deselects them.

Playwright's sync API runs an event loop in the test thread, so Django's async-safety guard would
refuse ORM calls there; the tests are synchronous code, hence DJANGO_ALLOW_ASYNC_UNSAFE, set while
the browser runs (not at import, which would switch the guard off for the whole suite).
"""

import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    report = yield
    setattr(item, f"report_{report.when}", report)
    return report


@pytest.fixture(scope="session")
def browser() -> Iterator[Any]:
    """One headless Chromium for the session. Never downloads a browser: the system one or nothing."""
    if not (os.access(CHROMIUM, os.X_OK) or shutil.which("chromium")):
        pytest.fail(f"{CHROMIUM} is missing: install Debian's chromium package to run the e2e tests")
    from playwright.sync_api import expect, sync_playwright

    expect.set_options(timeout=15_000)
    previous = os.environ.get("DJANGO_ALLOW_ASYNC_UNSAFE")
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    try:
        with sync_playwright() as playwright:
            chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            try:
                yield chromium
            finally:
                chromium.close()
    finally:
        if previous is None:
            os.environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
        else:
            os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = previous


@pytest.fixture
def new_page(browser: Any, request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[[], Any]]:
    """Pages in fresh browser contexts (separate cookie jars); screenshots of each land in
    tmp_path when the test fails."""
    contexts: list[Any] = []
    pages: list[Any] = []

    def make() -> Any:
        context = browser.new_context(viewport={"width": 1280, "height": 900})
        context.set_default_timeout(15_000)
        contexts.append(context)
        page = context.new_page()
        pages.append(page)
        return page

    yield make
    report = getattr(request.node, "report_call", None)
    if report is not None and report.failed:
        for index, page in enumerate(pages):
            try:
                path = tmp_path / f"failure-{index}.png"
                page.screenshot(path=str(path), full_page=True)
                print(f"screenshot: {path}")
            except Exception as exc:
                print(f"no screenshot of page {index}: {exc}")
    for context in contexts:
        context.close()
