"""Routes under ``/api/``: version 1, and a JSON 404 for everything else."""

from __future__ import annotations

from django.urls import path, re_path

from queueadmin.api import views

app_name = "api"

urlpatterns = [
    path("v1/jobs", views.push, name="push"),
    path("v1/claim", views.claim, name="claim"),
    path("v1/jobs/<str:job_id>", views.job, name="job"),
    path("v1/jobs/<str:job_id>/heartbeat", views.heartbeat, name="heartbeat"),
    path("v1/jobs/<str:job_id>/complete", views.complete, name="complete"),
    path("v1/jobs/<str:job_id>/fail", views.fail, name="fail"),
    path("v1/document", views.document, name="document"),
    path("v1/health", views.health, name="health"),
    path("v1/operator", views.operator, name="operator"),
    # Last: any other path under /api/ answers JSON, never an HTML page.
    re_path(r"^.*$", views.not_found, name="not-found"),
]
