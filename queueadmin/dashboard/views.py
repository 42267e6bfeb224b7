"""The dashboard's pages. Every page needs a login and ``view_dashboard``;
actions need their own permission as well (see :mod:`.actions`).

Pages read the latest snapshot from :data:`~.source.source`. A store that
cannot be reached or a document that cannot be read is shown on the page,
never as a server error: that is exactly when an operator opens it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC
from typing import Any
from urllib.parse import urlencode

import orjson
from django.contrib import messages
from django.contrib.auth.decorators import login_required, permission_required
from django.contrib.auth.models import User
from django.core.handlers.asgi import ASGIRequest
from django.core.paginator import Paginator
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect, StreamingHttpResponse
from django.http.response import HttpResponseBase
from django.shortcuts import render
from django.urls import reverse
from django.utils import timezone
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_http_methods, require_safe

from engine import EngineError
from queueadmin.dashboard import actions, auditlog, joblist, pages, plans, redaction, scopes, segments
from queueadmin.dashboard import schedules as schedule_rows
from queueadmin.dashboard.forms import ActionForm, RunForm, SubmitForm, initial_queue
from queueadmin.dashboard.snapshot import Snapshot
from queueadmin.dashboard.source import source
from queueadmin.metrics import history
from queueadmin.models import AuditEntry

VIEW = "queueadmin.view_dashboard"
AUDIT_PAGE_SIZE = 50


class SignedInRequest(HttpRequest):
    """A request to a :func:`dashboard_page` view, as mypy sees it: past
    ``login_required``, so its user is signed in. Only an annotation: Django
    makes the request."""

    user: User


def dashboard_page[R: HttpResponseBase](view: Callable[..., R]) -> Callable[..., R]:
    """Login, then the view permission (403 without it, not a login loop)."""
    return login_required(permission_required(VIEW, raise_exception=True)(view))


def read_snapshot(request: HttpRequest, *, fresh_seconds: float | None = None) -> Snapshot | HttpResponse:
    """The document for a dashboard page (503 page if it cannot be read).
    Starts reading the segments' id indexes in the background, if due
    (:func:`.segments.warm_soon`), so that a job page looks up fast."""
    try:
        snapshot = source.current() if fresh_seconds is None else source.current(fresh_seconds=fresh_seconds)
    except EngineError as exc:
        return render(request, "queueadmin/dashboard/unreadable.html",
                      {"error": exc, "kind": type(exc).__name__}, status=503)
    segments.warm_soon(snapshot.segment_refs())
    sees = scopes.visibility(request.user)
    return snapshot if sees is None else snapshot.visible(sees)


@dataclass(frozen=True, slots=True)
class LivePage:
    """A read-only page drawn from the snapshot: its template, its context
    builder ``build(snapshot, request, **url_kwargs)``, and the partials
    (each an element with that id) its live socket redraws."""

    template: str
    build: Callable[..., dict[str, Any]]
    partials: tuple[str, ...]


def _jobs(snapshot: Snapshot, request: HttpRequest) -> dict[str, Any]:
    context = joblist.jobs(snapshot, request.GET, redact=redaction.for_user(request.user))
    params = {k: v for k, v in context["filters"].items() if v}
    if context["sort"]:
        params["sort"] = context["sort"]
    if context["search_from"]:  # the pages of a search's later window stay in that window
        params["from"] = str(context["search_from"])
    context["query_base"] = urlencode(params)
    context["query_params"] = sorted(params.items())  # the page jump's hidden fields
    return context


def _job(snapshot: Snapshot, request: HttpRequest, job_id: str) -> dict[str, Any]:
    return pages.job(snapshot, job_id, job_actions(job_id), hidden=not redaction.sees_secrets(request.user),
                     sees=scopes.visibility(request.user))


def _overview(snapshot: Snapshot, request: HttpRequest) -> dict[str, Any]:
    context = pages.overview(snapshot)
    sparks = history.sparklines([row["q"].name for row in context["rows"]], snapshot.taken_at)
    for row in context["rows"]:
        row["spark"] = sparks.get(row["q"].name)
    return context


def _queue(snapshot: Snapshot, request: HttpRequest, name: str) -> dict[str, Any]:
    """One queue's page: its numbers now, and its charts over the chosen range."""
    span = history.RANGES.get(request.GET.get("range") or "") or history.RANGES[history.DEFAULT_RANGE]
    q = snapshot.queues.get(name)
    oldest = q.oldest_pending_at if q is not None else None
    step = history.seconds_per_step(span.step)
    return {
        "snapshot": snapshot,
        "name": name,
        "q": q,
        "oldest_age": (snapshot.taken_at - oldest).total_seconds() if oldest is not None else None,
        "range": span,
        "ranges": list(history.RANGES.values()),
        "resolution": pages.age_text(step),
        "sample_seconds": history.seconds_per_step(history.RAW),
        "charts": history.charts(name, span.key, snapshot.taken_at),
        "paused_by": last_pause(name) if q is not None and q.paused else None,
        # The overview's pace of it: its last minute's rates and how long it takes to drain.
        "r": pages.pace(q, pages.minute_rates(snapshot).get(name)) if q is not None else None,
    }


