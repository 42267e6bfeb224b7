"""URL routes for queueadmin: the dashboard at the root, sign-in, the admin
and the health check.

The broker API under ``/api/`` is not here: queueadmin/asgi.py serves it with
its own application (queueadmin.api.app) before Django's stack.
"""

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
]
