"""URL routes for queueadmin."""

from __future__ import annotations

from django.contrib import admin
from django.urls import include, path

from queueadmin import views

urlpatterns = [
    path("", views.home, name="home"),
    path("healthz", views.healthz, name="healthz"),
    path("admin/", admin.site.urls),
    # The broker HTTP API (docs/api.md); every answer under /api/ is JSON.
    path("api/", include("queueadmin.api.urls")),
]