def last_pause(queue: str) -> AuditEntry | None:
    """The audited pause that holds ``queue`` paused (:func:`.auditlog.holding_pause`)."""
    return auditlog.holding_pause(AuditEntry.Action.PAUSE, AuditEntry.Action.RESUME, queue=queue)


def job_actions(job_id: str) -> list[AuditEntry]:
    return list(AuditEntry.objects.filter(jobs__job_id=job_id).order_by("created_at")[:200])


def _document(snapshot: Snapshot, request: HttpRequest) -> dict[str, Any]:
    return pages.document(snapshot, hidden=not redaction.sees_secrets(request.user))


def hidden_page(user: Any, name: str, kwargs: dict[str, Any]) -> bool:
    """Whether live page ``name`` (with its URL ``kwargs``) is hidden from
    ``user`` by their queue scopes (:func:`.scopes.visibility`): a queue
    outside them, and the raw document page, which prints every queue."""
    sees = scopes.visibility(user)
    if sees is None:
        return False
    return name == "document" or (name == "queue" and not sees(kwargs.get("name", "")))


def _snapshot_only(build: Callable[[Snapshot], dict[str, Any]]) -> Callable[..., dict[str, Any]]:
    """A builder that needs nothing from the request."""
    return lambda snapshot, request: build(snapshot)


#: The live pages, by URL name: the views below and the live consumer both use this.
LIVE_PAGES: dict[str, LivePage] = {
    "overview": LivePage("queueadmin/dashboard/overview.html", _overview,
                         ("live-alerts", "live-queues", "live-broker")),
    "queue": LivePage("queueadmin/dashboard/queue.html", _queue, ("live-queue",)),
    "jobs": LivePage("queueadmin/dashboard/jobs.html", _jobs, ("live-jobs",)),
    "job": LivePage("queueadmin/dashboard/job.html", _job, ("live-job",)),
    "workers": LivePage("queueadmin/dashboard/workers.html", _snapshot_only(pages.workers), ("live-workers",)),
    "dead": LivePage("queueadmin/dashboard/dead.html", _snapshot_only(pages.dead), ("live-dead",)),
    "document": LivePage("queueadmin/dashboard/document.html", _document, ("live-document",)),
    "schedules": LivePage("queueadmin/dashboard/schedules.html", _snapshot_only(schedule_rows.schedules),
                          ("live-schedules",)),
}


def live_view(name: str) -> Callable[..., HttpResponse]:
    """The view of live page ``name``; its socket keeps it current."""
    page = LIVE_PAGES[name]

    @require_safe
    @dashboard_page
    def view(request: HttpRequest, **kwargs: Any) -> HttpResponse:
        if hidden_page(request.user, name, kwargs):
            raise Http404("No such page.")
        snapshot = read_snapshot(request)
        if isinstance(snapshot, HttpResponse):
            return snapshot
        context = page.build(snapshot, request, **kwargs)
        # The socket's path under the site's prefix, if any (queueadmin.mount).
        socket = request.META.get("SCRIPT_NAME", "").rstrip("/") + "/ws/dashboard/"
        context.update(live_page=name, live_partials=" ".join(page.partials), live_socket=socket,
                       here=request.get_full_path())
        # A page builder may answer another status (a job page of an id nothing is known of: 404).
        return render(request, page.template, context, status=context.get("status_code", 200))

    view.__name__ = view.__qualname__ = name
    return view


