"""The audit log's export (``/audit/export/``): the entries the audit page's
filters select, on every page, each with every job id, as CSV or JSON.

Entries are made as an operator makes them, through the dashboard's actions
against a real broker (memory store).
"""

from __future__ import annotations

import csv
import io
import re
from typing import Any

import orjson
import pytest
from django.test import Client

from engine import Broker
from engine.ops import claim_op, fail_op, push_op
from queueadmin.dashboard import auditlog
from queueadmin.models import AuditEntry
from tests.queueadmin.dashboard_fixtures import act, client_for, kill, make_user, push


def export(client: Client, query: str = "") -> Any:
    response = client.get(f"/audit/export/?{query}")
    assert response.status_code == 200, response
    return response


def body(response: Any) -> bytes:
    return b"".join(response.streaming_content)


def csv_rows(response: Any) -> list[dict[str, str]]:
    assert response["Content-Type"] == "text/csv; charset=utf-8"
    return list(csv.DictReader(io.StringIO(body(response).decode())))


def dead_with_id(broker: Broker, queue: str, job_id: str) -> str:
    """A dead letter whose id the pusher chose."""
    broker.execute(push_op(queue, ["x"], policy=broker.policy, ids=[job_id], max_attempts=1))
    [claimed] = broker.execute(claim_op("w", [queue], policy=broker.policy))
    broker.execute(fail_op(claimed.id, claimed.lease, error="boom", retry_in_seconds=None, policy=broker.policy))
    return job_id


