"""URL routes for queueadmin: the dashboard at the root, sign-in, the admin,
the health check and the broker API."""

from __future__ import annotations

from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path

from queueadmin import views

urlpatterns = [
    path("", include("queueadmin.dashboard.urls")),
    path("login/", auth_views.LoginView.as_view(redirect_authenticated_user=True), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("healthz", views.healthz, name="healthz"),
    path("admin/", admin.site.urls),
    # The broker HTTP API (docs/api.md); every answer under /api/ is JSON.
    path("api/", include("queueadmin.api.urls")),
]