overview = live_view("overview")
queue = live_view("queue")
jobs = live_view("jobs")
job = live_view("job")
workers = live_view("workers")
dead = live_view("dead")
document = live_view("document")
schedules = live_view("schedules")


# -- submit -----------------------------------------------------------------------------------


@require_http_methods(["GET", "POST"])
@dashboard_page
def submit(request: HttpRequest) -> HttpResponse:
    can_submit = request.user.has_perm(AuditEntry.Action.SUBMIT.permission)
    names = _queue_names(request)
    form = SubmitForm(request.POST or None, queues=names,
                      initial={"queue": initial_queue(request.GET.get("queue"), names)})
    created = None
    again = False
    out_of_scope = False
    clone = None
    run_now: dict[str, Any] | None = None
    if request.method != "POST" and request.GET.get("schedule"):
        # "Run now" on the schedules page: the schedule's job, to push once more.
        name = request.GET["schedule"]
        initial = schedule_rows.run_now_initial(name)
        sees = scopes.visibility(request.user)
        if initial is not None and sees is not None and not sees(initial["queue"]):
            initial = None  # a schedule of a queue hidden from the user: as if there were none
        run_now = {"name": name, "known": initial is not None, "hidden": False}
        if initial is not None and not redaction.sees_secrets(request.user) and redaction.hides_text(
                initial["payload"]):
            # Filled in, the form would show the secret values; emptied, it would push a broken job.
            run_now["hidden"], initial = True, None
        if initial is not None:
            form = SubmitForm(initial=initial, queues=names)
    elif request.method != "POST" and request.GET.get("from"):
        # "Clone as new job": the form filled in from a job; submitting it
        # makes a new job with its own id, after the operator's edits.
        clone = pages.clone_source(request.GET["from"], hidden=not redaction.sees_secrets(request.user),
                                   sees=scopes.visibility(request.user))
        if clone.initial is not None:
            form = SubmitForm(initial=clone.initial, queues=names)
    if request.method == "POST":
        if not can_submit:
            return render(request, "queueadmin/dashboard/forbidden.html",
                          {"need": "submit jobs (queueadmin.submit_job)"}, status=403)
        if form.is_valid():
            op = form.cleaned_data["op"]
            reason = form.cleaned_data.get("reason") or "submitted from the dashboard"
            # The form's idempotency id is the job's id: a form posted again
            # (double click, reload) pushes nothing more. Once its first post
            # is audited it is not even sent again; while that post is still
            # in flight the broker's dedup makes the second push a no-op.
            again = actions.already_submitted(op.jobs[0].id)
            if again:
                created, refusal = op.jobs[0].id, None
            else:
                try:
                    created, refusal = actions.submit(op, user=request.user, reason=reason)
                except scopes.OutOfScope as exc:  # the form says why, in place; nothing is pushed
                    created, refusal, out_of_scope = None, str(exc), True
            if refusal is not None:
                form.add_error(None, refusal)
            else:
                # A fresh form: a new idempotency id, an empty payload.
                form = SubmitForm(initial={"queue": op.queue, "payload": ""}, queues=names)
    status = 403 if out_of_scope else 422 if request.method == "POST" and form.errors else 200
    template = "queueadmin/dashboard/submit.html"
    if request.htmx:  # type: ignore[attr-defined]
        template += "#submit-form"
    # A clone or a "run now" that cannot be filled in: no form under the refusal (a default one would
    # read as the job's).
    refused = (clone is not None and clone.initial is None) or (
        run_now is not None and (run_now["hidden"] or not run_now["known"]))
    return render(request, template, {"form": form, "created": created, "again": again, "can_submit": can_submit,
                                      "clone": clone, "run_now": run_now, "refused": refused}, status=status)


def _queue_names(request: HttpRequest) -> list[str]:
    """The queues ``request``'s user sees, by name, for the submit form to
    suggest; [] when the document cannot be read (the form still works)."""
    snapshot = read_snapshot(request)
    return [] if isinstance(snapshot, HttpResponse) else sorted(snapshot.queues)


