"""What a purge or requeue of running jobs says it does to their handlers:
each worker finds out as soon as the run commits (at the latest at its next
heartbeat) and cancels the job
(engine.cancellation). The dry run says so, on the page and in
``manage.py queueaction``, with the time a third of the longest lease gives."""

from __future__ import annotations

from django.test import Client

from engine import Broker
from tests.queueadmin.dashboard_fixtures import claim_ids, preview, push, queueaction


def test_purging_a_running_job_says_its_worker_cancels_it_at_its_next_heartbeat(
        broker: Broker, operator: Client) -> None:
    waiting, running = push(broker, "q", ["waits", "runs"])
    assert claim_ids(broker, 1, lease_seconds=30) == [waiting]  # FIFO: the first pushed is leased
    waiting, running = running, waiting

    dry = preview(operator, action="purge", ids=f"{waiting},{running}")
    plan = dry.context["plan"]
    assert plan.count == 2 and plan.effects == [
        "1 of these jobs is running now. Its worker finds out as soon as this runs (it watches its leases), at the "
        "latest at its next heartbeat (every third of the lease by default: within 10 s here), and cancels it: a "
        "handler that calls engine.check_cancelled() stops there; one that does not runs to its end, and its "
        "result is refused."]
    assert 'data-testid="plan-effect"' in dry.content.decode()
    # Only waiting jobs: nothing runs, nothing to say.
    assert preview(operator, action="purge", ids=[waiting]).context["plan"].effects == []


def test_requeuing_running_jobs_says_they_are_cancelled_and_run_again_from_the_start(
        broker: Broker, operator: Client) -> None:
    push(broker, "q", ["a", "b", "c"])
    short = claim_ids(broker, 1, lease_seconds=3)
    long = claim_ids(broker, 2, lease_seconds=90)

    plan = preview(operator, action="requeue", ids=",".join([*short, *long])).context["plan"]
    [effect] = [e for e in plan.effects if "running now" in e]
    assert effect.startswith("3 of these jobs are running now. Each one's worker finds out as soon as this runs (it "
                             "watches its leases), at the latest at its next heartbeat (every third of the lease by "
                             "default: within 30 s here)")
    assert effect.endswith("They run again from the start once workers claim them.")
    one = preview(operator, action="requeue", ids=short[0]).context["plan"]
    assert "within 1.0 s here" in one.effects[0] and one.effects[0].endswith(
        "It runs again from the start once a worker claims it.")


def test_queueactions_dry_run_says_it_too(broker: Broker, operator: Client) -> None:
    from tests.queueadmin.dashboard_fixtures import make_user

    make_user("ops", "view_dashboard", "purge_job")
    push(broker, "q", ["x"])
    [job_id] = claim_ids(broker, 1, lease_seconds=30)
    out = queueaction("purge", "--ids", job_id, "--user", "ops", "--reason", "stuck", "--dry-run")
    assert "1 of these jobs is running now. Its worker finds out as soon as this runs" in out
