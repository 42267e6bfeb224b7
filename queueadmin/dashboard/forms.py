"""Forms of the dashboard: submitting a job, and the operator actions.

Both validate with the engine's own builders (``push_op``, ``purge_op``, …),
so the dashboard refuses exactly what the broker would, with the engine's
message shown next to the field.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson
from django import forms

from engine import MAX_DELAY_SECONDS, check_schedule_name, new_job_id
from engine import ValidationError as EngineValidationError
from engine.ops import (
    ID_PATTERN,
    MAX_RATE_JOBS,
    MAX_RATE_SECONDS,
    MAX_RUNNING_LIMIT,
    MIN_RATE_SECONDS,
    QUEUE_NAME,
    push_op,
)
from queueadmin import config
from queueadmin.models import AuditEntry


def initial_queue(asked: str | None, queues: Sequence[str]) -> str:
    """The queue the submit form starts with: ``asked`` (the queue page's
    link names its queue) when it is one of ``queues``; else ``default``
    when there is no queue yet or one is named so; else none, for the
    operator to pick: a default that names no queue would make a new one,
    which no worker asks for."""
    if asked is not None and asked in queues:
        return asked
    return "default" if not queues or "default" in queues else ""


class SubmitForm(forms.Form):
    """Queue, JSON payload, max attempts and delay; ``cleaned_data["op"]`` is the push.

    ``push_id`` is the idempotency id: each rendered form carries a fresh one
    (a hidden field), and it becomes the new job's id. The broker dedups
    pushes by id (in the document, then for 15 minutes after the job left),
    so the same form posted twice (a double click, a reload that re-posts)
    makes one job. A post without one (an old page) gets a fresh id.
    """

    queue = forms.CharField(max_length=100, initial="default",
                            help_text="One of the queues listed, or a new name (no worker may be asking for it).")
    payload = forms.CharField(widget=forms.Textarea(attrs={"rows": 8, "spellcheck": "false"}),
                              initial='{"hello": "world"}',
                              help_text="Any JSON value.")
    max_attempts = forms.IntegerField(required=False, min_value=1, max_value=1000)
    delay_seconds = forms.FloatField(required=False, min_value=0, max_value=MAX_DELAY_SECONDS, initial=0,
                                     help_text="Not claimed before this many seconds from now.")
    reason = forms.CharField(required=False, max_length=1000, help_text="Optional; kept in the audit log.")
    # A callable initial: evaluated for each form rendered, so every page gets its own.
    push_id = forms.CharField(required=False, max_length=200, initial=new_job_id, widget=forms.HiddenInput)

    def __init__(self, *args: Any, queues: Sequence[str] = (), **kwargs: Any) -> None:
        """``queues``: the names the queue field suggests (a datalist)."""
        super().__init__(*args, **kwargs)
        self.queue_names = list(queues)
        if self.queue_names:
            self.fields["queue"].widget.attrs["list"] = "queue-names"
        # The broker's policy sets it (there is no per-queue default): say what it is.
        self.fields["max_attempts"].help_text = f"Blank: the broker's default, {config.policy().max_attempts}."

    def clean_push_id(self) -> str:
        push_id: str = self.cleaned_data.get("push_id") or ""
        if not push_id:
            return new_job_id()
        if not ID_PATTERN.fullmatch(push_id):
            raise forms.ValidationError("This form's id was altered: reload the page.")
        return push_id

    def clean_queue(self) -> str:
        queue: str = self.cleaned_data["queue"].strip()
        if not QUEUE_NAME.fullmatch(queue):
            raise forms.ValidationError("Use 1-100 letters, digits, '_', '.', ':' or '-', starting alphanumeric.")
        return queue

    def clean_payload(self) -> Any:
        text: str = self.cleaned_data["payload"]
        try:
            return orjson.loads(text)
        except orjson.JSONDecodeError as exc:
            raise forms.ValidationError(f"Not valid JSON: {exc}") from None

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if self.errors:
            return data
        try:
            data["op"] = push_op(
                data["queue"], [data["payload"]], policy=config.policy(),
                max_attempts=data.get("max_attempts"), delay_seconds=data.get("delay_seconds") or 0,
                ids=[data["push_id"]],
            )
        except EngineValidationError as exc:
            self.add_error("payload", str(exc))
        return data


#: The operator actions taken with a dry run (each with its scopes, see
#: :class:`~queueadmin.models.ActionSpec`).
ACTIONS = tuple(action.value for action in AuditEntry.Action.planned())


class ActionForm(forms.Form):
    """The dry run of one operator action: the action and what it applies to.

    The scope is exactly one of: ``ids`` (selected jobs), ``queue`` +
    ``status`` (every job of one queue in one status; purge only), ``group``
    (a dead-letter group; redrive or purge), ``queue`` alone (pause, resume
    and forget a queue, or redrive its dead letters), ``filter`` (every
    job the jobs list's filter matches, given as its query string; requeue
    or purge), or ``schedule`` (pause, resume or forget a schedule). A
    request that mixes scopes is refused, not guessed at: a stray ``status``
    beside ``ids`` once widened a one-job purge to the whole queue.
    """

    action = forms.ChoiceField(choices=[(a, a) for a in ACTIONS])
    ids = forms.CharField(required=False, widget=forms.HiddenInput)
    queue = forms.CharField(required=False, max_length=100)
    status = forms.ChoiceField(required=False, choices=[("", "")] + [(s, s) for s in ("pending", "running", "dead")])
    group = forms.CharField(required=False, max_length=64)
    filter = forms.CharField(required=False, max_length=2000)
    schedule = forms.CharField(required=False, max_length=100)
    #: A limit's concurrency limit; blank: no limit. Not a scope: it goes with ``queue``.
    max_running = forms.IntegerField(required=False, min_value=1, max_value=MAX_RUNNING_LIMIT)
    #: A rate limit's jobs per window and the window's seconds; both blank: no rate limit.
    rate_jobs = forms.IntegerField(required=False, min_value=1, max_value=MAX_RATE_JOBS)
    rate_seconds = forms.FloatField(required=False, min_value=MIN_RATE_SECONDS, max_value=MAX_RATE_SECONDS)
    #: A requeue's or redrive's pace: this many jobs due in each ``pace_seconds``, one after
    #: another. ``pace_jobs`` blank: every job at once (``pace_seconds`` alone means nothing).
    pace_jobs = forms.IntegerField(required=False, min_value=1, max_value=MAX_RATE_JOBS)
    pace_seconds = forms.FloatField(required=False, min_value=MIN_RATE_SECONDS, max_value=MAX_RATE_SECONDS)
    next = forms.CharField(required=False, max_length=2000)

    def clean_ids(self) -> list[str]:
        raw: str = self.cleaned_data.get("ids") or ""
        return list(dict.fromkeys(part for part in raw.replace(",", " ").split() if part))

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        action = data.get("action")
        ids, queue, status, group = data.get("ids"), data.get("queue"), data.get("status"), data.get("group")
        given = [name for name, value in (("ids", ids), ("queue", queue), ("status", status), ("group", group),
                                          ("filter", data.get("filter")), ("schedule", data.get("schedule")))
                 if value]
        if action in ACTIONS:
            spec = AuditEntry.Action(action).spec
            if tuple(given) not in spec.scopes:
                raise forms.ValidationError(spec.scope_error)
        if queue and not QUEUE_NAME.fullmatch(queue):
            self.add_error("queue", "Not a valid queue name.")
        if data.get("max_running") is not None and action != AuditEntry.Action.LIMIT:
            self.add_error("max_running", "A concurrency limit goes with the limit action only.")
        rate = [data.get(f) is not None for f in ("rate_jobs", "rate_seconds")]
        if any(rate) and action != AuditEntry.Action.RATE_LIMIT:
            self.add_error("rate_jobs", "A rate goes with the rate_limit action only.")
        elif any(rate) and not all(rate) and not self.has_error("rate_jobs") and not self.has_error("rate_seconds"):
            self.add_error("rate_jobs", "Give a rate's jobs and its seconds both, or neither to remove the rate limit.")
        if data.get("pace_jobs") is None:
            data["pace_seconds"] = None  # the page's unit list always sends one
        elif action not in (AuditEntry.Action.REQUEUE, AuditEntry.Action.REDRIVE):
            self.add_error("pace_jobs", "A pace goes with requeue and redrive only.")
        elif data.get("pace_seconds") is None and not self.has_error("pace_seconds"):
            self.add_error("pace_seconds", "Give a pace's seconds too: so many jobs in so many seconds.")
        if data.get("schedule"):
            try:
                check_schedule_name(data["schedule"])
            except EngineValidationError as exc:
                self.add_error("schedule", str(exc))
        return data


class RunForm(forms.Form):
    """The confirmation of a dry run: the signed token of the stored plan
    (:mod:`.plans`), the reason and the typed confirmation. What the run acts
    on comes from the stored plan only."""

    plan = forms.CharField(required=False, max_length=1000)
    reason = forms.CharField(required=False, max_length=2000, widget=forms.Textarea(attrs={"rows": 2}))
    confirm_text = forms.CharField(required=False, max_length=100)
    next = forms.CharField(required=False, max_length=2000)
