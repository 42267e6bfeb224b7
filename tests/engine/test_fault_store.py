"""The fault-injecting store (engine/stores/faults.py): it keeps the store
contract when no fault is asked for, and plays each fault kind as its control
file says."""

from __future__ import annotations

import importlib
import inspect
import os
import threading
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from engine.errors import PreconditionFailed, StoreConfigError, StoreUnavailable
from engine.model import utc_now
from engine.stores import FileStore, MemoryStore, ObjectStore, open_store
from engine.stores.faults import FaultStore, fault_store_url
from tests.helpers import wait_for

PROJECT_ROOT = Path(__file__).resolve().parents[2]


def _control(path: Path, **plan: object) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(orjson.dumps(plan))
    os.replace(tmp, path)


# -- the contract, through the wrapper, with no fault asked for ------------------


@pytest.fixture(params=["memory", "file"])
def any_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ObjectStore]:
    """Overrides the engine conftest's: the contract suite below runs through a FaultStore."""
    inner = "memory://" if request.param == "memory" else f"file://{tmp_path / 'store'}"
    store = open_store(fault_store_url(inner, tmp_path / "control.json"))
    assert isinstance(store, FaultStore)
    try:
        yield store
    finally:
        store.close()


_contract = importlib.import_module("tests.engine.test_store_contract")
for _name, _test in vars(_contract).items():
    if _name.startswith("test_") and list(inspect.signature(_test).parameters)[:1] == ["any_store"]:
        globals()[_name] = _test


# -- each fault kind ---------------------------------------------------------------


@pytest.fixture
def control(tmp_path: Path) -> Path:
    return tmp_path / "control.json"


@pytest.fixture
def faulty(control: Path) -> FaultStore:
    return FaultStore(MemoryStore(), control=control)


def test_open_store_selects_it_by_url(tmp_path: Path, control: Path) -> None:
    store = open_store(fault_store_url(f"file://{tmp_path / 'store'}", control))

    assert isinstance(store, FaultStore)
    assert isinstance(store.inner, FileStore)
    assert store.inner.root == tmp_path / "store"
    assert str(control) in store.describe()


@pytest.mark.parametrize("url", ["faults+memory://", "faults+memory://?fault_control=relative/path",
                                 "faults+memory://?fault_control=/a&fault_control=/b"])
def test_bad_urls_are_refused(url: str) -> None:
    with pytest.raises(StoreConfigError):
        open_store(url)


def test_error_fails_without_reaching_the_store(faulty: FaultStore, control: Path) -> None:
    _control(control, error=1.0)

    with pytest.raises(StoreUnavailable, match="injected"):
        faulty.put("queue.json", b"v1")
    with pytest.raises(StoreUnavailable, match="injected"):
        faulty.get("queue.json")

    assert faulty.inner.get("queue.json") is None
    assert faulty.stats()["faults"]["error"] == 2


def test_lost_write_lands_but_reports_failure(faulty: FaultStore, control: Path) -> None:
    _control(control, lost=1.0, ops=["put"])

    with pytest.raises(StoreUnavailable, match="landed"):
        faulty.put("queue.json", b"v1", if_none_match=True)

    blob = faulty.inner.get("queue.json")
    assert blob is not None and blob.data == b"v1"
    assert faulty.get("queue.json") == blob  # reads are not affected


def test_ops_limit_which_calls_fail(faulty: FaultStore, control: Path) -> None:
    _control(control, error=1.0, ops=["etag"])

    faulty.put("queue.json", b"v1")
    assert faulty.get("queue.json") is not None
    with pytest.raises(StoreUnavailable):
        faulty.etag("queue.json")


def test_hang_waits_then_fails(faulty: FaultStore, control: Path) -> None:
    _control(control, hang=1.0, hang_seconds=0.01)

    with pytest.raises(StoreUnavailable, match="hung"):
        faulty.put("queue.json", b"v1")

    assert faulty.inner.get("queue.json") is None
    assert faulty.stats()["faults"]["hang"] == 1


