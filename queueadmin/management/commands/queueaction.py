"""``manage.py queueaction``: an operator action from a shell or a deploy
script, with the dashboard's dry run, permissions, conditional run and audit.

It is the dashboard's action path (:mod:`queueadmin.dashboard.actions`)
without the browser: the same scopes (:class:`~queueadmin.dashboard.forms.ActionForm`),
a dry run against the latest document, a run that acts on the dry run's jobs
only and only in the status it saw (I9), and an :class:`~queueadmin.models.AuditEntry`
once the broker answered, in the name of ``--user``, who needs the same
permissions as on the dashboard. This process runs no broker: the run is
signed and sent to the leader the document names, as a standby's dashboard
sends it (``/api/v1/operator``), so the nodes' ``DJANGO_SECRET_KEY`` must be
set here too.

Exit status: 0 when the action ran (or, for pause, resume and the limits, when the
queue or schedule already was as asked), 1 otherwise: a refused or invalid
request, nothing to act on, a run not confirmed, or a run the broker refused.
"""

from __future__ import annotations

import re
import sys
from typing import Any, ClassVar

import orjson
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser

from engine import EngineError
from queueadmin.dashboard import actions, scopes
from queueadmin.dashboard.forms import ACTIONS, ActionForm
from queueadmin.dashboard.source import source
from queueadmin.dashboard.views import VIEW
from queueadmin.models import AuditEntry

PREVIEW_CHARS = 60
#: ``--rate``: jobs, a slash, then an optional count and a unit (10/s, 5/30s, 3/2.5m).
RATE = re.compile(r"^\s*(\d+)\s*/\s*(\d+(?:\.\d+)?|\.\d+)?\s*(s|m|h)\s*$")
UNIT_SECONDS = {"s": 1.0, "m": 60.0, "h": 3600.0}


def parse_rate(text: str, option: str = "--rate") -> tuple[str, str]:
    """``--rate`` (or ``--pace``) as the form's ``rate_jobs`` and
    ``rate_seconds`` (as text; the form checks their bounds): both blank for
    "" and "none". Raises CommandError for anything else that is not N/PERIOD."""
    if not text.strip() or text.strip().lower() == "none":
        return "", ""
    match = RATE.match(text.lower())
    if match is None:
        raise CommandError(f"{option}: expected N/PERIOD such as 10/s, 100/m, 1000/h or 5/30s (or none), got "
                           f"{text!r}")
    jobs, count, unit = match.groups()
    seconds = float(count or 1) * UNIT_SECONDS[unit]
    short = f"{seconds:g}"
    return jobs, short if float(short) == seconds else repr(seconds)  # every digit given kept; the form checks bounds


