"""The ASGI application daphne serves: the broker API on its own lean
application, other HTTP through Django, websockets through Channels.

Run it with ``daphne queueadmin.asgi:application`` (``make run`` does).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "queueadmin.settings")

if TYPE_CHECKING:
    from queueadmin.api.http import Receive, Scope, Send

# Set up Django (apps, settings) before importing anything that may touch models,
# such as Channels' auth middleware or, later, the consumers.
django_asgi_app = get_asgi_application()

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from django.urls import path  # noqa: E402

from engine import tune_collector  # noqa: E402
from queueadmin import config, edge, mount, probes, runtime, shutdown  # noqa: E402
from queueadmin.api import app as api_app  # noqa: E402
from queueadmin.api.routing import PREFIX as API_PREFIX  # noqa: E402
from queueadmin.dashboard.consumers import DashboardConsumer  # noqa: E402
from queueadmin.dashboard.origin import SameOriginValidator  # noqa: E402
from queueadmin.metrics import exporter as metrics_exporter  # noqa: E402
from queueadmin.metrics import sampler  # noqa: E402

# daphne (its CLI and runserver) imports the application before it serves:
# from here on its server refuses an oversized, unauthenticated or stalled
# request body before reading it (queueadmin.edge).
edge.install()

# Only the process that serves requests imports this module (daphne, or
# runserver's serving child; never migrate, check or the autoreloader's
# parent), so this is where the embedded broker starts. It returns at once;
# the node answers 503 not_leader until it has won the election.
if config.broker_autostart():
    runtime.start_broker()
    # The metrics history: recorded while this node leads (queueadmin.metrics.sampler).
    sampler.start_sampler()
    # A SIGTERM or Ctrl-C stops the broker before the process exits: a leader
    # hands the lead over, so a standby takes over at its next poll (queueadmin.shutdown).
    shutdown.install()

# The dashboard's live updates (queueadmin/dashboard/consumers.py).
websocket_urlpatterns = [path("ws/dashboard/", DashboardConsumer.as_asgi())]


# Start-up is done: move everything alive now (Django, the app, the loaded
# queue document) into the collector's permanent generation, so that the
# periodic full collections of a long-running server only walk what requests
# allocate, instead of pausing on the whole start-up heap; and collect young
# objects less often than CPython's default, whose pauses, every few
# milliseconds under load, stall the commit cycle (engine.tune_collector).
tune_collector(config.gc_thresholds())


async def http_application(scope: Scope, receive: Receive, send: Send) -> None:
    """``/api/...`` to the API's own application (queueadmin.api.app): no
    Django middleware, signals or thread hops per request, at the speed of
    the engine underneath. ``/livez`` and ``/readyz`` to the health probes
    (queueadmin.probes), and ``/metrics`` to the Prometheus exporter
    (queueadmin.metrics.exporter), also before Django. Everything else (the dashboard, sign-in, the
    admin, static files) to Django's full stack, unchanged. Under a path
    prefix (queueadmin.mount), the same paths below it."""
    path = scope["path"]
    prefix = mount.script_prefix(scope.get("root_path"))
    if prefix:
        # Served under a prefix (queueadmin.mount): these route by the path
        # below it; Django finds its own.
        path = mount.local_path(path, prefix)
    if path.startswith(API_PREFIX):
        await api_app.application(scope if not prefix else {**scope, "path": path}, receive, send)
    elif path == metrics_exporter.PATH:
        # Prometheus scrapes with a bearer token, like the API: no Django stack either.
        await metrics_exporter.application(scope if not prefix else {**scope, "path": path}, receive, send)
    elif path in probes.PATHS:
        await probes.application(scope if not prefix else {**scope, "path": path}, receive, send)
    else:
        await django_asgi_app(scope, receive, send)


application = ProtocolTypeRouter(
    {
        # Static files are served by ServeStatic's middleware inside Django.
        "http": http_application,
        # Websockets: only this site's own pages (scheme, host and port), then
        # attach the session user; routed below the site's prefix, if any.
        "websocket": SameOriginValidator(
            AuthMiddlewareStack(mount.MountedWebsockets(URLRouter(websocket_urlpatterns)))),
    }
)
