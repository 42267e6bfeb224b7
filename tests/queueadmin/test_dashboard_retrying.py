""""Failing now" on the dead letters page: jobs that failed and will be tried
again, grouped by queue and error signature like the dead letters, before
they reach them."""

from __future__ import annotations

import re

from django.test import Client

from engine import Broker
from engine.ops import claim_op, fail_op, requeue_op
from queueadmin.dashboard.source import source
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


def test_a_redriven_dead_letter_is_not_failing_until_it_fails_again(broker: Broker, viewer: Client) -> None:
    push(broker, "emails", [0], max_attempts=2)
    [dead] = fail(broker, "emails", "SMTPError: 550 mailbox 13 unknown", n=1, retry_in=0)
    assert fail(broker, "emails", "SMTPError: 550 mailbox 13 unknown", n=1, retry_in=0) == [dead]
    push(broker, "emails", [1], max_attempts=5)
    [retrying] = fail(broker, "emails", "SMTPError: 550 mailbox 12 unknown", n=1, retry_in=600)
    assert [g.ids for g in viewer.get("/dead/").context["groups"]] == [(dead,)]
    broker.execute(requeue_op([dead]))  # redriven: no attempts, its last error kept

    def failing() -> list[tuple[str, tuple[str, ...], int]]:
        source.reset()  # read the document as it is now
        return [(g.signature, g.ids, g.running) for g in viewer.get("/dead/").context["retrying"]]

    assert failing() == [("SMTPError: N mailbox N unknown", (retrying,), 0)]
    # Its error signature still finds it in the jobs list, attempts 0 of 2.
    rows = viewer.get("/jobs/", {"queue": "emails", "error": "SMTPError: N mailbox N unknown"}).context["rows"]
    assert sorted(row["job"]["id"] for row in rows) == sorted([retrying, dead])
    [claimed] = broker.execute(claim_op("w-2", ["emails"], policy=broker.policy, max_jobs=1))
    assert claimed.id == dead and claimed.attempt == 1  # running its first attempt since: not failing either
    assert failing() == [("SMTPError: N mailbox N unknown", (retrying,), 0)]
    broker.execute(fail_op(dead, claimed.lease, error="SMTPError: 550 mailbox 13 unknown", retry_in_seconds=0,
                           policy=broker.policy))  # failed again: failing now
    assert failing() == [("SMTPError: N mailbox N unknown", (retrying, dead), 0)]
    [claimed] = broker.execute(claim_op("w-2", ["emails"], policy=broker.policy, max_jobs=1))
    assert claimed.id == dead and claimed.attempt == 2
    assert failing() == [("SMTPError: N mailbox N unknown", (retrying, dead), 1)]  # and running again


def test_nothing_failing_says_so(broker: Broker, viewer: Client) -> None:
    push(broker, "q", [1])
    page = viewer.get("/dead/")
    assert page.context["retrying"] == [] and b"No job is failing and retrying." in page.content
