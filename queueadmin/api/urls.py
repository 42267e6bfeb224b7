"""Routes under ``/api/``: version 1 (docs/api.md). Any other path under
``/api/`` answers ``404 not_found`` JSON (:mod:`queueadmin.api.app`).

Django-style route strings, matched by :mod:`queueadmin.api.routing`, not by
Django's URL resolver: the API is served before Django (queueadmin/asgi.py).
"""

from __future__ import annotations

from engine import API_PREFIX
from queueadmin.api import views
from queueadmin.api.routing import PREFIX, Router, path

# The version below /api/ is the engine's (BrokerClient calls API_PREFIX,
# "/api/v1"): the engine owns the wire.
VERSION = API_PREFIX.removeprefix(PREFIX)

urlpatterns = [
    path(f"{VERSION}/jobs", views.push, name="push"),
    path(f"{VERSION}/claim", views.claim, name="claim"),
    path(f"{VERSION}/jobs/<str:job_id>", views.job, name="job"),
    path(f"{VERSION}/jobs/<str:job_id>/heartbeat", views.heartbeat, name="heartbeat"),
    path(f"{VERSION}/jobs/<str:job_id>/complete", views.complete, name="complete"),
    path(f"{VERSION}/jobs/<str:job_id>/fail", views.fail, name="fail"),
    path(f"{VERSION}/ack", views.ack, name="ack"),
    path(f"{VERSION}/heartbeat", views.heartbeats, name="heartbeats"),
    path(f"{VERSION}/leases/watch", views.watch_leases, name="watch_leases"),
    path(f"{VERSION}/document", views.document, name="document"),
    path(f"{VERSION}/health", views.health, name="health"),
    path(f"{VERSION}/operator", views.operator, name="operator"),
]

#: What the API application and daphne's early refusals (queueadmin.edge) resolve paths with.
router = Router(urlpatterns)
