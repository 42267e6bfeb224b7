"""The dashboard's front end in a real browser (headless Chromium, a real
daphne node): live updates that leave the operator's work alone, htmx
requests that meet a sign-out or a refusal, times and their zone, control
characters, layout at 1280 px and on a phone, dark mode and the keys.

The fixtures (``browser``, ``node``) and helpers are in tests/e2e/browser.py.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import datetime, timedelta, timezone

import pytest
from playwright.sync_api import Browser, Page, expect

from tests.e2e.browser import PASSWORD, USER, kill, push, shot, signed_in, with_operator
from tests.e2e.harness import Cluster, Node, api

pytestmark = pytest.mark.e2e


VIEWER, VIEWER_PASSWORD = "viewer", "e2e-viewer-password"


def make_viewer(cluster: Cluster) -> None:
    """Read-only staff: ``view_dashboard`` and nothing else."""
    code = (
        "from django.contrib.auth.models import Permission, User; "
        f"u = User.objects.create_user({VIEWER!r}, password={VIEWER_PASSWORD!r}, is_staff=True); "
        "u.user_permissions.add(Permission.objects.get(codename='view_dashboard'))"
    )
    made = cluster.manage("shell", "-c", code)
    assert made.returncode == 0, made.stderr.decode()


def sign_in_as_viewer(page: Page, url: str) -> None:
    page.goto(f"{url}/login/")
    page.get_by_label("Username").fill(VIEWER)
    page.get_by_label("Password").fill(VIEWER_PASSWORD)
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("heading", name="Queues")).to_be_visible()


def updates(page: Page, count: int) -> None:
    """Wait until the page has applied ``count`` more live updates."""
    start = int(page.evaluate("Number(document.body.dataset.liveSeq || 0)"))
    page.wait_for_function(f"Number(document.body.dataset.liveSeq || 0) >= {start + count}", timeout=15_000)


# -- 1. live updates leave the operator's work alone ---------------------------------------------


def test_an_open_dead_letter_group_stays_open_while_jobs_keep_failing(
    browser: Browser, node: tuple[Cluster, Node]
) -> None:
    _, server = node
    kill(server, "mail")
    with signed_in(browser, server) as page:
        page.goto(f"{server.url}/dead/")
        group = page.locator("article.group").filter(has_text="mail")
        details = group.locator("details")
        details.locator("summary").click()
        expect(details).to_have_attribute("open", "")
        pre = details.locator("pre.detail")
        # The operator selects part of the traceback to copy it.
        pre.evaluate(
            "el => { const r = document.createRange(); r.selectNodeContents(el);"
            " const s = getSelection(); s.removeAllRanges(); s.addRange(r); }"
        )
        key = group.get_attribute("data-group")
        for n in range(4):
            kill(server, "mail")
            kill(server, f"another-{n}", error=f"other failure {n}")  # new groups arrive around it
            updates(page, 1)
        expect(group.locator(".badge.dead")).to_have_text("5")
        open_groups = page.locator("article.group:has(details[open])")
        expect(open_groups).to_have_count(1)
        assert open_groups.get_attribute("data-group") == key
        assert "upstream said no" in page.evaluate("getSelection().toString()")
        shot(page, "dead-letters-open")


def test_scroll_focus_and_typed_text_survive_live_updates(browser: Browser, node: tuple[Cluster, Node]) -> None:
    _, server = node
    push(server, "bulk", [{"n": n, "pad": "x" * 80} for n in range(60)])
    with signed_in(browser, server) as page:
        # The raw document scrolls inside its own box; updates keep the place.
        page.goto(f"{server.url}/document/")
        viewer = page.locator("pre.viewer")
        viewer.evaluate("el => { el.scrollTop = 900; }")
        for _ in range(3):
            push(server, "bulk", [{"n": "more"}])
            updates(page, 1)
        assert viewer.evaluate("el => el.scrollTop") == 900

        # A focused row link keeps its focus while rows arrive around it.
        page.goto(f"{server.url}/jobs/?queue=bulk")
        link = page.locator("#live-jobs tbody tr[data-job-id] a").nth(2)
        link.focus()
        for _ in range(2):
            push(server, "bulk", [{"n": "more"}])
            updates(page, 1)
        expect(link).to_be_focused()

        # Text typed into a filter while jobs arrive keeps its value, focus and caret.
        page.goto(f"{server.url}/jobs/")
        field = page.get_by_label("Payload contains")
        field.click()
        field.press_sequentially("half-typ")
        for _ in range(3):
            push(server, "bulk", [{"n": "more"}])
            updates(page, 1)
        field.press_sequentially("ed")
        expect(field).to_have_value("half-typed")
        expect(field).to_be_focused()


# -- 2. htmx meets a sign-out or a refusal: the whole page moves ----------------------------------


def test_an_action_after_signing_out_elsewhere_goes_to_sign_in_as_a_whole_page(
    browser: Browser, node: tuple[Cluster, Node]
) -> None:
    _, server = node
    kill(server, "mail")
    with signed_in(browser, server) as page:
        page.goto(f"{server.url}/dead/")
        other = page.context.new_page()
        other.goto(f"{server.url}/")
        other.get_by_role("button", name="Sign out").click()
        expect(other.get_by_role("heading", name="Sign in")).to_be_visible()
        other.close()
        page.get_by_role("button", name="Purge group").click()
        expect(page).to_have_url(f"{server.url}/login/?next=/dead/")
        expect(page.locator("#action-panel")).to_have_count(0)
        expect(page.get_by_role("heading", name="Sign in")).to_have_count(1)
        # Signing in comes back to the page the operator was on.
        page.get_by_label("Username").fill(USER)
        page.get_by_label("Password").fill(PASSWORD)
        page.get_by_role("button", name="Sign in").click()
        expect(page).to_have_url(f"{server.url}/dead/")


def test_a_viewer_who_forces_the_disabled_submit_button_gets_the_page_back(
    browser: Browser, node: tuple[Cluster, Node]
) -> None:
    cluster, server = node
    make_viewer(cluster)
    context = browser.new_context(viewport={"width": 1280, "height": 860})
    try:
        page = context.new_page()
        sign_in_as_viewer(page, server.url)
        page.goto(f"{server.url}/submit/")
        button = page.get_by_role("button", name="Submit")
        expect(button).to_be_disabled()
        expect(page.locator("#id_payload")).to_be_disabled()  # the fields too: nothing here reads as usable
        button.evaluate("b => { b.disabled = false; }")  # as through devtools
        page.locator("fieldset.plain").evaluate("f => { f.disabled = false; }")
        page.locator("#id_queue").fill("forced")
        page.locator("#id_payload").fill("1")
        button.click()
        expect(page.locator(".msg.error")).to_contain_text("Not allowed")
        expect(page).to_have_url(f"{server.url}/submit/")
        expect(page.locator("header.topbar")).to_have_count(1)  # one page, not a page in a page
        assert "forced" not in cluster.document()["queues"]
    finally:
        context.close()


# -- 5. layout: a long queue name at 1280 px, and a phone -----------------------------------------

LONG = "q" + "x" * 99  # the longest valid queue name


def inside_viewport(page: Page, selector: str) -> None:
    """Every element ``selector`` matches lies wholly inside the viewport's
    width as the page is: nothing is scrolled sideways to reach it (a table
    scrolling in its own box would hide it just the same)."""
    width = page.viewport_size["width"] if page.viewport_size else 0
    items = page.locator(selector)
    assert items.count() > 0, selector
    for i in range(items.count()):
        item = items.nth(i)
        box = item.bounding_box()
        assert box is not None, selector
        assert box["x"] >= 0 and box["x"] + box["width"] <= width, (selector, i, box, width)


@pytest.mark.parametrize(("width", "height"), [(1280, 860), (390, 844)])
def test_a_long_queue_name_leaves_the_counts_and_pause_on_screen(
    browser: Browser, node: tuple[Cluster, Node], width: int, height: int
) -> None:
    _, server = node
    push(server, LONG, [{"n": n} for n in range(3)])
    push(server, "emails", [{"n": 1}])
    phone = {"is_mobile": True} if width < 600 else {}
    with signed_in(browser, server, viewport={"width": width, "height": height}, **phone) as page:
        row = f'tr[data-row="{LONG}"]'
        expect(page.locator(row)).to_be_visible()
        inside_viewport(page, f"{row} td.num")
        inside_viewport(page, f"{row} button:has-text('Pause')")
        name = page.locator(f"{row} a.name")
        expect(name).to_have_attribute("title", LONG)
        assert name.evaluate("el => el.scrollWidth > el.clientWidth")  # cut, with an ellipsis
        assert page.evaluate("document.documentElement.scrollWidth") <= width
        if width < 600:
            # Each count says which it is.
            expect(page.locator(f"{row} td.num").first).to_have_attribute("data-label", "Pending")
        shot(page, "overview-long-name" if width > 600 else "overview-phone-cards")
        # The jobs list cuts the name too, and keeps its last column in view.
        page.goto(f"{server.url}/jobs/?queue={LONG}")
        cell = page.locator("#live-jobs tbody td.name").first
        expect(cell).to_have_attribute("title", LONG)
        assert cell.evaluate("el => el.scrollWidth > el.clientWidth")
        inside_viewport(page, "#live-jobs tbody td.payload")
        page.goto(f"{server.url}/")
        page.get_by_role("button", name="Pause").first.click()
        expect(page.get_by_test_id("reason")).to_be_visible()
        inside_viewport(page, "[data-testid=run-action]")


# -- 3. times: one format, the zone labelled, UTC or local per operator ------------------------------


def test_times_show_in_utc_or_in_the_browsers_zone_as_the_operator_chooses(
    browser: Browser, node: tuple[Cluster, Node]
) -> None:
    _, server = node
    job_id = kill(server, "tz")
    # Kolkata is UTC+05:30 all year: no daylight saving to trip on.
    with signed_in(browser, server, timezone_id="Asia/Kolkata") as page:
        page.goto(f"{server.url}/jobs/{job_id}/")
        first = page.locator(".timeline time").first
        expect(first).to_have_text(re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} UTC$"))
        utc_text = first.inner_text()
        iso = first.get_attribute("datetime")
        assert iso is not None
        moment = datetime.fromisoformat(iso.replace("Z", "+00:00"))
        assert utc_text == moment.strftime("%Y-%m-%d %H:%M:%S.") + f"{moment.microsecond // 1000:03d} UTC"

        toggle = page.locator("[data-toggle-tz]")
        expect(toggle).to_have_text("Times: UTC")
        toggle.click()
        expect(toggle).to_have_text("Times: local")
        local = moment.astimezone(timezone(timedelta(hours=5, minutes=30)))
        expected = local.strftime("%Y-%m-%d %H:%M:%S.") + f"{local.microsecond // 1000:03d} UTC+05:30"
        expect(first).to_have_text(expected)
        expect(first).to_have_attribute("title", utc_text)
        shot(page, "job-local-time")

        # The choice holds on other pages, and after live updates redraw them.
        page.goto(f"{server.url}/document/")
        written = page.locator("time[data-when]").first
        expect(written).to_have_text(re.compile(r"UTC\+05:30$"))
        push(server, "tz", [{"n": 2}])
        updates(page, 1)
        expect(written).to_have_text(re.compile(r"UTC\+05:30$"))
        page.locator("[data-toggle-tz]").click()
        expect(written).to_have_text(re.compile(r"\d UTC$"))


# -- 7. dark mode ------------------------------------------------------------------------------------


def background(page: Page) -> str:
    return str(page.evaluate("getComputedStyle(document.documentElement).backgroundColor"))


def test_dark_mode_follows_the_system_and_the_toggle_is_remembered(
    browser: Browser, node: tuple[Cluster, Node]
) -> None:
    _, server = node
    with signed_in(browser, server, color_scheme="dark") as page:
        dark = background(page)
        assert dark == "rgb(17, 20, 24)"
        shot(page, "overview-dark")
        toggle = page.locator("[data-toggle-theme]")
        expect(toggle).to_have_attribute("aria-pressed", "true")
        toggle.click()
        assert background(page) == "rgb(245, 246, 248)"
        # Remembered in this browser, and applied before the page is drawn.
        page.goto(f"{server.url}/jobs/")
        assert page.evaluate("document.documentElement.dataset.theme") == "light"
        assert background(page) == "rgb(245, 246, 248)"
        page.locator("[data-toggle-theme]").click()  # back to the system's: follow it again
        assert background(page) == dark
        assert page.evaluate("localStorage.getItem('queueadmin-theme')") is None
    with signed_in(browser, server, color_scheme="light") as page:
        assert background(page) == "rgb(245, 246, 248)"
        page.locator("[data-toggle-theme]").click()
        assert background(page) == "rgb(17, 20, 24)"
        page.reload()
        assert page.evaluate("document.documentElement.dataset.theme") == "dark"


# -- 8. keyboard shortcuts ----------------------------------------------------------------------------


def test_keyboard_shortcuts_move_open_search_and_go_but_never_while_typing(
    browser: Browser, node: tuple[Cluster, Node]
) -> None:
    _, server = node
    push(server, "keys", [{"n": n} for n in range(3)])
    with signed_in(browser, server) as page:
        page.keyboard.press("g")
        page.keyboard.press("j")
        expect(page).to_have_url(f"{server.url}/jobs/")
        rows = page.locator("#live-jobs tbody tr[data-job-id]")
        expect(rows).to_have_count(3)
        page.keyboard.press("j")
        page.keyboard.press("j")
        expect(page.locator("tr.key-current")).to_have_count(1)
        second = rows.nth(1)
        expect(second).to_have_class(re.compile("key-current"))
        page.keyboard.press("k")
        expect(rows.nth(0)).to_have_class(re.compile("key-current"))
        page.keyboard.press("j")
        push(server, "other", [1])  # a live update keeps the highlight on its row
        updates(page, 1)
        expect(second).to_have_class(re.compile("key-current"))
        job_id = second.get_attribute("data-job-id")
        page.keyboard.press("Enter")
        expect(page).to_have_url(f"{server.url}/jobs/{job_id}/")

        # / goes to the search; typed letters are text, not shortcuts.
        page.keyboard.press("/")
        expect(page).to_have_url(f"{server.url}/jobs/#search")
        field = page.get_by_label("Payload contains")
        expect(field).to_be_focused()
        page.keyboard.type("g j?k")
        expect(field).to_have_value("g j?k")
        expect(page.locator("dialog.keys-help")).to_have_count(0)
        page.keyboard.press("Escape")  # leaves the field: the keys work again
        expect(field).not_to_be_focused()
        expect(field).to_have_value("g j?k")

        page.keyboard.press("?")
        help_box = page.locator("dialog.keys-help")
        expect(help_box).to_be_visible()
        expect(help_box).to_contain_text("Dead letters")
        shot(page, "keyboard-help")
        page.keyboard.press("Escape")
        expect(help_box).to_be_hidden()
        for letter, path in (("d", "/dead/"), ("w", "/workers/"), ("a", "/audit/"), ("s", "/submit/"), ("o", "/")):
            page.keyboard.press("g")
            page.keyboard.press(letter)
            expect(page).to_have_url(f"{server.url}{path}")


def test_keyboard_triage_selects_rows_and_opens_the_dry_run_of_an_action(
    browser: Browser, node: tuple[Cluster, Node]
) -> None:
    cluster, server = node
    dead = [kill(server, "triage") for _ in range(3)]
    with signed_in(browser, server) as page:
        page.goto(f"{server.url}/jobs/?queue=triage&status=dead")
        rows = page.locator("#live-jobs tbody tr[data-job-id]")
        expect(rows).to_have_count(3)
        page.keyboard.press("r")  # nothing selected: nothing opens
        expect(page.get_by_test_id("plan-count")).to_have_count(0)
        page.keyboard.press("j")
        page.keyboard.press("x")
        page.keyboard.press("j")
        page.keyboard.press("x")
        expect(page.get_by_text("2 selected")).to_be_visible()
        page.keyboard.press("x")  # again: unselected
        expect(page.get_by_text("1 selected")).to_be_visible()
        page.keyboard.press("k")
        page.keyboard.press("j")
        page.keyboard.press("j")
        page.keyboard.press("x")
        expect(page.get_by_text("2 selected")).to_be_visible()
        chosen = [rows.nth(0).get_attribute("data-job-id"), rows.nth(2).get_attribute("data-job-id")]
        page.keyboard.press("p")
        expect(page.get_by_test_id("plan-count")).to_have_text("2 jobs would be removed for good.")
        page.keyboard.press("Escape")  # closes the dry run, as its Cancel does; nothing ran
        expect(page.get_by_test_id("plan-count")).to_have_count(0)
        expect(page.get_by_text("2 selected")).to_be_visible()
        page.keyboard.press("r")
        expect(page.get_by_test_id("plan-count")).to_have_text("2 jobs would be moved back to pending.")
        page.get_by_test_id("reason").fill("keyboard triage")
        page.get_by_test_id("run-action").click()
        expect(page.locator(".msg")).to_have_text("Requeued 2 jobs.")
        statuses = {j["id"]: j["status"] for j in cluster.document()["jobs"]}
        assert sorted(i for i in dead if statuses.get(i) == "pending") == sorted(chosen)
        # The next dry run takes the last action's message away: it would read as this one's result.
        page.keyboard.press("j")
        page.keyboard.press("x")
        page.keyboard.press("p")
        expect(page.get_by_test_id("plan-count")).to_have_text("1 job would be removed for good.")
        expect(page.locator(".msg")).to_have_count(0)
        page.keyboard.press("Escape")
        page.keyboard.press("?")
        expect(page.locator("dialog.keys-help")).to_contain_text("Purge the selected rows (dry run first)")


def test_an_operator_freezes_live_updates_to_read_and_unfreezes_them(
    browser: Browser, node: tuple[Cluster, Node]
) -> None:
    _, server = node
    with signed_in(browser, server) as page:
        toggle = page.locator("[data-freeze-toggle]")
        expect(toggle).to_have_text("Freeze")
        toggle.click()
        expect(toggle).to_have_attribute("aria-pressed", "true")
        push(server, "while-paused", [1])
        # The update arrives and is held: the button counts it, the page does not change.
        expect(toggle).to_have_text(re.compile(r"Unfreeze \(\d+ held\)"), timeout=10_000)
        expect(page.locator('tr[data-row="while-paused"]')).to_have_count(0)
        toggle.click()
        expect(page.locator('tr[data-row="while-paused"]')).to_be_visible()
        expect(toggle).to_have_text("Freeze")
        # The f key does the same; typing an f in a field does not.
        page.keyboard.press("f")
        expect(toggle).to_have_attribute("aria-pressed", "true")
        push(server, "by-key", [1])
        expect(toggle).to_have_text(re.compile(r"Unfreeze \(\d+ held\)"), timeout=10_000)
        page.keyboard.press("f")
        expect(page.locator('tr[data-row="by-key"]')).to_be_visible()
        page.keyboard.press("/")  # the jobs page's search field
        page.keyboard.type("f")
        expect(page.locator("[data-freeze-toggle]")).to_have_attribute("aria-pressed", "false")


def test_the_overview_warns_of_a_large_document_and_says_what_holds_it(
        browser: Browser, cluster_factory: Callable[..., Cluster]) -> None:
    """20,000 jobs scheduled an hour ahead stay in queue.json on a node with
    delayed segments off (QUEUE_DELAYED_HORIZON_SECONDS=0): ~9 MB that every
    commit writes. The overview warns, names the delayed jobs and their queue,
    and says what to set."""
    server = with_operator(cluster_factory(QUEUE_DELAYED_HORIZON_SECONDS="0"))[1]
    for start in range(0, 20_000, 1_000):
        jobs = [{"payload": {"n": n, "text": "x" * 300}, "delay_seconds": 3600} for n in range(start, start + 1_000)]
        assert api(server, "POST", "/api/v1/jobs", {"queue": "later", "jobs": jobs}).status_code == 201
    with signed_in(browser, server) as page:
        page.goto(f"{server.url}/")
        alert = page.locator("#live-alerts .alert-warn", has_text="every commit writes all of it")
        expect(alert).to_contain_text(re.compile(r"queue\.json is (9|10|11)\.\d MB,"))  # as on the Broker card
        expect(alert).to_contain_text("20,000 delayed jobs (later 20,000)")
        expect(alert).to_contain_text("with QUEUE_DELAYED_HORIZON_SECONDS=0: set it")
        shot(page, "overview-large-document")


def test_the_audit_log_fits_a_phone_whatever_its_targets_hold(browser: Browser, node: tuple[Cluster, Node]) -> None:
    _, server = node
    kill(server, "emails", error="queueadmin.integrations.payments.PaymentGatewayTimeoutError: gave up after 30 s")
    with signed_in(browser, server, viewport={"width": 390, "height": 844}, is_mobile=True) as page:
        page.goto(f"{server.url}/dead/")
        page.locator("article.group").first.get_by_role("button", name="Purge").click()
        page.get_by_test_id("reason").fill("a known outage")
        page.get_by_test_id("run-action").click()
        expect(page.locator(".msg")).to_contain_text("urged")
        page.goto(f"{server.url}/audit/")
        # The entry's target: the group's signature, one long dotted word.
        expect(page.locator("table.audit tbody tr").first).to_contain_text("PaymentGatewayTimeoutError")
        assert page.evaluate("document.documentElement.scrollWidth") <= 390
        shot(page, "audit-phone-cards")