class Command(BaseCommand):
    # It needs neither the task backend nor its API token (the run is signed
    # and sent to the leader): the system checks would only warn about those.
    requires_system_checks: ClassVar[list[str]] = []  # type: ignore[misc]
    help = ("Requeue, purge, stop (running jobs, to the dead letters), run_now (delayed jobs, due at once in their "
            "place), redrive, pause, resume, limit, rate_limit or forget (a queue, or with --schedule a schedule), as "
            "on the dashboard: a dry run first, then (after --yes or a typed confirmation) a run on exactly the dry "
            "run's jobs, audited in the name of --user.")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("action", choices=ACTIONS)
        scope = parser.add_argument_group("what it acts on (one scope, as the action allows)")
        scope.add_argument("--ids", nargs="+", default=[], metavar="ID",
                           help="selected jobs (requeue, purge, stop, run_now)")
        scope.add_argument("--queue", default="", help="a queue: pause, resume, forget, redrive its dead letters; "
                                                      "with --status, purge its jobs in that status")
        scope.add_argument("--status", default="", choices=["", "pending", "running", "dead"])
        scope.add_argument("--group", default="", help="a dead-letter group's key, as in the dead letters page's "
                                                       "links (redrive, purge)")
        scope.add_argument("--filter", default="", metavar="QUERY",
                           help="every job the jobs list's filter matches, as its query string, e.g. "
                                "'queue=orders&status=dead&error=KeyError' (requeue, purge, stop, run_now)")
        scope.add_argument("--max-running", default="", metavar="N",
                           help="limit: at most N jobs of --queue running at once, across every worker; 'none' "
                                "removes the limit")
        scope.add_argument("--rate", default="", metavar="N/PERIOD",
                           help="rate_limit: at most N jobs of --queue start in each window of PERIOD, across every "
                                "worker: 10/s, 100/m, 1000/h, 5/30s, 3/10m; 'none' removes the rate limit")
        scope.add_argument("--pace", default="", metavar="N/PERIOD",
                           help="requeue, redrive: the jobs are due one after another, N in each PERIOD (10/s, "
                                "100/m, 5/30s), the first at once; without it, all at once")
        scope.add_argument("--schedule", default="", metavar="NAME",
                           help="a schedule of QUEUE_SCHEDULES (pause_schedule, resume_schedule), or one whose mark "
                                "the document keeps after it was removed (forget_schedule)")
        parser.add_argument("--user", required=True, help="the Django user it is done and audited as; needs the "
                                                          "dashboard's view permission and the action's")
        parser.add_argument("--reason", required=True, help="why: goes into the audit log")
        parser.add_argument("--dry-run", action="store_true", help="show what it would do, and stop")
        parser.add_argument("--yes", action="store_true", help="run without asking, after the dry run")

    def handle(self, *args: Any, **options: Any) -> None:
        if options["action"] == AuditEntry.Action.LIMIT and not options["max_running"]:
            # Blank would mean "no limit": a forgotten option must not lift a limit.
            raise CommandError("limit needs --max-running N (1 or more), or --max-running none to remove the limit")
        if options["action"] == AuditEntry.Action.RATE_LIMIT and not options["rate"]:
            raise CommandError("rate_limit needs --rate N/PERIOD (10/s, 100/m, 5/30s), or --rate none to remove it")
        rate_jobs, rate_seconds = parse_rate(options["rate"])
        pace_jobs, pace_seconds = parse_rate(options["pace"], "--pace")
        form = ActionForm({"action": options["action"], "ids": " ".join(options["ids"]), "queue": options["queue"],
                           "status": options["status"], "group": options["group"], "filter": options["filter"],
                           "schedule": options["schedule"],
                           "max_running": "" if options["max_running"].lower() == "none" else options["max_running"],
                           "rate_jobs": rate_jobs, "rate_seconds": rate_seconds,
                           "pace_jobs": pace_jobs, "pace_seconds": pace_seconds})
        if not form.is_valid():
            errors = [str(e) for e in form.non_field_errors()]
            errors += [f"--{name.replace('_', '-')}: {e}" for name, field_errors in form.errors.items()
                       if name != "__all__" for e in field_errors]
            raise CommandError(" ".join(errors))
        action = AuditEntry.Action(options["action"])
        user = self._user(options["user"], action)
        reason = options["reason"].strip()
        if not reason:
            raise CommandError("Write a reason (--reason): it goes into the audit log.")
        try:
            snapshot = source.current(fresh_seconds=0)
        except EngineError as exc:
            raise CommandError(f"The document cannot be read, so nothing was planned: {type(exc).__name__}: "
                               f"{exc}") from exc
        try:
            plan = actions.plan(snapshot, form.cleaned_data, user=user)
        except scopes.OutOfScope as exc:
            raise CommandError(f"User {user.get_username()!r}: {exc}") from exc
        self._show(plan)
        if not plan.runnable:
            if plan.needless:
                return  # already as asked: a deploy script's pause (or limit) may run twice
            raise CommandError("Nothing to run; nothing was changed.")
        if options["dry_run"]:
            self.stdout.write("Dry run only (--dry-run): nothing was changed.")
            return
        if not options["yes"]:
            self._confirm(plan)
        try:
            outcome = actions.run(plan, user=user, reason=reason)
        except scopes.OutOfScope as exc:  # narrowed while the confirmation was asked for
            raise CommandError(f"User {user.get_username()!r}: {exc}") from exc
        if not outcome.ok:
            raise CommandError(outcome.message)
        self.stdout.write(outcome.message)

    def _user(self, name: str, action: AuditEntry.Action) -> Any:
        try:
            user = get_user_model().objects.get(username=name)
        except get_user_model().DoesNotExist:
            raise CommandError(f"No user named {name!r}: the action is done and audited in a user's name "
                               "(manage.py createsuperuser, or the admin)") from None
        missing = [perm for perm in (VIEW, action.permission) if not user.has_perm(perm)]
        if not user.is_active or missing:
            why = "is not active" if not user.is_active else f"lacks {', '.join(missing)}"
            raise CommandError(f"User {name!r} {why}: {action.value} is refused and nothing was changed.")
        return user

    def _show(self, plan: actions.Plan) -> None:
        out = self.stdout.write
        out(f"{plan.title}{' · ' + (plan.schedule or plan.queue) if plan.schedule or plan.queue else ''}: dry run "
            f"against seq {plan.seq}, "
            f"{plan.target}.")
        if not plan.toggles and not plan.forgets and not plan.spec.sets_limit:  # those act on a queue, not on jobs
            count = plan.count
            out(f"{count} job{'' if count == 1 else 's'} would be {plan.would}.")
            for job in plan.sample:
                payload = orjson.dumps(job.get("payload")).decode()
                if len(payload) > PREVIEW_CHARS:
                    payload = payload[:PREVIEW_CHARS - 1] + "…"
                out(f"  {job['id']}  {job.get('queue', '')}  {job.get('status', '')}  {payload}")
            if plan.more:
                out(f"  … and {plan.more} more.")
        for line in (*plan.notes, *plan.effects, *plan.problems):
            out(f"! {line}")

    def _confirm(self, plan: actions.Plan) -> None:
        phrase = plan.confirm_phrase or "yes"
        if not sys.stdin.isatty():
            raise CommandError("Not run: nothing was changed. Run it again with --yes to confirm (the dry run is "
                               "above), or from a terminal to be asked.")
        self.stdout.write(f"Type {phrase!r} to run it: ", ending="")
        self.stdout.flush()
        answer = sys.stdin.readline().strip()
        if answer != phrase:
            raise CommandError("Not confirmed: nothing was changed.")
