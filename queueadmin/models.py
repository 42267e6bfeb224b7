"""The app's tables: the audit log of operator actions, and what the nodes share.

The queue itself lives in ``queue.json``, never in the database. What the
database keeps is who did what to it, and why: an :class:`AuditEntry` is
written after the broker has answered the action (acknowledged or refused),
so the log never claims a change that did not happen, and a refused action
is on record as failed. The jobs an action touched are rows of
:class:`AuditJob`, so a job's page finds its actions with an indexed query.

:class:`ApiToken` rows are broker API tokens managed in Django admin, used
beside the ``QUEUE_API_TOKEN`` setting. :class:`ForwardNonce` rows make each
operator action a standby forwards to the leader usable once, on every node.
:class:`ActionPlan` rows hold dry runs until they are run (I9).
:class:`QueueScope` rows limit a user's or a group's actions to some queues.
:class:`~queueadmin.history.records.FinishedJob` rows keep jobs that left
``queue.json`` findable for a while (defined in :mod:`queueadmin.history`).
:class:`~queueadmin.workers.records.SeenWorker` rows are the workers the
leader saw ask for work, for every node's dashboard (:mod:`queueadmin.workers`).

:class:`AuditEntry.Action` names every audited action, once: its stored
value and, for the dashboard, everything else about it (:class:`ActionSpec`).

The audit model also carries the dashboard's permissions, so they can be granted
in the admin like any other:

* ``view_dashboard``: see the dashboard (read-only staff have only this);
* ``submit_job``: push a job from the Submit page;
* ``requeue_job``: requeue running or dead jobs, redrive dead-letter groups, run delayed jobs now;
* ``purge_job``: purge jobs and dead letters;
* ``stop_job``: stop running jobs (to the dead letters, kept for a redrive);
* ``pause_queue``: pause, resume and limit queues (concurrency and rate), and forget empty ones;
* ``pause_schedule``: pause and resume schedules, and forget removed ones' marks;
* ``view_payload_secrets``: see payload values under secret-looking keys, which
  the dashboard hides from everyone else (queueadmin.dashboard.redaction).
"""

from __future__ import annotations

import hashlib
import re
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import models
from django.utils.translation import ngettext_lazy

from engine import forget_schedule_op, pause_schedule_op
from engine.ops import (
    Operation,
    forget_op,
    limit_op,
    make_due_op,
    pause_op,
    purge_op,
    rate_limit_op,
    requeue_op,
    stop_op,
)
from queueadmin.api.grants import parse_patterns
from queueadmin.history.records import FinishedJob as FinishedJob  # a model of this app, defined there
from queueadmin.workers.records import SeenWorker as SeenWorker  # a model of this app, defined there

if TYPE_CHECKING:
    from django_stubs_ext import StrOrPromise  # installed with django-stubs (dev only)

class Planned(Protocol):
    """What an action's operation is built from: its dry run (the dashboard's
    ``Plan``), as it was stored."""

    ids: list[str]  # the jobs it acts on
    expect: list[str]  # the status each one was in
    queue: str
    schedule: str
    max_running: int | None  # a limit's new limit
    rate_jobs: int | None  # a rate limit's new jobs per window (None: no rate limit)
    rate_seconds: float | None  # ... and its window's length

    @property
    def per_second(self) -> float | None: ...  # a requeue's or redrive's pace (None: every job at once)


#: Builds an action's engine operation from its dry run.
OperationBuilder = Callable[[Planned], Operation]


