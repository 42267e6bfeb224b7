"""Browser fixtures shared by the dashboard's browser tests: headless Chromium
(Debian's package, driven by Playwright through ``executable_path``), a node
with a superuser, and a signed-in page.

With ``QUEUEADMIN_SCREENSHOTS=<folder>`` the tests save the pages they visit
there through ``shot`` (``make screenshots`` writes docs/screenshots/).
"""

from __future__ import annotations

import atexit
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser, Page, expect, sync_playwright

from tests.e2e.harness import ROOT, Cluster, Node, api

USER = "operator"
PASSWORD = "e2e-operator-password"
CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
# What the environment guide says headless Chromium needs on this machine:
# no sandbox as root, and no background traffic to a closed network.
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
SHOTS = os.environ.get("QUEUEADMIN_SCREENSHOTS")
# Headless pages are always "visible"; these make the page believe otherwise.
HIDE = (
    "Object.defineProperty(document, 'hidden', {value: true, configurable: true});"
    "document.dispatchEvent(new Event('visibilitychange'))"
)
SHOW = (
    "Object.defineProperty(document, 'hidden', {value: false, configurable: true});"
    "document.dispatchEvent(new Event('visibilitychange'))"
)


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    if not Path(CHROMIUM).exists() and shutil.which(CHROMIUM) is None:
        pytest.fail(f"Chromium is not installed at {CHROMIUM} (apt-get install chromium; .ci/run does)")
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        yield chromium
        chromium.close()


@pytest.fixture
def node(cluster_factory: Callable[..., Cluster]) -> tuple[Cluster, Node]:
    return with_operator(cluster_factory())


class _Template:
    """A migrated SQLite database with the operator in it, made once a test
    session: migrating and adding the superuser take two Django start-ups
    (~5 s) per browser test, ~40 of them in CI's 30 minutes."""

    path: Path | None = None


def _sqlite_path(cluster: Cluster) -> Path | None:
    url = cluster.env.get("DATABASE_URL", "")
    return Path(url.removeprefix("sqlite:///")) if url.startswith("sqlite:///") else None


def with_operator(cluster: Cluster, **node_options: Any) -> tuple[Cluster, Node]:
    """Migrate ``cluster``'s database, add the superuser the browser signs in as, and return it with a node
    (started with ``node_options``, see Cluster.node). A fresh SQLite database is a copy of the session's first
    one made this way."""
    db = _sqlite_path(cluster)
    if db is not None and _Template.path is not None and not db.exists():
        shutil.copyfile(_Template.path, db)
        return cluster, cluster.node(**node_options)
    migrate = cluster.manage("migrate", "--noinput")
    assert migrate.returncode == 0, migrate.stderr.decode()
    made = subprocess.run(
        [sys.executable, "manage.py", "createsuperuser", "--noinput", "--username", USER, "--email", "op@example.com"],
        cwd=ROOT,
        env={**cluster.env, "DJANGO_SUPERUSER_PASSWORD": PASSWORD},
        capture_output=True,
        timeout=60,
    )
    assert made.returncode == 0, made.stderr.decode()
    if db is not None and _Template.path is None:
        template = Path(tempfile.mkdtemp(prefix="queueadmin-e2e-db-")) / "operator.sqlite3"
        shutil.copyfile(db, template)
        atexit.register(shutil.rmtree, template.parent, ignore_errors=True)
        _Template.path = template
    return cluster, cluster.node(**node_options)


@contextmanager
def signed_in(browser: Browser, server: Node, *, user: str = USER, **context_options: Any) -> Iterator[Page]:
    """A new browser context (1280 px wide unless told), signed in as ``user`` (whose password is
    ``PASSWORD``) on ``server``'s overview."""
    context = browser.new_context(**{"viewport": {"width": 1280, "height": 860}, **context_options})
    try:
        page = context.new_page()
        sign_in(page, server.url, user=user)
        yield page
    finally:
        context.close()


def shot(page: Page, name: str) -> None:
    if SHOTS:
        Path(SHOTS).mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(Path(SHOTS) / f"{name}.png"), full_page=True)


def sign_in(page: Page, url: str, *, user: str = USER) -> None:
    page.goto(f"{url}/")
    expect(page).to_have_url(f"{url}/login/?next=/")
    page.get_by_label("Username").fill(user)
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("heading", name="Queues")).to_be_visible()
    expect(page.locator("#live-state")).to_have_attribute("data-state", "live")


def push(server: Node, queue: str, payloads: list[object], **fields: object) -> None:
    jobs = [{"payload": p, **fields} for p in payloads]
    assert api(server, "POST", "/api/v1/jobs", {"queue": queue, "jobs": jobs}).status_code == 201


def kill(server: Node, queue: str, error: str = "boom: upstream said no") -> str:
    """Push one job with one attempt, claim it and fail it: a dead letter."""
    push(server, queue, [{"n": 1}], max_attempts=1)
    [job] = api(server, "POST", "/api/v1/claim", {"worker": "w", "queues": [queue]}).json()["jobs"]
    answer = api(server, "POST", f"/api/v1/jobs/{job['id']}/fail", {"lease": job["lease"], "error": error})
    assert answer.json()["status"] == "dead"
    return str(job["id"])


def submit(page: Page, url: str, queue: str, payload: str, max_attempts: str = "") -> str:
    page.goto(f"{url}/submit/")
    page.locator("#id_queue").fill(queue)
    page.locator("#id_payload").fill(payload)
    page.locator("#id_max_attempts").fill(max_attempts)
    page.get_by_role("button", name="Submit").click()
    created = page.get_by_test_id("created-id")
    expect(created).to_be_visible()
    return created.inner_text()


def set_on_queue_page(page: Page, form: str, fields: dict[str, str], *, button: str, plan_id: str, plan: str,
                      reason: str, done: str) -> None:
    """Fill the queue page's form ``form`` (a test id) with ``fields``, check that its dry run (test id
    ``plan_id``) says ``plan``, and confirm it with ``reason``: the page then says ``done``."""
    found = page.get_by_test_id(form)
    for name, value in fields.items():
        found.locator(f'input[name="{name}"]').fill(value)
    found.get_by_role("button", name=button).click()
    expect(page.get_by_test_id(plan_id)).to_contain_text(plan)
    page.get_by_test_id("reason").fill(reason)
    page.get_by_test_id("run-action").click()
    expect(page.locator(".msg")).to_have_text(done)
