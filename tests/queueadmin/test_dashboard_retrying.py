""""Failing now" on the dead letters page: jobs that failed and will be tried
again, grouped by queue and error signature like the dead letters, before
they reach them."""

from __future__ import annotations

import re

from django.test import Client

from engine import Broker
from engine.ops import claim_op, fail_op
from tests.queueadmin.dashboard_fixtures import kill, push


def fail(broker: Broker, queue: str, error: str, *, n: int, retry_in: float) -> list[str]:
    failed = []
    for job in broker.execute(claim_op("w-1", [queue], policy=broker.policy, max_jobs=n)):
        broker.execute(fail_op(job.id, job.lease, error=error, retry_in_seconds=retry_in, policy=broker.policy))
        failed.append(job.id)
    return failed


def test_failing_jobs_are_grouped_before_they_are_dead(broker: Broker, viewer: Client) -> None:
    push(broker, "emails", list(range(4)), max_attempts=5)
    smtp = fail(broker, "emails", "Traceback …\nSMTPError: 550 mailbox 12 unknown", n=3, retry_in=600)
    [timeout] = fail(broker, "emails", "TimeoutError: after 30 s", n=1, retry_in=0)
    # Running again: claimed once its (zero) backoff is over; the others wait ten minutes.
    [again] = broker.execute(claim_op("w-2", ["emails"], policy=broker.policy, max_jobs=5))
    assert again.id == timeout
    kill(broker, "emails", error="KeyError: 'x'")  # dead, not retrying: not in these groups

    page = viewer.get("/dead/")
    groups = page.context["retrying"]
    assert [(g.queue, g.signature, g.count) for g in groups] == [
        ("emails", "SMTPError: N mailbox N unknown", 3), ("emails", "TimeoutError: after N s", 1)]
    assert sorted(groups[0].ids) == sorted(smtp) and groups[0].running == 0
    assert groups[1].ids == (timeout,) and groups[1].running == 1
    assert groups[0].last_failed_at is not None
    assert page.context["retrying_total"] == 4
    html = page.content.decode()
    section = html[html.index('data-testid="retrying"'):]
    assert "4 jobs retrying" in section and "KeyError" not in section
    links = re.findall(r'href="([^"]+)" data-testid="retry-group-jobs"', section)
    assert links[0] == "/jobs/?queue=emails&amp;error=SMTPError%3A%20N%20mailbox%20N%20unknown"

    # The link lists exactly the group's jobs.
    rows = viewer.get(links[0].replace("&amp;", "&")).context["rows"]
    assert sorted(row["job"]["id"] for row in rows) == sorted(smtp)


def test_nothing_failing_says_so(broker: Broker, viewer: Client) -> None:
    push(broker, "q", [1])
    page = viewer.get("/dead/")
    assert page.context["retrying"] == [] and b"No job is failing and retrying." in page.content
