"""Decoding the document as plain JSON values (engine.decoding).

The contract of ``DocumentDecoder``: whatever the sequence of versions, each
decode equals a full parse of the same bytes; parts that did not change since
the previous version are not decoded again; parts in any other layout are
decoded whole, with the strict parser's errors.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson
import pytest

from engine import DocumentDecoder, DocumentError, GroupCommitter, decode_document_json, open_store, transitions
from engine.document import QueueState
from engine.ops import claim_op, complete_op, fail_op, purge_op, push_op, requeue_op
from engine.parsing import empty_state
from engine.policy import Policy
from engine.sequence import CHUNK_ITEMS

T0 = datetime(2025, 3, 1, 9, 30, tzinfo=UTC)
POLICY = Policy(max_attempts=1)


class Versions:
    """A state and the versions it is encoded as, commit after commit."""

    def __init__(self) -> None:
        self.state = empty_state(policy=POLICY)
        self.seq = 0
        self.now = T0

    def commit(self, change: Callable[[QueueState, datetime], Any]) -> list[bytes]:
        self.now += timedelta(seconds=1)
        change(self.state, self.now)
        self.seq += 1
        parts = self.state.encode(seq=self.seq, writer="w", now=self.now)
        self.state.encoded(seq=self.seq, writer="w")
        return parts


def full_parse(parts: list[bytes]) -> dict[str, Any]:
    document: dict[str, Any] = orjson.loads(b"".join(parts))
    return document


def assert_same_as_full_parse(decoded: Any, parts: list[bytes]) -> None:
    whole = full_parse(parts)
    assert decoded.jobs == whole.pop("jobs")
    assert decoded.dead == whole.pop("dead")
    assert decoded.header == whole
    assert decoded.size == len(b"".join(parts))
    assert decoded == decode_document_json(b"".join(parts))


def push(queue: str, count: int) -> Callable[[QueueState, datetime], Any]:
    return lambda state, now: transitions.push(state, push_op(queue, list(range(count)), policy=POLICY), now)


def test_each_version_decodes_as_a_full_parse_and_only_changed_chunks_are_decoded() -> None:
    versions, decoder = Versions(), DocumentDecoder()
    claimed: list[Any] = []

    def claim(state: QueueState, now: datetime) -> None:
        claimed.extend(transitions.claim(state, claim_op("w1", ["a"], policy=POLICY, max_jobs=5), now))

    def complete(state: QueueState, now: datetime) -> None:
        c = claimed.pop(0)
        transitions.complete(state, complete_op(c.id, c.lease), now)

    def fail(state: QueueState, now: datetime) -> None:  # max_attempts=1: to the dead letters
        c = claimed.pop(0)
        transitions.fail(state, fail_op(c.id, c.lease, error="boom", retry_in_seconds=0, policy=POLICY), now)

    def purge(state: QueueState, now: datetime) -> None:
        last = list(state.jobs)[-1]
        transitions.purge(state, purge_op([last], expect=["pending"]), now)

    def requeue(state: QueueState, now: datetime) -> None:
        transitions.requeue(state, requeue_op(list(state.dead)[:1], expect=["dead"]), now)

    def purge_queue(state: QueueState, now: datetime) -> None:
        transitions.purge(state, purge_op(queue="b", status="pending"), now)

    steps: list[Callable[[QueueState, datetime], Any]] = [
        push("a", 3 * CHUNK_ITEMS), push("b", 10), claim, complete, fail, purge, push("a", 1), requeue, fail,
        purge_queue, complete, push("c", 2 * CHUNK_ITEMS + 7),
    ]
    previous: list[bytes] = []
    for step in steps:
        parts = versions.commit(step)
        before = (decoder.chunks_decoded, decoder.chunks_reused)
        decoded = decoder.decode(parts)
        assert_same_as_full_parse(decoded, parts)
        # Decoded chunk by chunk, and only the chunks that are not the previous version's.
        chunks = [p for p in parts[2:-1] if p not in (b",", b'],"jobs":[')]
        changed = [p for p in chunks if not any(p is q for q in previous)]
        assert decoder.chunks_decoded - before[0] == len(changed)
        assert decoder.chunks_reused - before[1] == len(chunks) - len(changed)
        previous = parts
    assert decoder.chunks_reused > 0


def test_an_unchanged_chunk_is_not_decoded_again() -> None:
    versions, decoder = Versions(), DocumentDecoder()
    first = decoder.decode(versions.commit(push("q", 4 * CHUNK_ITEMS)))
    assert (decoder.chunks_decoded, decoder.chunks_reused) == (4, 0)

    # A claim changes the first chunk only; a push adds a fifth.
    versions.commit(lambda state, now: transitions.claim(state, claim_op("w1", ["q"], policy=POLICY), now))
    parts = versions.commit(push("q", 1))
    second = decoder.decode(parts)
    assert_same_as_full_parse(second, parts)
    assert (decoder.chunks_decoded, decoder.chunks_reused) == (4 + 2, 3)
    assert second.jobs[0]["status"] == "running" and len(second.jobs) == 4 * CHUNK_ITEMS + 1
    assert second.jobs[CHUNK_ITEMS] is first.jobs[CHUNK_ITEMS]  # reused, not decoded again

    # The same version again: nothing to decode.
    assert decoder.decode(parts) == second
    assert (decoder.chunks_decoded, decoder.chunks_reused) == (6, 8)


def test_equal_parts_that_are_not_the_same_objects_are_decoded_again() -> None:
    versions, decoder = Versions(), DocumentDecoder()
    parts = versions.commit(push("q", CHUNK_ITEMS + 1))
    decoder.decode(parts)
    copies = [bytes(bytearray(p)) for p in parts]
    assert_same_as_full_parse(decoder.decode(copies), parts)
    assert (decoder.chunks_decoded, decoder.chunks_reused) == (4, 0)


def test_the_committers_versions_decode_incrementally() -> None:
    committer = GroupCommitter(open_store("memory://")).start()
    try:
        decoder = DocumentDecoder()
        committer.push("q", list(range(2000)))
        _, parts = committer.committed
        first = decoder.decode(parts)
        assert_same_as_full_parse(first, parts)
        assert decoder.chunks_decoded == 4  # 2000 jobs in 512-job chunks

        committer.push("q", ["one more"])
        _, parts2 = committer.committed
        second = decoder.decode(parts2)
        assert_same_as_full_parse(second, parts2)
        assert len(second.jobs) == 2001 and second.jobs[-1]["payload"] == "one more"
        assert decoder.chunks_decoded == 5 and decoder.chunks_reused == 3
    finally:
        committer.stop()


def test_a_version_read_from_the_store_is_decoded_whole() -> None:
    parts = Versions().commit(push("q", 3))
    whole = b"".join(parts)
    decoder = DocumentDecoder()
    assert decoder.decode([whole]) == decode_document_json(whole)
    assert decoder.chunks_decoded == 0
    with pytest.raises(DocumentError, match="not valid JSON"):
        decoder.decode([b"{broken"])


@pytest.mark.parametrize(
    ("data", "words"),
    [
        (b"{broken", "not valid JSON"),
        (b'{"format": 4, "seq": 1}', "unsupported format version"),
        (b'{"format": true, "seq": 1, "queues": {}, "dead": [], "jobs": []}', "unsupported format version"),
        (b'{"format": 1, "seq": 1, "queues": {}, "dead": [], "jobs": [{"id": "a"}]}', "jobs[0]"),
        (b'{"hello": "world"}', "not a queueadmin document"),
    ],
)
def test_a_whole_decode_refuses_what_the_parser_refuses_with_its_message(data: bytes, words: str) -> None:
    with pytest.raises(DocumentError, match=words.replace("[", r"\[").replace("]", r"\]")):
        decode_document_json(data, key="queue.json")


def test_a_whole_decode_keeps_every_other_top_level_field_in_the_header() -> None:
    data = b'{"format": 1, "seq": 3, "queues": {}, "finished": [], "dead": [], "jobs": []}'
    decoded = decode_document_json(data)
    assert decoded.header == {"format": 1, "seq": 3, "queues": {}, "finished": []}
    assert (decoded.jobs, decoded.dead, decoded.size) == ([], [], len(data))
