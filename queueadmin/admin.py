"""Django admin: the audit log, read-only.

Entries are evidence, so nobody edits or deletes them here, superusers
included; they are filterable by action, outcome, queue and time.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html, format_html_join

from queueadmin.models import AuditEntry

SHOWN_JOB_IDS = 100


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
