"""Metrics: the Prometheus endpoint, the history behind the charts, and the charts.

* :mod:`.requests`: the broker API's request counts and latencies;
* :mod:`.exporter`: ``/metrics`` in Prometheus text format, read from the
  broker and the document at scrape time;
* :mod:`.records`: the history model (per queue, downsampled, 7 days and more);
* :mod:`.sampler`: the leader's thread that records the history;
* :mod:`.charts`: points to server-rendered SVG.

docs/metrics.md describes the metrics, the history's downsampling and the alerts.
"""
