"""The broker API's requests, by endpoint and status, with their latency.

:func:`observe` is called once per API request (:mod:`queueadmin.api.app`),
on the event loop, so it is kept cheap: a dict lookup and one fixed-bucket
histogram (:class:`engine.Buckets`: a bisection and three additions, about a
microsecond, no lock). :class:`RequestCollector` turns them into
Prometheus histograms when ``/metrics`` is scraped. Labels are bounded: the
endpoint is the route's name (never the raw path, which carries job ids),
``not_found`` for a path that matches no route, and the status is one of
the few the API answers.

Requests are answered on the server's event loop. Were two loops in two
threads to count the same pair at the same instant, one observation could be
lost; a count is never corrupted.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry
from prometheus_client.core import HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from engine import Buckets

#: The registry /metrics serves (queueadmin.metrics.exporter adds the node's collector to it).
registry = CollectorRegistry(auto_describe=True)

#: An API request takes from well under a millisecond to a long-poll's wait.
BOUNDS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
NAME = "queueadmin_api_request_duration_seconds"

_histograms: dict[tuple[str, int], Buckets] = {}


def observe(endpoint: str, status: int, seconds: float) -> None:
    """Count one answered request. No I/O, no lock."""
    histogram = _histograms.get((endpoint, status))
    if histogram is None:
        histogram = _histograms.setdefault((endpoint, status), Buckets(BOUNDS))
    histogram.observe(seconds)


def bound_label(bound: float) -> str:
    """A bucket's ``le`` label as Prometheus writes it."""
    return "+Inf" if bound == float("inf") else repr(bound)


class RequestCollector(Collector):
    """The API's request histograms, by endpoint and status, at scrape time."""

    def collect(self) -> Iterator[Metric]:
        family = HistogramMetricFamily(
            NAME,
            "Broker API requests answered by this node, by endpoint (route name) and HTTP status, and how long "
            "each took.",
            labels=["endpoint", "status"],
        )
        for (endpoint, status), histogram in sorted(_histograms.items()):
            buckets = [(bound_label(b), float(n)) for b, n in histogram.cumulative()]
            family.add_metric([endpoint, str(status)], buckets, histogram.sum)
        yield family


registry.register(RequestCollector())
