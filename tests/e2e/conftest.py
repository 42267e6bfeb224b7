"""End-to-end fixtures: a factory of clusters (nodes and workers on one store)
that are killed after the test, with their logs printed when it failed."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.e2e.browser import browser, node  # noqa: F401  (fixtures for the browser test files)
from tests.e2e.harness import Cluster, base_env


@pytest.fixture
def cluster_factory(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Callable[..., Cluster]]:
    made: list[Cluster] = []

    def make(store_url: str | None = None, **env: str) -> Cluster:
        url = store_url or f"file://{tmp_path / 'store'}"
        cluster = Cluster(tmp=tmp_path, store_url=url, env=base_env(url, tmp_path, **env))
        made.append(cluster)
        return cluster

    yield make
    failed = getattr(request.node, "rep_call", None)
    for cluster in made:
        cluster.stop_all()
        if failed is not None and failed.failed:
            print(cluster.logs())


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    report = yield
    if report.when == "call":
        item.rep_call = report  # type: ignore[attr-defined]
    return report