def _writing(root: Path) -> bool:
    """Whether a write to the folder store is in progress: its temporary file
    exists, and it has not been linked as a new version yet."""
    return any((root / ".tmp").glob("*.tmp"))


@pytest.mark.slow
def test_slow_write_is_delayed_in_the_middle_of_the_write(tmp_path: Path, control: Path) -> None:
    store = FaultStore(FileStore(tmp_path / "store"), control=control)
    _control(control, slow=1.0, slow_seconds=1.0)
    writing = threading.Thread(target=store.put, args=("queue.json", b"v1"), daemon=True)
    writing.start()

    wait_for(lambda: _writing(tmp_path / "store"), what="the slow write to start")
    assert FileStore(tmp_path / "store").get("queue.json") is None  # not landed yet
    writing.join(30)
    assert FileStore(tmp_path / "store").get("queue.json") is not None
    assert store.stats()["faults"]["slow"] == 1


def test_unparseable_control_file_means_no_faults(faulty: FaultStore, control: Path) -> None:
    control.write_bytes(b'{"error": 1.0')  # half written

    faulty.put("queue.json", b"v1")

    _control(control, error=2.0)  # not a probability
    assert faulty.get("queue.json") is not None


def test_stats_file_counts_requests_and_faults(faulty: FaultStore, control: Path) -> None:
    faulty.put("queue.json", b"v1")
    faulty.get("queue.json")
    _control(control, error=1.0, ops=["etag"])
    with pytest.raises(StoreUnavailable):
        faulty.etag("queue.json")
    faulty.close()

    stats = orjson.loads(control.with_name(control.name + ".stats").read_bytes())
    assert stats["pid"] == os.getpid()
    assert stats["requests"] == {"get": 1, "etag": 1, "put": 1, "delete": 0, "list": 0}
    assert stats["faults"]["error"] == 1


def test_seed_makes_the_dice_repeatable(faulty: FaultStore, control: Path) -> None:
    def outcomes() -> list[bool]:
        results = []
        for _ in range(40):
            try:
                faulty.get("queue.json")
                results.append(True)
            except StoreUnavailable:
                results.append(False)
        return results

    _control(control, error=0.5, seed=7)
    first = outcomes()
    _control(control, error=0.5, seed=7, ops=["get", "etag"])  # a change re-seeds
    assert outcomes() == first
    assert True in first and False in first


def test_conditions_still_hold_under_slow_writes(faulty: FaultStore, control: Path) -> None:
    etag = faulty.put("queue.json", b"v1", if_none_match=True)
    _control(control, slow=1.0, slow_seconds=0)

    with pytest.raises(PreconditionFailed):
        faulty.put("queue.json", b"v2", if_none_match=True)
    assert faulty.put("queue.json", b"v2", if_match=etag) != etag


def test_the_clock_reads_off_by_the_planned_offset_and_steps_back_when_it_is_removed(
    faulty: FaultStore, control: Path,
) -> None:
    assert abs((faulty.clock() - utc_now()).total_seconds()) < 1

    _control(control, clock_offset_seconds=30)
    ahead = (faulty.clock() - utc_now()).total_seconds()
    _control(control, clock_offset_seconds=-12.5)
    behind = (faulty.clock() - utc_now()).total_seconds()
    _control(control)
    back = (faulty.clock() - utc_now()).total_seconds()

    assert 29 < ahead < 31 and -13.5 < behind < -11.5 and abs(back) < 1


def test_a_clock_offset_out_of_bounds_is_refused_as_a_bad_control_file(faulty: FaultStore, control: Path) -> None:
    _control(control, clock_offset_seconds=10**6, error=1.0)

    assert abs((faulty.clock() - utc_now()).total_seconds()) < 1
    faulty.put("k", b"no fault either")  # the whole file is ignored, as any bad one