@dataclass(frozen=True, slots=True, kw_only=True)
class ActionSpec:
    """What the dashboard needs to know about one action (see
    :class:`AuditEntry.Action`). The defaults fit an action that is audited
    but not taken from the dashboard's forms."""

    #: The permission needed to take it (a codename of ``AuditEntry.Meta.permissions``), or "".
    permission: str = ""
    #: The scopes its dry-run form accepts, each the fields given, in the form's
    #: order (ids, queue, status, group, filter, schedule); () when it has no dry run.
    scopes: tuple[tuple[str, ...], ...] = ()
    #: Why any other scope is refused.
    scope_error: str = ""
    #: The conditional engine operation that runs a dry run.
    operation: OperationBuilder | None = None
    #: Jobs already in this status are left out of a selection.
    leaves_out: str = ""
    #: Only jobs in these statuses are acted on (empty: any): the others are
    #: left out of a selection or a filter's matches, with a note.
    acts_on: tuple[str, ...] = ()
    #: It acts only on pending jobs not yet due (a delayed push, a retry in
    #: its backoff): a due one is left out of a selection or a filter's
    #: matches, with a note.
    delayed_only: bool = False
    #: What the action does to its jobs, said in the dry run's effects.
    effect: str = ""
    #: Why a job of its dry run was left alone by its run, between "was" and
    #: "and was left alone" (default: "no longer <the status the dry run saw>").
    left_alone: str = ""
    #: What becomes of each job, after "N jobs would be" (default: "removed
    #: for good" for an action that removes, else "moved back to pending").
    would: str = ""
    #: It deletes jobs: beyond a count, the operator types a confirmation.
    removes: bool = False
    #: True to pause a queue, False to resume it, None for an action on jobs.
    pauses: bool | None = None
    #: It forgets an empty queue: an action on a queue, not on jobs.
    forgets: bool = False
    #: It sets a queue's concurrency limit (the form's ``max_running``): an action on a queue.
    limits: bool = False
    #: It sets a queue's rate limit (the form's ``rate_jobs`` and ``rate_seconds``): an action on a queue.
    rates: bool = False
    #: With the scope of a queue alone, the status of that queue's jobs it acts on.
    queue_status: str = ""
    #: It moves jobs back to pending in their own queues: the dry run says
    #: which of those queues would not run them soon (paused, or no worker).
    to_pending: bool = False
    #: What it did, formatted with ``n`` (jobs acted on) and ``queue``: a str, or a
    #: lazy ngettext keyed on ``n``.
    done: Any = ""
    #: A pause or resume whose queue was already so at the dry run: nothing to run.
    needless: str = ""
    #: A queue action (pause, resume, forget) overtaken between the dry run and the run.
    overtaken: str = ""

    def acts_on_status(self, status: str) -> bool:
        """Whether a job in ``status`` is one it acts on (see ``acts_on``)."""
        return not self.acts_on or status in self.acts_on

    def takes(self, status: str) -> bool:
        """Whether a job in ``status`` stays in a selection or a filter's
        matches: neither left out (``leaves_out``) nor of a status it does
        not act on (``acts_on``)."""
        return status != self.leaves_out and self.acts_on_status(status)

    @property
    def acts_on_text(self) -> str:
        """The statuses it acts on, for a note: "running", "running or dead"."""
        return " or ".join(self.acts_on)

    @property
    def sets_limit(self) -> bool:
        """It sets one of a queue's limits (concurrency or rate): an action
        on a queue, not on jobs, that may also remove the limit."""
        return self.limits or self.rates


#: The spec of an action that is only audited (``queueinit``'s).
NOT_FROM_THE_DASHBOARD = ActionSpec()


def _pause(paused: bool) -> OperationBuilder:
    return lambda p: pause_op(p.queue, paused=paused)


def _pause_schedule(paused: bool) -> OperationBuilder:
    return lambda p: pause_schedule_op(p.schedule, paused=paused)