# -- actions ------------------------------------------------------------------------------------


def _safe_next(request: HttpRequest, target: str | None) -> str:
    if target and url_has_allowed_host_and_scheme(target, allowed_hosts={request.get_host()},
                                                   require_https=request.is_secure()):
        return target
    return reverse("dashboard:overview")


@require_http_methods(["POST"])
@dashboard_page
def action(request: SignedInRequest) -> HttpResponse:
    """Plan (``step=preview``, the dry run) or run (``step=run``) an operator action.

    The dry run stores its plan and hands the page a signed token for it; the
    run takes the token, the reason and the typed confirmation, and nothing
    else: it acts on the stored plan's jobs only (I9, :mod:`.plans`)."""
    template = "queueadmin/dashboard/action.html"
    if request.htmx:  # type: ignore[attr-defined]
        template += "#action-panel"
    if request.POST.get("step") == "run":
        return _run(request, template)
    return _preview(request, template)


def _forbidden(request: HttpRequest, act: str) -> HttpResponse | None:
    need = AuditEntry.Action(act).permission
    if request.user.has_perm(need):
        return None
    return render(request, "queueadmin/dashboard/forbidden.html", {"need": f"{act} ({need})"}, status=403)


def _preview(request: SignedInRequest, template: str) -> HttpResponse:
    form = ActionForm(request.POST)
    if not form.is_valid():
        return render(request, template, {"form": form}, status=422)
    data = form.cleaned_data
    if (refusal := _forbidden(request, data["action"])) is not None:
        return refusal
    # Plan against the latest version, not one a few hundred ms old: the
    # operator may be acting on what their own last action changed.
    snapshot = read_snapshot(request, fresh_seconds=0)
    if isinstance(snapshot, HttpResponse):
        return snapshot
    try:
        plan = actions.plan(snapshot, data, user=request.user)
    except scopes.OutOfScope as exc:  # the panel says why, in place
        return render(request, template, {"refused": str(exc), "next": _safe_next(request, data.get("next"))},
                      status=403)
    if plan.runnable:
        plans.save(plan, request.user)
    return render(request, template, {"plan": plan, "next": _safe_next(request, data.get("next")),
                                      "typed_over": actions.TYPED_CONFIRM_OVER})


def _run(request: SignedInRequest, template: str) -> HttpResponse:
    form = RunForm(request.POST)
    form.is_valid()  # every field is optional and bounded; a field over its bound is dropped
    data = form.cleaned_data
    destination = _safe_next(request, data.get("next"))
    try:
        plan = plans.load(data.get("plan") or "", request.user)
    except plans.PlanRefused as exc:
        return render(request, template, {"refused": exc.message, "next": destination}, status=exc.status)
    if (refusal := _forbidden(request, plan.action)) is not None:
        return refusal
    reason = (data.get("reason") or "").strip()
    errors = []
    if not reason:
        errors.append("Write a reason: it goes into the audit log.")
    phrase = plan.confirm_phrase
    if phrase is not None and (data.get("confirm_text") or "").strip() != phrase:
        errors.append(f"This {'removes' if plan.removes else 'moves'} {plan.count} jobs: type “{phrase}” to confirm.")
    if errors:
        with contextlib.suppress(EngineError):  # unreadable now: the panel shows the count without a sample
            current = source.current()
            actions.fill_sample(plan, current)
            actions.fill_effects(plan, current)
        return render(request, template, {"plan": plan, "next": destination, "errors": errors, "reason": reason,
                                          "typed_over": actions.TYPED_CONFIRM_OVER}, status=422)
    if not plans.consume(plan):
        return render(request, template, {"refused": "This dry run has already been run: nothing more was "
                                                     "changed.", "next": destination}, status=409)
    try:
        outcome = actions.run(plan, user=request.user, reason=reason)
    except scopes.OutOfScope as exc:  # narrowed since the dry run: nothing sent, nothing audited
        return render(request, template, {"refused": str(exc), "next": destination}, status=403)
    if not outcome.ok:
        messages.error(request, outcome.message)
    else:
        (messages.warning if outcome.changed else messages.success)(request, outcome.message)
    if request.htmx:  # type: ignore[attr-defined]
        response = HttpResponse(status=204)
        response["HX-Redirect"] = destination
        return response
    return HttpResponseRedirect(destination)


