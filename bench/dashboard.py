"""``python -m bench.dashboard``: how the dashboard holds up with a big queue.

Builds a document of ``--jobs`` pending jobs (~200-byte payloads, plus some
running and dead ones) with a real GroupCommitter on a memory store, makes it
this process's leading broker, and times, as medians over ``--repeat`` runs:

* decoding the committed document whole, and again after one more commit
  (the live path: unchanged 512-job chunks are reused);
* computing a new version's summaries (what the first overview of it pays);
* each page, through its Django view as a superuser: overview, the jobs list
  (first page, a page deep in the list, a filtered page, an exact id, a
  bounded payload search), a job, the workers page, the dead letters and the
  raw document;
* one live update: the partials the socket sends for the jobs page.

Prints a Markdown table. No latency is added: this measures the dashboard's
own CPU cost, which is what grows with the document.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, ClassVar

from bench.scratchdb import django_on_scratch_database

DEFAULT_JOBS = 100_000


def _median_ms(fn: Callable[[], Any], repeat: int) -> float:
    samples = []
    for _ in range(repeat):
        started = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - started) * 1000)
    return statistics.median(samples)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.dashboard", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=DEFAULT_JOBS, help=f"pending jobs (default {DEFAULT_JOBS:,})")
    parser.add_argument("--repeat", type=int, default=5, help="runs per measurement (default 5)")
    args = parser.parse_args(argv)

    os.environ["QUEUE_STORE_URL"] = f"memory://bench-dashboard-{uuid.uuid4().hex}"
    os.environ["QUEUE_HEARTBEAT_SECONDS"] = "3600"  # no idle commits while measuring
    os.environ["QUEUE_TAKEOVER_SECONDS"] = "7200"
    django_on_scratch_database("bench-dashboard-")  # the views audit and read plans
    from django.contrib.auth.models import User
    from django.contrib.sessions.backends.base import SessionBase
    from django.http import HttpRequest
    from django.template.loader import render_to_string
    from django.test import RequestFactory

    from engine import DocumentDecoder
    from engine.ops import claim_op, fail_op
    from queueadmin import runtime
    from queueadmin.dashboard import pages, views
    from queueadmin.dashboard.snapshot import Snapshot, decode_document
    from queueadmin.dashboard.source import source

    broker = runtime.start_broker()
    while broker.role != "leader":
        time.sleep(0.01)
    committer = broker.committer
    assert committer is not None
    pad = "x" * 180
    print(f"building {args.jobs:,} jobs ...", file=sys.stderr)
    for start in range(0, args.jobs, 1000):
        committer.push("bulk", [{"n": n, "pad": pad} for n in range(start, min(start + 1000, args.jobs))])
    committer.push("emails", [{"to": f"user{n}@example.com"} for n in range(100)])
    claimed = committer.execute(claim_op("bench-worker", ["emails"], policy=broker.policy, max_jobs=50))
    for job in claimed[:20]:
        committer.execute(fail_op(job.id, job.lease, error=f"ValueError: bad row {job.id[:4]}",
                                  retry_in_seconds=None, policy=broker.policy, give_up=True))
    etag, parts = committer.committed
    size = sum(len(p) for p in parts)
    some_id = claimed[-1].id

    rows: list[tuple[str, float]] = []
    now = datetime.now(UTC)
    rows.append(("decode the whole document", _median_ms(
        lambda: decode_document(b"".join(parts), etag=etag, taken_at=now), args.repeat)))
    decoder = DocumentDecoder()
    decoder.decode(parts)

    def after_one_commit() -> None:
        committer.push("emails", [{"to": "one-more@example.com"}])
        _, parts2 = committer.committed
        decoder.decode(parts2)

    rows.append(("decode after one more commit (chunks reused; includes the commit)",
                 _median_ms(after_one_commit, args.repeat)))

    def first_overview() -> None:
        # A new version: its per-queue, worker and count summaries are computed
        # once, then shared by every page and socket that shows that version.
        etag3, parts3 = committer.committed
        pages.overview(Snapshot.decoded(decoder.decode(parts3), etag=etag3, taken_at=datetime.now(UTC)))

    rows.append(("summaries of a new version (the first overview that shows it)",
                 _median_ms(first_overview, args.repeat)))

    user = User(username="bench", is_superuser=True, is_staff=True, is_active=True)
    # A read-only viewer (secret payload values hidden from them), and an
    # operator whose scope hides every queue but "emails".
    from django.contrib.auth.models import Permission

    from queueadmin.models import QueueScope

    viewer = User.objects.create_user("bench-viewer", is_staff=True)
    viewer.user_permissions.add(Permission.objects.get(codename="view_dashboard"))
    confined = User.objects.create_user("bench-confined", is_staff=True)
    confined.user_permissions.add(Permission.objects.get(codename="view_dashboard"))
    QueueScope.objects.create(user=confined, pattern="emails", hide_others=True)
    factory = RequestFactory()

    def page(path: str, view: Callable[..., Any], as_user: Any = None, **kwargs: Any) -> Callable[[], None]:
        def run() -> None:
            request: HttpRequest = factory.get(path)
            # A fresh user object per request, as Django's middleware gives (its scope caches live on it).
            request.user = user if as_user is None else User.objects.get(pk=as_user.pk)
            request.session = SessionBase()
            request.htmx = False  # type: ignore[attr-defined]
            response = view(request, **kwargs)
            assert response.status_code == 200, (path, response.status_code)
        return run

    source.reset()
    source.current()  # the first read decodes everything once
    for label, path, view, kwargs in [
        ("overview page", "/", views.overview, {}),
        ("jobs page 1 (all)", "/jobs/", views.jobs, {}),
        ("jobs page 1,000 (all)", "/jobs/?page=1000", views.jobs, {}),
        ("jobs filtered: queue emails, running", "/jobs/?queue=emails&status=running", views.jobs, {}),
        ("jobs: exact id", f"/jobs/?id={some_id}", views.jobs, {}),
        ("jobs: payload search (bounded to 20,000 jobs)", "/jobs/?q=user99", views.jobs, {}),
        ("jobs: the same search by a viewer (secret values hidden first)", "/jobs/?q=user99", views.jobs,
         {"as_user": viewer}),
        ("overview page, by a user whose scope hides every queue but emails", "/", views.overview,
         {"as_user": confined}),
        ("one job's page", f"/jobs/{some_id}/", views.job, {"job_id": some_id}),
        ("workers and leases page", "/workers/", views.workers, {}),
        ("dead letters page", "/dead/", views.dead, {}),
        ("raw document page (first 256 KiB)", "/document/", views.document, {}),
    ]:
        rows.append((label, _median_ms(page(path, view, **kwargs), args.repeat)))

    live = views.LIVE_PAGES["jobs"]

    class Params:
        GET: ClassVar[dict[str, str]] = {}
        user: ClassVar[Any] = None
    Params.user = user

    def live_update() -> None:
        context = live.build(source.current(), Params())
        context.update(user=user, here="/jobs/")
        for name in live.partials:
            render_to_string(f"{live.template}#{name}", context)

    rows.append(("one live update of the jobs page (render only)", _median_ms(live_update, args.repeat)))
    runtime.stop_broker()

    print(f"\nDashboard with {args.jobs:,} pending jobs + 100 in another queue; document {size / 1e6:.1f} MB; "
          f"median of {args.repeat} runs\n")
    print("| what | ms |\n|---|---:|")
    for label, ms in rows:
        print(f"| {label} | {ms:,.1f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
