"""The dashboard's routes (namespace ``dashboard``)."""

from __future__ import annotations

from django.urls import path

from queueadmin.dashboard import views

app_name = "dashboard"

urlpatterns = [
    path("", views.overview, name="overview"),
    path("queues/<str:name>/", views.queue, name="queue"),
    path("jobs/", views.jobs, name="jobs"),
    path("jobs/<str:job_id>/", views.job, name="job"),
    path("jobs/<str:job_id>/payload.json", views.job_payload, name="job-payload"),
    path("workers/", views.workers, name="workers"),
    path("schedules/", views.schedules, name="schedules"),
    path("dead/", views.dead, name="dead"),
    path("document/", views.document, name="document"),
    path("document/queue.json", views.document_download, name="document-download"),
    path("submit/", views.submit, name="submit"),
    path("actions/", views.action, name="action"),
    path("audit/", views.audit, name="audit"),
    path("audit/export/", views.audit_export, name="audit-export"),
]