# -- audit log --------------------------------------------------------------------------------


@require_safe
@dashboard_page
def audit(request: HttpRequest) -> HttpResponse:
    entries, filters = auditlog.filtered(request.GET, sees=scopes.visibility(request.user))
    page = Paginator(entries, AUDIT_PAGE_SIZE).get_page(request.GET.get("page"))
    rows = [{"entry": e, "ids": [j.job_id for j in e.jobs.all()[:20]]} for e in page.object_list]
    return render(request, "queueadmin/dashboard/audit.html", {
        "page": page,
        "rows": rows,
        "filters": filters,
        "query_base": urlencode({k: v for k, v in filters.items() if v}),
        "action_choices": AuditEntry.Action.choices,
        "usernames": AuditEntry.objects.order_by().values_list("username", flat=True).distinct(),
        "formats": list(auditlog.FORMATS),
    })


@require_safe
@dashboard_page
def document_download(request: HttpRequest) -> HttpResponse:
    """The whole committed document as a JSON download, as the document page
    shows it (lease tokens hidden; secret values too, for a user who may not
    see them); the page prints only its first :data:`.pages.RAW_LIMIT_BYTES`.
    Hidden, as the page is, from a user whose queue scopes hide other queues."""
    if hidden_page(request.user, "document", {}):
        raise Http404("No such page.")
    snapshot = read_snapshot(request)
    if isinstance(snapshot, HttpResponse):
        return snapshot
    shown = pages.shown_document(snapshot, hidden=not redaction.sees_secrets(request.user))
    response = HttpResponse(orjson.dumps(shown), content_type="application/json")
    response["Content-Disposition"] = f'attachment; filename="queue-seq-{int(snapshot.seq)}.json"'
    return response


@require_safe
@dashboard_page
def job_payload(request: HttpRequest, job_id: str) -> HttpResponse:
    """The whole payload of a job in the queue (in the document, or in a
    segment object, found as its page finds it) as a JSON download: its page
    shows the first :data:`.pages.RAW_LIMIT_BYTES` of it. 404, in words, for
    a job that is not in the queue (a finished job's record keeps only the
    start of its payload)."""
    snapshot = read_snapshot(request)
    if isinstance(snapshot, HttpResponse):
        return snapshot
    found, segment_error, _ = joblist.find_job(snapshot, job_id)
    if found is None:
        why = (f"it could not be looked for in the segment objects ({segment_error})" if segment_error else
               "it is not in the queue now (it finished, was purged, or never existed)")
        return HttpResponse(f"No payload to download for job {job_id}: {why}.\n", status=404,
                            content_type="text/plain; charset=utf-8")
    payload = redaction.for_user(request.user)(found[0].get("payload"))
    response = HttpResponse(orjson.dumps(payload, option=orjson.OPT_INDENT_2), content_type="application/json")
    # The id matched the engine's id rule to be found: safe in a header.
    response["Content-Disposition"] = f'attachment; filename="job-{job_id}-payload.json"'
    return response


@require_safe
@dashboard_page
def audit_export(request: HttpRequest) -> HttpResponse | StreamingHttpResponse:
    """Every entry the audit page's filters select, as CSV (``?format=csv``,
    the default) or JSON (``?format=json``), streamed (see :mod:`.auditlog`)."""
    kind = request.GET.get("format") or "csv"
    if kind not in auditlog.FORMATS:
        return HttpResponse(f"Unknown export format {kind!r}: use one of {', '.join(auditlog.FORMATS)}.\n",
                            status=400, content_type="text/plain; charset=utf-8")
    entries, _ = auditlog.filtered(request.GET, sees=scopes.visibility(request.user))
    body = auditlog.stream(entries, kind, asynchronous=isinstance(request, ASGIRequest))
    response = StreamingHttpResponse(body, content_type=auditlog.FORMATS[kind])
    stamp = timezone.now().astimezone(UTC).strftime("%Y%m%dT%H%M%SZ")
    response["Content-Disposition"] = f'attachment; filename="queueadmin-audit-{stamp}.{kind}"'
    return response