class AuditEntry(models.Model):
    """One audited action on the queue: an operator's, as the broker answered
    it, or ``manage.py queueinit``'s."""

    class Action(models.TextChoices):
        """Every audited action, once: its stored value, what the dashboard
        needs to offer, check and run it (:class:`ActionSpec`), and its label.
        Values and labels are what the database and migrations hold: change
        neither. Adding an action means adding one member here (and, if it
        needs a new permission, that permission)."""

        SUBMIT = "submit", ActionSpec(permission="submit_job"), "submit"
        REQUEUE = "requeue", ActionSpec(
            permission="requeue_job",
            scopes=(("ids",), ("filter",)),
            scope_error="Requeue takes selected running or dead jobs, or the jobs a filter matches: exactly one "
                        "of them.",
            operation=lambda p: requeue_op(p.ids, expect=p.expect, per_second=p.per_second),
            leaves_out="pending",
            to_pending=True,
            done=ngettext_lazy("requeued %(n)d job", "requeued %(n)d jobs", "n"),
        ), "requeue"
        PURGE = "purge", ActionSpec(
            permission="purge_job",
            scopes=(("ids",), ("group",), ("queue", "status"), ("filter",)),
            scope_error="Purge takes selected jobs, or one dead-letter group, or a queue and a status, or the "
                        "jobs a filter matches: exactly one of them.",
            operation=lambda p: purge_op(p.ids, expect=p.expect),
            removes=True,
            done=ngettext_lazy("purged %(n)d job", "purged %(n)d jobs", "n"),
        ), "purge"
        STOP = "stop", ActionSpec(
            permission="stop_job",
            scopes=(("ids",), ("filter",)),
            scope_error="Stop takes selected running jobs, or the running jobs a filter matches: exactly one of "
                        "them.",
            operation=lambda p: stop_op(p.ids, expect=p.expect),
            acts_on=("running",),
            would="stopped, and kept in the dead letters",
            effect="Each goes to the dead letters at once, whatever attempts it had left, with the error "
                   "“JobStopped: stopped by an operator”: kept there with its payload and history, to "
                   "inspect, redrive (it then starts again from zero attempts) or purge.",
            done=ngettext_lazy("stopped %(n)d running job, kept in the dead letters",
                               "stopped %(n)d running jobs, kept in the dead letters", "n"),
        ), "stop"
        RUN_NOW = "run_now", ActionSpec(
            permission="requeue_job",
            scopes=(("ids",), ("filter",)),
            scope_error="Run now takes selected delayed jobs, or the delayed jobs a filter matches: exactly one "
                        "of them.",
            operation=lambda p: make_due_op(p.ids, expect=p.expect),
            acts_on=("pending",),
            delayed_only=True,
            to_pending=True,
            would="made due now",
            left_alone="due by then, or no longer pending,",
            effect="Each keeps its place in its queue and is claimed in its turn, as if its delay had run out "
                   "now: a retry runs after the jobs that were waiting when it failed, with its attempts and "
                   "last error as they are.",
            done=ngettext_lazy("made %(n)d delayed job due now", "made %(n)d delayed jobs due now", "n"),
        ), "run now"
        REDRIVE = "redrive", ActionSpec(
            permission="requeue_job",
            scopes=(("group",), ("queue",)),
            scope_error="Redrive takes one dead-letter group, or one queue (every dead letter of it), and "
                        "nothing else.",
            operation=lambda p: requeue_op(p.ids, expect=p.expect, per_second=p.per_second),
            queue_status="dead",
            to_pending=True,
            done=ngettext_lazy("redrove %(n)d dead letter back to pending",
                               "redrove %(n)d dead letters back to pending", "n"),
        ), "redrive"
        PAUSE = "pause", ActionSpec(
            permission="pause_queue",
            scopes=(("queue",),),
            scope_error="Pause takes one queue, and nothing else.",
            operation=_pause(True),
            pauses=True,
            done="paused %(queue)s",
            needless="Queue %(queue)s is already paused.",
            overtaken="%(queue)s was already paused (since the dry run): nothing changed",
        ), "pause"
        RESUME = "resume", ActionSpec(
            permission="pause_queue",
            scopes=(("queue",),),
            scope_error="Resume takes one queue, and nothing else.",
            operation=_pause(False),
            pauses=False,
            done="resumed %(queue)s",
            needless="Queue %(queue)s is not paused.",
            overtaken="%(queue)s was not paused any more (resumed since the dry run): nothing changed",
        ), "resume"
        LIMIT = "limit", ActionSpec(
            permission="pause_queue",
            scopes=(("queue",),),
            scope_error="Limit takes one queue (and its limit), and nothing else.",
            operation=lambda p: limit_op(p.queue, p.max_running),
            limits=True,
            needless="Queue %(queue)s already has this limit.",
            overtaken="%(queue)s already had this limit (set since the dry run): nothing changed",
        ), "limit"
        RATE_LIMIT = "rate_limit", ActionSpec(
            permission="pause_queue",
            scopes=(("queue",),),
            scope_error="Rate limit takes one queue (and its rate), and nothing else.",
            operation=lambda p: rate_limit_op(p.queue, p.rate_jobs, p.rate_seconds),
            rates=True,
            needless="Queue %(queue)s already has this rate limit.",
            overtaken="%(queue)s already had this rate limit (set since the dry run): nothing changed",
        ), "rate limit"
        FORGET = "forget", ActionSpec(
            permission="pause_queue",
            scopes=(("queue",),),
            scope_error="Forget takes one queue, and nothing else.",
            operation=lambda p: forget_op(p.queue),
            forgets=True,
            done="forgot queue %(queue)s",
            overtaken="%(queue)s was already gone (forgotten since the dry run): nothing changed",
        ), "forget"
        PAUSE_SCHEDULE = "pause_schedule", ActionSpec(
            permission="pause_schedule",
            scopes=(("schedule",),),
            scope_error="Pause schedule takes one schedule, and nothing else.",
            operation=_pause_schedule(True),
            pauses=True,
            done="paused schedule %(schedule)s",
            needless="Schedule %(schedule)s is already paused.",
            overtaken="schedule %(schedule)s was already paused (since the dry run): nothing changed",
        ), "pause schedule"
        RESUME_SCHEDULE = "resume_schedule", ActionSpec(
            permission="pause_schedule",
            scopes=(("schedule",),),
            scope_error="Resume schedule takes one schedule, and nothing else.",
            operation=_pause_schedule(False),
            pauses=False,
            done="resumed schedule %(schedule)s",
            needless="Schedule %(schedule)s is not paused.",
            overtaken="schedule %(schedule)s was not paused any more (resumed since the dry run): nothing changed",
        ), "resume schedule"
        FORGET_SCHEDULE = "forget_schedule", ActionSpec(
            permission="pause_schedule",
            scopes=(("schedule",),),
            scope_error="Forget schedule takes one schedule, and nothing else.",
            operation=lambda p: forget_schedule_op(p.schedule),
            forgets=True,
            done="forgot schedule %(schedule)s",
            overtaken="schedule %(schedule)s was already forgotten (since the dry run): nothing changed",
        ), "forget schedule"
        #: ``manage.py queueinit``: a fresh queue.json, or (with --force) one replacing a lost document (I10).
        INIT = "init", "init"

        spec: ActionSpec

        def __new__(cls, value: str, spec: ActionSpec = NOT_FROM_THE_DASHBOARD) -> AuditEntry.Action:
            member = str.__new__(cls, value)
            member._value_ = value
            member.spec = spec
            return member

        @property
        def permission(self) -> str:
            """The full permission name for ``has_perm`` ("" when the dashboard does not take it)."""
            return f"queueadmin.{self.spec.permission}" if self.spec.permission else ""

        @classmethod
        def planned(cls) -> list[AuditEntry.Action]:
            """The actions taken with a dry run first, in order."""
            return [action for action in cls if action.spec.scopes]

    class Outcome(models.TextChoices):
        OK = "ok", "ok"
        FAILED = "failed", "failed"

    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    user = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    # Kept apart from the foreign key, so the entry still says who it was
    # after the account is deleted.
    username = models.CharField(max_length=150)
    action = models.CharField(max_length=16, choices=Action.choices, db_index=True)
    reason = models.TextField()
    queue = models.CharField(max_length=100, blank=True, db_index=True)
    # What was asked for: "ids", or "queue=emails status=dead", or a
    # dead-letter group's signature.
    target = models.CharField(max_length=500, blank=True)
    #: How many jobs the action affected (or would have, if it failed).
    count = models.PositiveIntegerField(default=0)
    #: Of ``count``, how many have no job row: jobs in segment objects that a
    #: purge of a queue's pending jobs removed with their objects' references.
    unlisted = models.PositiveIntegerField(default=0)
    outcome = models.CharField(max_length=8, choices=Outcome.choices, db_index=True)
    detail = models.TextField(blank=True)
    seq = models.PositiveBigIntegerField(null=True, blank=True, help_text="queue.json seq after the action")

    class Meta:
        ordering: ClassVar[list[str]] = ["-created_at", "-id"]
        verbose_name_plural = "audit entries"
        permissions: ClassVar[list[tuple[str, StrOrPromise]]] = [
            ("view_dashboard", "Can view the queue dashboard"),
            ("submit_job", "Can submit jobs from the dashboard"),
            ("requeue_job", "Can requeue jobs and redrive dead letters"),
            ("purge_job", "Can purge jobs and dead letters"),
            ("stop_job", "Can stop running jobs (to the dead letters)"),
            ("pause_queue", "Can pause, resume and limit queues"),
            ("pause_schedule", "Can pause and resume schedules"),
            ("view_payload_secrets", "Can see payload values under secret-looking keys"),
        ]

    def __str__(self) -> str:
        return f"{self.created_at:%Y-%m-%d %H:%M:%S} {self.username} {self.action} {self.outcome}"


