"""The store check (engine/storecheck.py): every real backend honours
conditional writes and passes, leaving nothing behind; a store that ignores or
refuses a condition is named unsafe, and a Broker on it never writes its
document."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from pathlib import Path

import orjson
import pytest

from engine import Broker, MemoryStore, NotLeader, ObjectStore
from engine.errors import PreconditionFailed, StoreConfigError, StoreUnavailable, StoreUnsafe
from engine.ops import push_op
from engine.policy import DOCUMENT_KEY
from engine.storecheck import STALE_PROBE_SECONDS, check_conditions, probe_prefix
from engine.stores import open_store
from engine.stores.base import Blob
from engine.stores.faults import fault_store_url
from tests.engine.conftest import BEAT, TAKEOVER
from tests.engine.scripted_s3 import Scripted, list_page, s3_reply
from tests.helpers import wait_for

PROBES = probe_prefix(DOCUMENT_KEY)


def test_every_backend_passes_and_keeps_nothing_but_what_was_there(any_store: ObjectStore) -> None:
    any_store.put(DOCUMENT_KEY, b"the document", if_none_match=True)

    check_conditions(any_store, DOCUMENT_KEY)

    assert any_store.list() == [DOCUMENT_KEY]
    blob = any_store.get(DOCUMENT_KEY)
    assert blob is not None and blob.data == b"the document"


class _Breaking(MemoryStore):
    """A memory store that breaks one rule of conditional writes, as named."""

    def __init__(self, rule: str) -> None:
        super().__init__()
        self.rule = rule
        self.read_etags: dict[str, str] = {}

    def put(self, key: str, data: bytes, *, if_match: str | None = None, if_none_match: bool = False) -> str:
        if self.rule == "ignores If-None-Match" and if_none_match:
            if_none_match = False
        if self.rule == "ignores If-Match" and if_match is not None:
            if_match = None
        if self.rule == "refuses If-None-Match" and if_none_match:
            raise PreconditionFailed("every create refused")
        etag = super().put(key, data, if_match=if_match, if_none_match=if_none_match)
        if self.rule == "answers another ETag":
            return etag + "-not-the-objects"
        return etag

    def get(self, key: str) -> Blob | None:
        blob = super().get(key)
        if self.rule == "reads stale bytes" and blob is not None:
            return Blob(data=b"create", etag=blob.etag)
        if blob is not None:
            self.read_etags[key] = blob.etag
        if self.rule == "reads another ETag" and blob is not None:
            return Blob(data=blob.data, etag=blob.etag + "-not-the-objects")
        return blob

    def etag(self, key: str) -> str | None:
        if self.rule == "metadata reads lag":  # served from what the last read saw, not told of writes
            return self.read_etags.get(key) or super().etag(key)
        return super().etag(key)


class _TwoSpellings(MemoryStore):
    """A store whose writes return the ETag bare while its reads quote it
    (the memory store's own are quoted), and which takes either spelling as a
    condition: the engine works there, so it passes."""

    def put(self, key: str, data: bytes, *, if_match: str | None = None, if_none_match: bool = False) -> str:
        if if_match is not None:
            if_match = f'"{if_match.strip(chr(34))}"'
        return super().put(key, data, if_match=if_match, if_none_match=if_none_match).strip('"')


@pytest.mark.parametrize(("rule", "named"), [
    ("ignores If-None-Match", "second create"),
    ("ignores If-Match", "an ETag no longer current replaced the object"),
    ("refuses If-None-Match", "with If-None-Match: * was refused"),
    ("answers another ETag", "the ETag its create returned was refused"),
    ("reads stale bytes", "did not return the bytes last written"),
    ("reads another ETag", "the ETag a read of it returned was refused"),
    ("metadata reads lag", "a metadata read of"),
])
def test_a_store_that_breaks_a_rule_is_unsafe_and_the_probe_is_gone(rule: str, named: str) -> None:
    store = _Breaking(rule)

    with pytest.raises(StoreUnsafe, match=re.escape(named)) as raised:
        check_conditions(store, DOCUMENT_KEY)

    assert "queueadmin will not write its document there" in str(raised.value)
    assert isinstance(raised.value, StoreConfigError)  # retrying will not help
    assert store.list() == []


def test_a_store_that_spells_its_etags_two_ways_but_takes_both_passes() -> None:
    store = _TwoSpellings()

    check_conditions(store, DOCUMENT_KEY)

    assert store.list() == []


def test_a_transient_failure_is_raised_as_it_is_for_the_caller_to_try_again() -> None:
    class Down(MemoryStore):
        def put(self, key: str, data: bytes, *, if_match: str | None = None, if_none_match: bool = False) -> str:
            raise StoreUnavailable("timed out")

    with pytest.raises(StoreUnavailable, match="timed out"):
        check_conditions(Down(), DOCUMENT_KEY)


def test_a_probe_left_by_a_check_that_died_is_deleted_once_an_hour_old() -> None:
    store = MemoryStore()
    now = 1_800_000_000.0
    old = f"{PROBES}{int(now - STALE_PROBE_SECONDS - 5):010d}-dead"
    recent = f"{PROBES}{int(now - 60):010d}-another-nodes-check"
    foreign = f"{PROBES}not-a-probe"
    for key in (old, recent, foreign):
        store.put(key, b"x")

    check_conditions(store, DOCUMENT_KEY, clock=lambda: now)

    assert store.list() == sorted([recent, foreign])


def test_the_fault_stores_unconditional_fault_is_unsafe(tmp_path: Path) -> None:
    control = tmp_path / "control.json"
    control.write_bytes(orjson.dumps({"unconditional": True}))
    store = open_store(fault_store_url(f"file://{tmp_path / 'store'}", control))
    try:
        with pytest.raises(StoreUnsafe, match="second create"):
            check_conditions(store, DOCUMENT_KEY)
        control.write_bytes(b"{}")
        check_conditions(store, DOCUMENT_KEY)
    finally:
        store.close()


# -- an S3-compatible endpoint, over HTTP -------------------------------------------


def test_an_s3_endpoint_that_ignores_if_none_match_is_unsafe(scripted_s3: Scripted) -> None:
    ok = s3_reply(200, etag='"e1"')
    script, store = scripted_s3(ok, s3_reply(200, etag='"e2"'), s3_reply(204), list_page([], None))

    with pytest.raises(StoreUnsafe, match="second create"):
        check_conditions(store, DOCUMENT_KEY)

    first, second = script.seen[:2]
    assert first.headers.get("If-None-Match") == "*" and second.headers.get("If-None-Match") == "*"
    assert [s.method for s in script.seen] == ["PUT", "PUT", "DELETE", "GET"]  # the probe deleted, probes listed


def test_an_s3_endpoint_without_conditional_writes_answering_not_implemented_is_unsafe(scripted_s3: Scripted) -> None:
    _, store = scripted_s3(s3_reply(501, code="NotImplemented"), s3_reply(204), list_page([], None))

    with pytest.raises(StoreUnsafe, match="If-None-Match was answered NotImplemented"):
        check_conditions(store, DOCUMENT_KEY)


# -- a Broker on such a store --------------------------------------------------------


def test_a_broker_on_a_store_that_ignores_conditions_never_writes_and_says_why(
    make_broker: Callable[..., Broker],
) -> None:
    store = _Breaking("ignores If-Match")
    broker = make_broker(store, "http://a")

    wait_for(lambda: broker.store_unsafe is not None, 10, "the check to find the store unsafe")
    wait_for(lambda: broker.readiness().reason == "store_unsafe", 5, "readiness to say so")

    assert "an ETag no longer current replaced the object" in broker.readiness().message
    assert broker.role == "standby" and store.get(DOCUMENT_KEY) is None
    assert store.list() == []  # not a document, a marker nor a probe


def test_a_broker_tries_the_check_again_after_a_transient_failure_and_then_leads(
    make_broker: Callable[..., Broker],
) -> None:
    class DownAtFirst(MemoryStore):
        failures = 2

        def put(self, key: str, data: bytes, *, if_match: str | None = None, if_none_match: bool = False) -> str:
            if key.startswith(PROBES) and self.failures > 0:
                self.failures -= 1
                raise StoreUnavailable("the store is waking up")
            return super().put(key, data, if_match=if_match, if_none_match=if_none_match)

    store = DownAtFirst()
    broker = make_broker(store, "http://a")

    wait_for(lambda: broker.role == "leader", BEAT * 10 + TAKEOVER * 4, "the broker to lead")
    assert store.failures == 0 and broker.store_unsafe is None
    assert store.get(DOCUMENT_KEY) is not None


class _SlowProbe(MemoryStore):
    """A store whose probe writes take a while: the node's first step is slow."""

    def put(self, key: str, data: bytes, *, if_match: str | None = None, if_none_match: bool = False) -> str:
        if key.startswith(PROBES):
            time.sleep(0.03)
        return super().put(key, data, if_match=if_match, if_none_match=if_none_match)


def test_a_request_sent_while_a_fresh_node_checks_its_store_waits_and_lands(
    make_broker: Callable[..., Broker],
) -> None:
    store = _SlowProbe()
    broker = make_broker(store, "http://a")  # started: its check takes some 0.15 s, within the wait (TAKEOVER)

    ids = broker.execute(push_op("q", [{"n": 1}], policy=broker.policy))

    assert broker.role == "leader" and len(ids) == 1
    assert [job["id"] for job in orjson.loads(store.get(DOCUMENT_KEY).data)["jobs"]] == ids  # type: ignore[union-attr]


def test_a_request_sent_while_a_standby_starts_waits_to_be_told_who_leads(
    make_broker: Callable[..., Broker],
) -> None:
    store = _SlowProbe()
    leader = make_broker(store, "http://a")
    wait_for(lambda: leader.role == "leader", 10, "the first node to lead")
    standby = make_broker(store, "http://b")

    with pytest.raises(NotLeader) as refused:
        standby.execute(push_op("q", [{"n": 1}], policy=standby.policy))

    assert refused.value.leader_url == "http://a"  # not "unknown": it waited for its first read
