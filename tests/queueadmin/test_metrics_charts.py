"""The charts: the SVG module (queueadmin.metrics.charts), the series read
back from the history (.history), the queue page and the overview's
sparklines, and their live updates."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.test import Client

from engine import Broker
from queueadmin.dashboard.source import source
from queueadmin.metrics import history
from queueadmin.metrics.charts import Series, line_chart, nice_max, number, path_of, sparkline
from queueadmin.metrics.records import MINUTE, RAW, MetricPoint
from queueadmin.metrics.sampler import Sampler, record
from tests.queueadmin.dashboard_fixtures import client_for, make_user, push
from tests.queueadmin.test_dashboard_live import ORIGIN, connect, cookie_for, next_update, run_async

T0 = datetime(2026, 12, 1, 10, 0, 0, tzinfo=UTC)
EVIL = '<script>alert("x")</script>&'


@pytest.fixture(autouse=True)
def fresh_cache() -> Iterator[None]:
    history.cache.clear()
    yield
    history.cache.clear()


# -- the SVG -------------------------------------------------------------------------------


def test_a_path_moves_the_pen_after_each_gap() -> None:
    d = path_of([(0, 1.0), (1, 2.0), (2, None), (3, 4.0), (4, 5.0)], lambda t: t * 10, lambda v: 100 - v)
    assert d == "M0.0,99.0 L10.0,98.0 M30.0,96.0 L40.0,95.0"
    assert path_of([(0, None)], lambda t: t, lambda v: v) == ""


@pytest.mark.parametrize(
    ("value", "expected"),
    [(0, 1), (-3, 1), (0.7, 1), (1, 1), (1.2, 2), (3, 5), (21, 25), (99, 100), (1234, 2000), (float("nan"), 1)],
)
def test_nice_max(value: float, expected: float) -> None:
    assert nice_max(value) == expected


def test_number_labels_are_short() -> None:
    assert [number(v) for v in (0, 0.25, 12, 1500, 2_000_000)] == ["0", "0.25", "12", "1.5k", "2M"]


def test_a_chart_scales_points_into_the_plot_and_labels_its_axes() -> None:
    start = T0.timestamp()
    svg = line_chart(
        "Depth",
        [Series("pending", [(start, 0.0), (start + 3600, 40.0)])],
        start=start,
        end=start + 3600,
        unit="jobs",
        width=200,
        height=100,
    )
    # Plot: x 56..188, y 12..76; 40 is the top of a 0..50 axis.
    assert 'd="M56.0,76.0 L188.0,24.8"' in svg
    assert ">50</text>" in svg and ">25</text>" in svg and ">0</text>" in svg
    assert ">10:00</text>" in svg and ">11:00</text>" in svg
    assert "Depth (jobs)" in svg and "no data yet" not in svg


def test_a_chart_without_points_says_so() -> None:
    svg = line_chart("Depth", [Series("pending", [])], start=0, end=60)
    assert "no data yet" in svg and "<path" not in svg


def test_every_text_in_a_chart_is_escaped() -> None:
    svg = line_chart(EVIL, [Series(EVIL, [(0, 1.0), (1, 2.0)], css='"><script>')], start=0, end=1, unit=EVIL)
    spark = sparkline([(0, 1.0), (1, 2.0)], title=EVIL)
    for markup in (svg, spark):
        assert "<script>" not in markup and 'alert("x")' not in markup
        assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;&amp;" in markup


def test_a_sparkline_spans_its_points() -> None:
    spark = sparkline([(0, 0.0), (10, 5.0), (20, 10.0)], title="q", width=22, height=12)
    assert 'd="M1.0,11.0 L11.0,6.0 L21.0,1.0"' in spark
    assert "<path" not in sparkline([(0, 3.0)], title="one point")


# -- series from the history ---------------------------------------------------------------


def pts(*rows: tuple[int, dict[str, Any]]) -> list[MetricPoint]:
    return [MetricPoint(step=RAW, at=T0 + timedelta(seconds=s), queue="q", **fields) for s, fields in rows]


def test_rates_are_counter_growth_per_second_and_break_at_gaps() -> None:
    points = pts(
        (0, {"completed": 0}),
        (10, {"completed": 50}),
        (20, {"completed": 70}),
        (100, {"completed": 90}),
        (110, {"completed": 0}),
    )
    t = T0.timestamp()
    assert history.rate(points, "completed", step=10) == [(t + 10, 5.0), (t + 20, 2.0), (t + 30, None), (t + 110, 0.0)]


def test_gauges_break_at_gaps() -> None:
    t = T0.timestamp()
    points = pts((0, {"pending": 1}), (10, {"pending": 2}), (60, {"pending": 3}))
    assert history.gauge(points, "pending", step=10) == [(t, 1), (t + 10, 2), (t + 20, None), (t + 60, 3)]


@pytest.mark.django_db
def test_each_range_reads_its_own_resolution() -> None:
    now = T0 + timedelta(hours=3)
    record([MetricPoint(step=RAW, at=now - timedelta(minutes=m), queue="q", pending=m) for m in (50, 5)])
    MetricPoint.objects.create(step=MINUTE, at=now - timedelta(hours=20), queue="q", pending=999)
    assert [p.pending for p in history.points("q", history.RANGES["1h"], now)] == [50, 5]
    assert history.points("q", history.RANGES["24h"], now)[0].pending == 999


# -- pages -----------------------------------------------------------------------------------


def sample(broker: Broker) -> None:
    source.reset()
    Sampler(interval=10, broker=lambda: broker).step()


@pytest.mark.django_db
def test_the_queue_page_draws_five_charts_from_the_history(broker: Broker, viewer: Client) -> None:
    push(broker, "mail", [1, 2, 3])
    sample(broker)
    push(broker, "mail", [4])
    sample(broker)
    page = viewer.get("/queues/mail/")
    assert page.status_code == 200
    html = page.content.decode()
    for chart in ("chart-throughput", "chart-depth", "chart-oldest", "chart-failures", "chart-latency"):
        assert f'id="{chart}"' in html
    assert html.count('<svg class="chart"') == 5
    depth = re.search(r'id="chart-depth">(.*?)</figure>', html, re.S)
    assert depth is not None and 'class="line s0" d="M' in depth.group(1)  # pending, drawn from two samples
    assert 'data-testid="pending"><a href="/jobs/?queue=mail&amp;status=pending">4</a>' in html
    assert 'aria-current="true" data-range="1h"' in html


@pytest.mark.django_db
def test_dead_letters_have_one_colour_on_every_chart_and_failed_attempts_another(
        broker: Broker, viewer: Client) -> None:
    push(broker, "mail", [1])
    html = viewer.get("/queues/mail/").content.decode()
    keys = {name: css for css, name in re.findall(r'<span class="key ([^"]+)">([^<]+)</span>', html)}
    assert keys["dead letters"] == keys["moved to dead letters"]
    assert keys["failed attempts"] not in (keys["dead letters"], keys["completed"], keys["pending"])


@pytest.mark.django_db
def test_the_range_selector_switches_resolution(broker: Broker, viewer: Client) -> None:
    push(broker, "mail", [1])
    html = viewer.get("/queues/mail/?range=7d").content.decode()
    assert 'aria-current="true" data-range="7d"' in html and "Last 7 days" in html and "10 min" in html
    assert 'aria-current="true" data-range="1h"' in viewer.get("/queues/mail/?range=bogus").content.decode()


@pytest.mark.django_db
def test_a_queue_name_is_escaped_and_an_unknown_queue_is_not_an_error(broker: Broker, viewer: Client) -> None:
    page = viewer.get("/queues/gone-queue/")
    assert page.status_code == 200 and "No queue named “gone-queue”" in page.content.decode()


@pytest.mark.django_db
def test_the_queue_page_needs_the_view_permission(broker: Broker) -> None:
    nobody = client_for(make_user("nobody"))
    assert nobody.get("/queues/mail/").status_code == 403
    assert Client().get("/queues/mail/").status_code == 302


@pytest.mark.django_db
def test_the_overview_links_each_queue_to_its_page_with_a_sparkline(broker: Broker, viewer: Client) -> None:
    push(broker, "mail", [1, 2])
    sample(broker)
    push(broker, "mail", [3])
    sample(broker)
    html = viewer.get("/").content.decode()
    row = re.search(r'<tr data-row="mail">(.*?)</tr>', html, re.S)
    assert row is not None
    assert 'href="/queues/mail/"' in row.group(1)
    spark = re.search(r'<svg class="spark".*?</svg>', row.group(1), re.S)
    assert spark is not None and 'class="line" d="M' in spark.group(0)
    assert "mail: pending jobs over the last hour" in spark.group(0)


@pytest.mark.django_db(transaction=True)
@run_async
async def test_an_open_queue_page_gets_its_charts_redrawn_live(broker: Broker) -> None:
    viewer = await sync_to_async(lambda: client_for(make_user("viewer", "view_dashboard", staff=True)))()
    await asyncio.to_thread(push, broker, "mail", [1])
    communicator, connected, _ = await connect("/queues/mail/?range=24h", cookie_for(viewer), ORIGIN)
    assert connected
    try:
        first = await next_update(communicator)
        assert set(first["fragments"]) == {"live-queue"}
        assert 'data-range="24h"' in first["fragments"]["live-queue"]
        await asyncio.to_thread(push, broker, "mail", [2, 3])
        update = await next_update(communicator)
        fragment = update["fragments"]["live-queue"]
        assert 'data-testid="pending"><a href="/jobs/?queue=mail&amp;status=pending">3</a>' in fragment
        assert update["fragments"]["live-queue"].count('<svg class="chart"') == 5
    finally:
        await communicator.disconnect()
