"""The broker API's requests, by endpoint and status, with their latency.

:func:`observe` is called once per API request (:mod:`queueadmin.api.app`),
on the event loop, so it is kept cheap: the histogram child for each
(endpoint, status) pair is looked up once and then kept in a plain dict, so
a request costs a dict lookup and prometheus-client's own observe. Labels
are bounded: the endpoint is the route's name (never the raw path, which
carries job ids), ``not_found`` for a path that matches no route, and the
status is one of the few the API answers.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Histogram

#: The registry /metrics serves (queueadmin.metrics.exporter adds its collector to it).
registry = CollectorRegistry(auto_describe=True)

#: An API request takes from well under a millisecond to a long-poll's wait.
BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)

requests = Histogram(
    "queueadmin_api_request_duration_seconds",
    "Broker API requests answered by this node, by endpoint (route name) and HTTP status, and how long each took.",
    ("endpoint", "status"),
    buckets=BUCKETS,
    registry=registry,
)

_children: dict[tuple[str, int], Histogram] = {}


def observe(endpoint: str, status: int, seconds: float) -> None:
    """Count one answered request. Any thread; no I/O."""
    child = _children.get((endpoint, status))
    if child is None:
        child = _children[(endpoint, status)] = requests.labels(endpoint, str(status))
    child.observe(seconds)
