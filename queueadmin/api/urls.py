"""Routes under ``/api/``: version 1, and a JSON 404 for everything else."""

from __future__ import annotations

from django.urls import path, re_path

from engine import API_PREFIX
from queueadmin.api import views

app_name = "api"

# queueadmin/urls.py mounts these routes under /api/; the version below it is
# the engine's (BrokerClient calls API_PREFIX, "/api/v1"): the engine owns the wire.
VERSION = API_PREFIX.removeprefix("/api/")

urlpatterns = [
    path(f"{VERSION}/jobs", views.push, name="push"),
    path(f"{VERSION}/claim", views.claim, name="claim"),
    path(f"{VERSION}/jobs/<str:job_id>", views.job, name="job"),
    path(f"{VERSION}/jobs/<str:job_id>/heartbeat", views.heartbeat, name="heartbeat"),
    path(f"{VERSION}/jobs/<str:job_id>/complete", views.complete, name="complete"),
    path(f"{VERSION}/jobs/<str:job_id>/fail", views.fail, name="fail"),
    path(f"{VERSION}/ack", views.ack, name="ack"),
    path(f"{VERSION}/heartbeat", views.heartbeats, name="heartbeats"),
    path(f"{VERSION}/document", views.document, name="document"),
    path(f"{VERSION}/health", views.health, name="health"),
    path(f"{VERSION}/operator", views.operator, name="operator"),
    # Last: any other path under /api/ answers JSON, never an HTML page.
    re_path(r"^.*$", views.not_found, name="not-found"),
]
