"""Django admin: the audit log, read-only, and the broker API tokens.

Audit entries are evidence, so nobody edits or deletes them here, superusers
included; they are filterable by action, outcome, queue and time.

API tokens are made here by name; the token is shown once, in the message
after saving, and only its digest is kept. Revoking keeps the row (who had
which token stays known); nodes stop accepting it within a few seconds.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.forms import ModelForm
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html, format_html_join
from django.utils.translation import ngettext

from queueadmin.api.auth import digests
from queueadmin.models import ApiToken, ApiTokenQuerySet, AuditEntry, QueueScope

SHOWN_JOB_IDS = 100

#: What ``ModelAdmin.get_fields`` returns, as django-stubs types it: field
#: names, or groups of names shown on one line.
type FieldGroups = list[str | list[str] | tuple[str, ...]]


@admin.register(AuditEntry)
class AuditEntryAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    list_display = ("created_at", "username", "action", "queue", "count", "outcome", "short_reason")
    list_filter = ("action", "outcome", "queue", ("created_at", admin.DateFieldListFilter))
    search_fields = ("username", "reason", "queue", "detail", "jobs__job_id")
    date_hierarchy = "created_at"
    fields = ("created_at", "username", "user", "action", "queue", "target", "reason", "count", "job_links",
              "outcome", "detail", "seq")
    readonly_fields = fields

    @admin.display(description="reason")
    def short_reason(self, entry: AuditEntry) -> str:
        return entry.reason if len(entry.reason) <= 80 else entry.reason[:80] + "…"

    @admin.display(description="jobs")
    def job_links(self, entry: AuditEntry) -> str:
        ids = list(entry.jobs.values_list("job_id", flat=True)[:SHOWN_JOB_IDS])
        links = format_html_join(" ", '<a href="{}">{}</a>', ((reverse("dashboard:job", args=[i]), i) for i in ids))
        more = entry.count - len(ids)
        return format_html("{}{}", links, f" … and {more} more" if more > 0 else "")

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    list_display = ("name", "hint", "scope", "created_at", "created_by", "revoked_at")
    list_filter = (("revoked_at", admin.EmptyFieldListFilter), "may_push", "may_work")
    search_fields = ("name", "hint", "queues")
    readonly_fields = ("hint", "created_at", "created_by", "revoked_at")
    actions = ("revoke",)

    def get_fields(self, request: HttpRequest, obj: ApiToken | None = None) -> FieldGroups:
        scope = ["queues", "may_push", "may_work"]
        return ["name", *scope] if obj is None else ["name", *scope, "hint", "created_at", "created_by", "revoked_at"]

    def save_model(self, request: HttpRequest, obj: ApiToken, form: ModelForm, change: bool) -> None:  # type: ignore[type-arg]
        if change:
            super().save_model(request, obj, form, change)
            digests.forget()  # a narrowed scope applies on this node at once, on the others within seconds
            return
        token = obj.issue()
        obj.created_by = request.user  # type: ignore[assignment]
        super().save_model(request, obj, form, change)
        digests.forget()
        messages.warning(request, f"The token for {obj.name!r} is {token} . Copy it now: it is not shown again.")

    @admin.action(description="Revoke the selected tokens")
    def revoke(self, request: HttpRequest, queryset: ApiTokenQuerySet) -> None:
        count = queryset.revoke()
        digests.forget()
        revoked = ngettext("Revoked %(n)d token; every node refuses it",
                           "Revoked %(n)d tokens; every node refuses them", count) % {"n": count}
        messages.success(request, f"{revoked} within a few seconds.")


@admin.register(QueueScope)
class QueueScopeAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    """Queue scopes: a user or a group, and a pattern of queue names their
    operator actions are limited to (see :mod:`queueadmin.dashboard.scopes`)."""

    list_display = ("pattern", "user", "group", "hide_others")
    list_filter = ("group", "hide_others")
    search_fields = ("pattern", "user__username", "group__name")
    autocomplete_fields = ("user", "group")