class AuditJob(models.Model):
    """One job an audit entry affected: an index, so a job's page can list
    every action taken on it and an entry can link to its jobs."""

    entry = models.ForeignKey(AuditEntry, on_delete=models.CASCADE, related_name="jobs")
    job_id = models.CharField(max_length=200, db_index=True)

    class Meta:
        ordering: ClassVar[list[str]] = ["id"]

    def __str__(self) -> str:
        return self.job_id


# A queue name's characters (engine.ops.QUEUE_NAME) and fnmatch's wildcards.
_QUEUE_PATTERN = re.compile(r"[A-Za-z0-9_.:*?\[\]!-]{1,100}")


def validate_queue_patterns(text: str) -> None:
    """Raise ValidationError unless every pattern in ``text`` could match a queue name."""
    bad = [p for p in parse_patterns(text) or () if not _QUEUE_PATTERN.fullmatch(p)]
    if bad:
        raise ValidationError(f"not a pattern of queue names: {', '.join(bad)} (queue names hold letters, digits, "
                              "'_', '.', ':' and '-'; patterns add *, ?, [ and ])")


class ApiTokenQuerySet(models.QuerySet["ApiToken"]):
    def revoke(self) -> int:
        """Revoke the tokens of this queryset not revoked yet; how many. Every
        node refuses them within :data:`queueadmin.api.auth.TOKEN_CACHE_SECONDS`."""
        from django.utils import timezone

        return self.filter(revoked_at__isnull=True).update(revoked_at=timezone.now())


