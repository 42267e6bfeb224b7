"""Engine fixtures: ``any_store``, one fresh store per backend (S3 fixtures
come from tests/s3_fixtures.py, GCS and Azure ones from tests/cloud_fixtures.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from engine.stores import ObjectStore, open_store


@pytest.fixture(params=["memory", "file", "s3", "gcs", "azure"])
def any_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ObjectStore]:
    """One fresh, empty store per backend; the contract suite runs against each."""
    if request.param == "memory":
        store = open_store("memory://")
    elif request.param == "file":
        store = open_store(f"file://{tmp_path / 'store'}")
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
