"""The health check. The dashboard's pages are in :mod:`queueadmin.dashboard`."""

from __future__ import annotations

from django.http import HttpRequest, JsonResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_safe


@require_safe
@never_cache
def healthz(request: HttpRequest) -> JsonResponse:
    """Liveness: the process serves requests. Does no I/O; says nothing about the store."""
    return JsonResponse({"ok": True})