class ApiToken(models.Model):
    """A broker API token kept in the database, beside ``QUEUE_API_TOKEN``.

    Give each producer or worker fleet its own, and revoke it alone. Only a
    SHA-256 digest is stored: the token itself is shown once, when it is made
    (in Django admin), and cannot be read back. Nodes pick up a new, changed
    or revoked token within :data:`queueadmin.api.auth.TOKEN_CACHE_SECONDS`.

    A token may be limited to some queues (``queues``) and to pushing or
    working (``may_push``, ``may_work``), so that a producer's leaked token
    cannot drain or read other queues (the rules: :mod:`queueadmin.api.grants`).
    """

    PREFIX = "qa_"

    name = models.CharField(max_length=100, unique=True, help_text="who uses it, e.g. 'billing workers'")
    digest = models.CharField(max_length=64, unique=True, editable=False)
    # The first characters, so a token in a config file can be matched to its row.
    hint = models.CharField(max_length=12, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                   editable=False)
    revoked_at = models.DateTimeField(null=True, blank=True, editable=False)
    queues = models.CharField(
        max_length=500, blank=True, validators=[validate_queue_patterns],
        help_text="Only these queues, as shell-style patterns separated by spaces or commas (billing billing-*); "
                  "empty: every queue. A limited token cannot read the whole document or the metrics")
    may_push = models.BooleanField("may push", default=True, help_text="Push jobs (producers)")
    may_work = models.BooleanField("may work", default=True,
                                   help_text="Claim jobs and heartbeat, complete or fail them (workers)")

    objects = ApiTokenQuerySet.as_manager()

    class Meta:
        ordering: ClassVar[list[str]] = ["name"]
        verbose_name = "API token"
        constraints: ClassVar[list[models.BaseConstraint]] = [models.CheckConstraint(
            condition=models.Q(may_push=True) | models.Q(may_work=True), name="api_token_may_push_or_work",
            violation_error_message="A token that may neither push nor work could do nothing: allow one")]

    def __str__(self) -> str:
        return f"{self.name} ({self.hint}…)"

    @property
    def scope(self) -> str:
        """What it may do, in words (the admin's list)."""
        calls = "push and work" if self.may_push and self.may_work else "push" if self.may_push else "work"
        return f"{calls} · {' '.join(parse_patterns(self.queues) or ('every queue',))}"

    @staticmethod
    def digest_of(token: str) -> str:
        return hashlib.sha256(token.encode()).hexdigest()

    def issue(self) -> str:
        """Give this (unsaved) row a fresh token; return the token, which is not stored."""
        token = self.PREFIX + secrets.token_urlsafe(32)
        self.digest = self.digest_of(token)
        self.hint = token[:10]
        return token


