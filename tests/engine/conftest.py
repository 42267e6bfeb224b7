"""Engine fixtures: ``any_store``, one fresh store per backend (S3 fixtures
come from tests/s3_fixtures.py, GCS and Azure ones from tests/cloud_fixtures.py),
``make_broker``, brokers with fast intervals that are stopped after the test,
and ``scripted_s3`` (tests/engine/scripted_s3.py)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from engine import Broker
from engine.stores import ObjectStore, WrappedStore, open_store
from tests.engine.scripted_s3 import scripted_s3  # noqa: F401 (the fixture, for every engine test module)

#: The brokers' heartbeat and takeover interval in tests: fast, and far enough apart.
BEAT = 0.05
TAKEOVER = 0.4


@pytest.fixture(params=["memory", "file", "wrapped", "s3", "gcs", "azure"])
def any_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ObjectStore]:
    """One fresh, empty store per backend; the contract suite runs against each."""
    if request.param == "memory":
        store = open_store("memory://")
    elif request.param == "file":
        store = open_store(f"file://{tmp_path / 'store'}")
    elif request.param == "wrapped":  # every call passed through to a folder store
        store = WrappedStore(open_store(f"file://{tmp_path / 'store'}"))
    elif request.param == "gcs":
        store = open_store(request.getfixturevalue("gcs_url"))
    elif request.param == "azure":
        target = request.getfixturevalue("azure_target")
        store = open_store(target.url, azure_connection_string=target.connection_string)
    else:
        store = open_store(request.getfixturevalue("s3_url"))
    try:
        yield store
    finally:
        store.close()


@pytest.fixture
def make_broker() -> Iterator[Callable[..., Broker]]:
    """``make(store, url, **kwargs)``: a started Broker with :data:`BEAT` and
    :data:`TAKEOVER` unless ``kwargs`` say otherwise (they go to Broker); every
    one is stopped after the test."""
    made: list[Broker] = []

    def make(store: ObjectStore, url: str, **kwargs: object) -> Broker:
        timings: dict[str, object] = {"heartbeat_seconds": BEAT, "takeover_seconds": TAKEOVER}
        broker = Broker(store, url=url, **{**timings, **kwargs})  # type: ignore[arg-type]
        made.append(broker.start())
        return broker

    yield make
    for broker in made:
        broker.stop(timeout=10)