def test_the_export_holds_every_entry_the_page_lists_with_every_job_id(broker: Broker, operator: Client,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(auditlog, "CHUNK", 2)  # three entries: read in two chunks
    push(broker, "q", [1])
    act(operator, action="pause", queue="q", reason="deploying")
    many = [kill(broker, "d") for _ in range(25)]  # more ids than the page shows for an entry (20)
    act(operator, action="requeue", ids="\n".join(many), reason="upstream fixed")
    act(operator, action="resume", queue="q", reason="deployed")

    response = export(operator)
    assert re.fullmatch(r'attachment; filename="queueadmin-audit-\d{8}T\d{6}Z\.csv"', response["Content-Disposition"])
    rows = csv_rows(response)
    assert list(rows[0]) == list(auditlog.COLUMNS)
    assert [(r["action"], r["username"], r["reason"]) for r in rows] == [
        ("resume", "operator", "deployed"), ("requeue", "operator", "upstream fixed"),
        ("pause", "operator", "deploying")]
    requeue = rows[1]
    assert sorted(requeue["job_ids"].split(" ")) == sorted(many) and requeue["count"] == "25"
    assert requeue["outcome"] == "ok" and requeue["seq"] == str(AuditEntry.objects.get(action="requeue").seq)
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", requeue["created_at"])
    assert rows[0]["job_ids"] == "" and rows[0]["queue"] == "q"

    # JSON: the same entries, with the ids as a list.
    response = export(operator, "format=json")
    assert response["Content-Type"] == "application/json"
    assert response["Content-Disposition"].endswith('.json"')
    records = orjson.loads(body(response))
    assert [r["action"] for r in records] == ["resume", "requeue", "pause"]
    assert sorted(records[1]["job_ids"]) == sorted(many) and records[1]["count"] == 25
    assert records[0]["job_ids"] == [] and records[0]["seq"] == AuditEntry.objects.get(action="resume").seq


def test_the_export_takes_the_pages_filters_and_the_page_links_to_it(broker: Broker, operator: Client) -> None:
    push(broker, "a", [1])
    push(broker, "b", [1])
    act(operator, action="pause", queue="a", reason="pause a")
    act(operator, action="pause", queue="b", reason="pause b")
    act(operator, action="resume", queue="a", reason="resume a")
    dead = kill(broker, "c")
    act(operator, action="purge", ids=dead, reason="gone")

    assert [r["reason"] for r in csv_rows(export(operator, "queue=a"))] == ["resume a", "pause a"]
    assert [r["reason"] for r in csv_rows(export(operator, "action=pause"))] == ["pause b", "pause a"]
    assert [r["reason"] for r in csv_rows(export(operator, f"job={dead}"))] == ["gone"]
    assert csv_rows(export(operator, "outcome=failed")) == []

    page = operator.get("/audit/?queue=a&action=pause").content.decode()
    link = re.search(r'data-testid="audit-export">(.*?)</p>', page, re.S)
    assert link is not None and "Export this entry:" in re.sub(r"\s+", " ", "Export " + link.group(1))
    hrefs = re.findall(r'href="([^"]+)"', link.group(1))
    assert hrefs == ["/audit/export/?action=pause&amp;queue=a&amp;format=csv",
                     "/audit/export/?action=pause&amp;queue=a&amp;format=json"]
    assert [r["reason"] for r in csv_rows(operator.get(hrefs[0].replace("&amp;", "&")))] == ["pause a"]
    two = re.sub(r"\s+", " ", operator.get("/audit/?queue=a").content.decode())
    assert 'data-testid="audit-export">Export these 2 entries:' in two
    # Nothing matches: nothing to export, and the list says the filters match nothing.
    none = operator.get("/audit/?queue=nonesuch").content.decode()
    assert 'data-testid="audit-export"' not in none and "No entries match these filters." in none


def test_a_csv_cell_a_spreadsheet_would_run_is_written_as_text(broker: Broker, operator: Client) -> None:
    """Reasons are typed by operators and ids chosen by pushers: neither may
    become a formula when the export is opened in a spreadsheet."""
    job_id = dead_with_id(broker, "q", "-2-3")
    act(operator, action="requeue", ids=job_id, reason='=HYPERLINK("http://evil.example","x")')

    [row] = csv_rows(export(operator))
    assert row["reason"] == '\'=HYPERLINK("http://evil.example","x")'
    assert row["job_ids"] == "'-2-3"
    # JSON is data, not a spreadsheet: written as they are.
    [record] = orjson.loads(body(export(operator, "format=json")))
    assert record["reason"].startswith("=HYPERLINK") and record["job_ids"] == ["-2-3"]


def test_the_export_needs_a_login_and_the_view_permission_and_a_known_format(broker: Broker, client: Client,
                                                                            operator: Client) -> None:
    push(broker, "q", [1])
    act(operator, action="pause", queue="q", reason="secret reason")

    anonymous = client.get("/audit/export/")
    assert anonymous.status_code == 302 and anonymous["Location"].startswith("/login/")
    nobody = client_for(make_user("nobody"))
    assert nobody.get("/audit/export/").status_code == 403
    unknown = operator.get("/audit/export/?format=xlsx")
    assert unknown.status_code == 400 and b"Unknown export format 'xlsx'" in unknown.content
    assert b"secret reason" not in unknown.content
    assert operator.post("/audit/export/").status_code == 405


def test_the_page_and_the_export_filter_by_utc_dates_both_days_included(broker: Broker, operator: Client) -> None:
    from datetime import UTC, datetime

    push(broker, "q", [1])
    for reason in ("first", "second", "third"):
        act(operator, action="pause" if reason != "second" else "resume", queue="q", reason=reason)
    days = {"first": datetime(2026, 11, 1, 23, 59, tzinfo=UTC), "second": datetime(2026, 11, 2, 0, 0, tzinfo=UTC),
            "third": datetime(2026, 11, 3, 12, 0, tzinfo=UTC)}
    for reason, when in days.items():
        AuditEntry.objects.filter(reason=reason).update(created_at=when)

    def reasons(query: str) -> list[str]:
        return [r["reason"] for r in csv_rows(export(operator, query))]

    assert reasons("since=2026-11-02") == ["third", "second"]
    assert reasons("until=2026-11-02") == ["second", "first"]
    assert reasons("since=2026-11-02&until=2026-11-02") == ["second"]
    assert reasons("since=not-a-date") == ["third", "second", "first"]  # dropped, not guessed at
    assert reasons("since=0001-01-01&until=9999-12-31") == ["third", "second", "first"]  # the ends of the calendar
    page = operator.get("/audit/?since=2026-11-03")
    assert [row["entry"].reason for row in page.context["rows"]] == ["third"]
    assert page.context["filters"]["since"] == "2026-11-03"
    assert "since=2026-11-03&amp;format=csv" in page.content.decode()
    assert operator.get("/audit/?until=nope").context["filters"]["until"] == ""