class ActionPlan(models.Model):
    """The dry run of an operator action, kept until it is run or expires.

    It holds what the dry run showed: the action, its scope, the document seq
    it was planned against, and the job ids with the status each one was in.
    The confirmation form carries only a signed reference to it, so the run
    acts on these jobs and no others (I9), a form cannot be altered to widen
    them, and a selection of 100,000 jobs costs the page nothing. ``body`` is
    zlib-compressed JSON; see :mod:`queueadmin.dashboard.plans`.
    """

    key = models.CharField(max_length=64, unique=True)
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE)
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    body = models.BinaryField()

    def __str__(self) -> str:
        return f"plan {self.key[:8]}… of {self.user_id} at {self.created_at:%Y-%m-%d %H:%M:%S}"


class ForwardNonce(models.Model):
    """The nonce of a signed operator request a leader has accepted
    (:mod:`queueadmin.api.forward`), kept until its signature has
    expired, so that the same request is never run twice, by any node: all
    nodes share this table. Rows past ``expires_at`` are deleted as new ones
    are added."""

    nonce = models.CharField(max_length=64, unique=True)
    expires_at = models.DateTimeField(db_index=True)

    def __str__(self) -> str:
        return self.nonce


class QueueScope(models.Model):
    """Limits a user's, or a group's members', operator actions to the queues
    whose names match ``pattern`` (a shell-style pattern: ``billing``,
    ``billing-*``, ``*-eu``), as Bull Board's visibility guard or a team's
    own queues would. A user with no scope, of their own or through a group,
    acts on every queue their permissions allow (as before scopes existed);
    one with scopes acts only on queues one of them matches; a superuser
    always acts on every queue. What a user may do at all is still their
    permissions' to say (see :mod:`queueadmin.dashboard.scopes`)."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.CASCADE,
                             related_name="queue_scopes")
    group = models.ForeignKey("auth.Group", null=True, blank=True, on_delete=models.CASCADE,
                              related_name="queue_scopes")
    pattern = models.CharField(max_length=200, help_text="Queue names it covers, as a shell-style pattern: "
                                                         "billing, billing-*, *-eu")
    hide_others = models.BooleanField(
        default=False, help_text="Also hide every queue outside this user's (or group's members') patterns from "
                                 "them: the dashboard shows those queues, their jobs, schedules and audit entries "
                                 "as if they did not exist")

    class Meta:
        constraints: ClassVar[list[models.BaseConstraint]] = [models.CheckConstraint(
            condition=models.Q(user__isnull=False, group__isnull=True) | models.Q(user__isnull=True,
                                                                                group__isnull=False),
            name="queue_scope_user_or_group")]

    def __str__(self) -> str:
        return f"{self.user or self.group}: {self.pattern}"


# The metrics history lives with the metrics code; importing it here lets Django see the model.
from queueadmin.metrics.records import MetricPoint  # noqa: E402, F401
