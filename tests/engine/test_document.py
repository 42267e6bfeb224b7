"""Encoding and parsing of the queue document (format 1), and the chunked EncodedSequence behind it.

* Round trips: a state with every kind of job encodes, parses back field for
  field, and re-encodes to the same bytes.
* The encoded shape that other components rely on (top-level keys, FIFO order).
* EncodedSequence: order, chunk boundaries, and reuse of unchanged chunks (by identity).
* Strict parsing: every malformed document raises DocumentError naming the key
  and the problem, so a writer never overwrites what it could not read (I6).
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import orjson
import pytest

from engine import sequence, transitions
from engine.document import FORMAT, RECENT_COMMITS, QueueState
from engine.errors import DocumentError, EngineError
from engine.model import Attempt, BrokerInfo, ClaimedJob, DeadLetter, Job, Lease, QueueCounters
from engine.ops import claim_op, complete_op, fail_op, heartbeat_op, purge_op, push_op
from engine.parsing import empty_state, parse_document
from engine.policy import Policy
from engine.sequence import CHUNK_ITEMS, EncodedSequence

KEY = "tenants/acme/queue.json"
T0 = datetime(2025, 3, 1, 9, 30, 0, 123456, tzinfo=UTC)
POLICY = Policy(max_attempts=3)



# -- helpers ------------------------------------------------------------------------------------------


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def encode(state: QueueState, *, seq: int = 1, writer: str = "writer-1", now: datetime = T0) -> bytes:
    return b"".join(state.encode(seq=seq, writer=writer, now=now))


def push(state: QueueState, queue: str, payloads: list[Any], *, now: datetime = T0, **kwargs: Any) -> list[str]:
    return transitions.push(state, push_op(queue, payloads, policy=state.policy, **kwargs), now)


def claim(state: QueueState, queue: str, *, now: datetime = T0, **kwargs: Any) -> list[ClaimedJob]:
    return transitions.claim(state, claim_op("w1", [queue], policy=state.policy, **kwargs), now)


def fail(state: QueueState, c: ClaimedJob, *, now: datetime = T0, error: str = "boom", retry: float | None = 0) -> None:
    transitions.fail(state, fail_op(c.id, c.lease, error=error, retry_in_seconds=retry, policy=state.policy), now)


def rich_state() -> tuple[QueueState, dict[str, str]]:
    """A state with pending, running, delayed, retried and dead jobs in two queues, plus counters and a broker.

    Returns the state and the lease tokens of its running jobs.
    """
    state = empty_state(policy=POLICY)
    push(state, "emails", [{"to": "a@example.com"}], ids=["dead-1"], max_attempts=1, now=at(-10))
    [dying] = claim(state, "emails", now=at(-9))
    fail(state, dying, now=at(-8), error="SMTP 550\nmailbox unavailable")
    push(state, "emails", ["p1", {"nested": [1, 2.5, None, True]}], ids=["p1", "p2"], now=at(-7))
    push(state, "reports", [2**63 - 1, "caf\u00e9 \u2603"], ids=["r1", "r2"], now=at(-6))
    push(state, "emails", [[]], ids=["delayed"], delay_seconds=3600.5, now=at(-5))
    [running] = claim(state, "emails", now=at(-4), lease_seconds=12.5)  # p1
    [retried] = claim(state, "reports", now=at(-3))  # r1
    fail(state, retried, now=at(-2), error="timeout", retry=30)
    [done] = claim(state, "reports", now=at(-1))  # r2
    transitions.complete(state, complete_op(done.id, done.lease), at(-1))
    push(state, "reports", [None], ids=["r3"], now=at(0))
    [hb] = claim(state, "reports", now=at(0))  # r3
    transitions.heartbeat(state, heartbeat_op(hb.id, hb.lease, lease_seconds=90), at(0.5))
    state.broker = BrokerInfo(id="broker-a", url="http://10.0.0.5:8000", epoch=4)
    assert list(state.jobs) == ["p1", "p2", "delayed", "r1", "r3"]
    assert state.jobs["r1"].status == "pending"
    return state, {"p1": running.lease, "r3": hb.lease}


def base_doc() -> dict[str, Any]:
    """A valid document as a dict, with a running job at jobs[0], a pending one at jobs[1] and one dead entry."""
    state, _ = rich_state()
    return orjson.loads(encode(state))


def parse_dict(doc: Any) -> QueueState:
    return parse_document(KEY, orjson.dumps(doc), policy=POLICY)


# -- round trip -----------------------------------------------------------------------------------------


def test_round_trip_keeps_every_field() -> None:
    state, _ = rich_state()

    parsed = parse_document(KEY, encode(state, seq=5, writer="writer-9"), policy=POLICY, etag='"abc"')

    assert parsed.seq == 5
    assert parsed.writer == "writer-9"
    assert parsed.etag == '"abc"'
    assert parsed.broker == BrokerInfo(id="broker-a", url="http://10.0.0.5:8000", epoch=4)
    assert parsed.queues == state.queues
    assert parsed.queues["emails"] == QueueCounters(pushed=4, failed=1, dead=1)
    assert parsed.queues["reports"] == QueueCounters(pushed=3, completed=1, failed=1)
    assert list(parsed.jobs) == list(state.jobs)
    for job_id, job in state.jobs.items():
        assert parsed.jobs[job_id] == job, job_id  # every field: payload bytes, datetimes, lease, last_error
    assert parsed.dead == state.dead
    assert list(parsed.recent) == [("writer-9", 5)]
    assert parsed.dirty is False


def test_round_trip_of_individual_fields_is_exact() -> None:
    state, tokens = rich_state()

    parsed = parse_document(KEY, encode(state), policy=POLICY)

    p1 = parsed.jobs["p1"]
    assert p1.lease == Lease(
        worker="w1", token=tokens["p1"], claimed_at=at(-4), heartbeat_at=at(-4), expires_at=at(8.5), seconds=12.5
    )
    assert p1.payload == b'"p1"'
    r3 = parsed.jobs["r3"]
    assert r3.lease is not None
    assert (r3.lease.heartbeat_at, r3.lease.expires_at, r3.lease.seconds) == (at(0.5), at(90.5), 90.0)
    assert parsed.jobs["delayed"].not_before == at(-5 + 3600.5)
    assert parsed.jobs["r1"].not_before == at(28)
    assert parsed.jobs["r1"].last_error == "timeout"
    assert parsed.jobs["r1"].attempts == 1
    assert "r2" not in parsed.jobs  # completed
    assert orjson.loads(parsed.jobs["p2"].payload) == {"nested": [1, 2.5, None, True]}
    assert orjson.loads(parsed.jobs["r1"].payload) == 2**63 - 1
    assert parsed.dead["dead-1"] == DeadLetter(
        id="dead-1",
        queue="emails",
        payload=b'{"to":"a@example.com"}',
        attempts=1,
        max_attempts=1,
        enqueued_at=at(-10),
        died_at=at(-8),
        error="SMTP 550\nmailbox unavailable",
        history=(
            Attempt(worker="w1", claimed_at=at(-9), heartbeat_at=at(-9), ended_at=at(-8), end="failed",
                    error="SMTP 550\nmailbox unavailable"),
        ),
    )
    assert parsed.jobs["r1"].history == (
        Attempt(worker="w1", claimed_at=at(-3), heartbeat_at=at(-3), ended_at=at(-2), end="failed", error="timeout"),
    )
    assert parsed.jobs["p1"].enqueued_at.microsecond == 123456


def test_reencoding_a_parsed_state_gives_identical_bytes() -> None:
    state, _ = rich_state()
    first = encode(state, seq=1, writer="w")
    state.encoded(seq=1, writer="w")

    parsed = parse_document(KEY, first, policy=POLICY)

    assert encode(parsed, seq=2, writer="w", now=at(9)) == encode(state, seq=2, writer="w", now=at(9))


def test_round_trip_is_stable_over_repeated_parse_and_encode() -> None:
    state, _ = rich_state()
    data = encode(state, seq=1)
    for seq in range(2, 6):
        state = parse_document(KEY, data, policy=POLICY)
        data = encode(state, seq=seq)

    final = parse_document(KEY, data, policy=POLICY)
    assert list(final.jobs) == ["p1", "p2", "delayed", "r1", "r3"]
    assert list(final.recent) == [("writer-1", s) for s in range(1, 6)]


def test_round_trip_keeps_non_utc_times_as_the_same_instant() -> None:
    state = empty_state(policy=POLICY)
    plus2 = timezone(timedelta(hours=2))
    push(state, "q", [1], ids=["a"], now=T0.astimezone(plus2))

    parsed = parse_document(KEY, encode(state), policy=POLICY)

    assert parsed.jobs["a"].enqueued_at == T0
    assert parsed.jobs["a"].enqueued_at.utcoffset() is not None


def test_parsed_state_keeps_claim_order_leases_and_expiry() -> None:
    state, tokens = rich_state()
    parsed = parse_document(KEY, encode(state), policy=POLICY)

    # FIFO order survives: p2 is the oldest pending claimable job in emails.
    assert [c.id for c in claim(parsed, "emails", now=at(1), max_jobs=10)] == ["p2"]
    # The running job's lease token still works after the round trip.
    transitions.complete(parsed, complete_op("p1", tokens["p1"]), at(1))
    assert "p1" not in parsed.jobs
    # The lease index is rebuilt: r3 expires at its deadline.
    transitions.apply_batch(parsed, [], at(90.5))
    assert parsed.jobs["r3"].status == "pending"
    assert parsed.jobs["r3"].lease is None


def test_parsed_running_job_refuses_a_wrong_token() -> None:
    state, _ = rich_state()
    parsed = parse_document(KEY, encode(state), policy=POLICY)

    [result] = transitions.apply_batch(parsed, [complete_op("p1", "not-the-token")], at(1))

    assert result.code == "lease_lost"
    assert parsed.jobs["p1"].status == "running"


def test_encode_does_not_change_the_state() -> None:
    state, _ = rich_state()
    before_jobs, before_recent, before_dirty = dict(state.jobs), list(state.recent), state.dirty

    encode(state, seq=3)

    assert (dict(state.jobs), list(state.recent), state.dirty) == (before_jobs, before_recent, before_dirty)
    assert state.seq == 0


def test_empty_state_encodes_and_parses() -> None:
    state = empty_state(policy=POLICY)

    data = encode(state, seq=1, writer="w")
    doc = json.loads(data)
    parsed = parse_document(KEY, data, policy=POLICY)

    assert (doc["jobs"], doc["dead"], doc["queues"]) == ([], [], {})
    assert (parsed.jobs, parsed.dead, parsed.queues, parsed.seq) == ({}, {}, {}, 1)


# -- the encoded shape -------------------------------------------------------------------------------


def test_encoded_document_has_the_documented_top_level_shape() -> None:
    state, _ = rich_state()

    doc = json.loads(encode(state, seq=12, writer="writer-7", now=at(3)))  # the standard library's parser too

    assert {"format", "seq", "writer", "jobs", "dead", "queues", "broker"} <= set(doc)
    assert doc["format"] == FORMAT == 1
    assert doc["seq"] == 12
    assert doc["writer"] == "writer-7"
    assert datetime.fromisoformat(doc["written_at"]) == at(3)
    assert doc["broker"] == {"id": "broker-a", "url": "http://10.0.0.5:8000", "epoch": 4}
    assert doc["queues"]["reports"] == {
        "pushed": 3,
        "completed": 1,
        "failed": 1,
        "dead": 0,
        "purged": 0,
        "dead_dropped": 0,
        "paused": False,
    }
    assert isinstance(doc["jobs"], list)
    for job in doc["jobs"]:
        assert {"id", "queue", "payload", "status", "attempts"} <= set(job)
        assert job["status"] in ("pending", "running")
        assert isinstance(job["attempts"], int)
    by_id = {j["id"]: j for j in doc["jobs"]}
    assert by_id["p2"]["payload"] == {"nested": [1, 2.5, None, True]}
    assert by_id["p1"]["status"] == "running"
    assert by_id["p1"]["lease"]["worker"] == "w1"
    assert by_id["p2"]["lease"] is None
    assert [d["id"] for d in doc["dead"]] == ["dead-1"]
    assert doc["dead"][0]["error"] == "SMTP 550\nmailbox unavailable"


def test_encoded_jobs_are_in_fifo_order_with_a_retried_job_at_the_back() -> None:
    state = empty_state(policy=POLICY)
    push(state, "q", [1, 2, 3], ids=["a", "b", "c"])
    [first] = claim(state, "q")
    assert first.id == "a"
    fail(state, first, now=at(1), retry=0)

    doc = json.loads(encode(state))

    assert [j["id"] for j in doc["jobs"]] == ["b", "c", "a"]
    assert doc["jobs"][2]["last_error"] == "boom"
    assert doc["jobs"][2]["attempts"] == 1


def test_completed_jobs_leave_the_document_but_stay_counted() -> None:
    state = empty_state(policy=POLICY)
    push(state, "q", [1, 2], ids=["a", "b"])
    [c] = claim(state, "q")
    transitions.complete(state, complete_op(c.id, c.lease), T0)

    doc = json.loads(encode(state))

    assert [j["id"] for j in doc["jobs"]] == ["b"]
    assert doc["queues"]["q"]["completed"] == 1


def test_payload_bytes_are_written_verbatim() -> None:
    state = empty_state(policy=POLICY)
    push(state, "q", [{"b": 1, "a": [1.0, "\u00e9"]}], ids=["x"])

    data = encode(state)

    assert state.jobs["x"].payload in data
    assert json.loads(data)["jobs"][0]["payload"] == {"b": 1, "a": [1.0, "\u00e9"]}


# -- recent commits --------------------------------------------------------------------------------------


def test_has_commit_after_encoded_and_parse_keeps_it() -> None:
    state, _ = rich_state()
    assert not state.has_commit("w", 1)
    data = encode(state, seq=1, writer="w")
    assert not state.has_commit("w", 1)  # encode alone records nothing

    state.encoded(seq=1, writer="w")

    assert state.has_commit("w", 1)
    assert not state.has_commit("w", 2)
    assert not state.has_commit("other", 1)
    assert (state.seq, state.writer, state.dirty) == (1, "w", False)
    parsed = parse_document(KEY, data, policy=POLICY)
    assert parsed.has_commit("w", 1)
    assert not parsed.has_commit("w", 0)


def test_recent_commits_include_other_writers() -> None:
    state = empty_state(policy=POLICY)
    data = encode(state, seq=1, writer="a")
    state = parse_document(KEY, data, policy=POLICY)
    data = encode(state, seq=2, writer="b")

    parsed = parse_document(KEY, data, policy=POLICY)

    assert parsed.has_commit("a", 1)
    assert parsed.has_commit("b", 2)
    assert json.loads(data)["recent_commits"] == [{"writer": "a", "seq": 1}, {"writer": "b", "seq": 2}]


def test_recent_commits_keep_only_the_last_32() -> None:
    assert RECENT_COMMITS == 32
    state = empty_state(policy=POLICY)
    for seq in range(1, 41):
        state.encoded(seq=seq, writer="w")
    assert list(state.recent) == [("w", s) for s in range(9, 41)]

    data = encode(state, seq=41, writer="w")

    assert [c["seq"] for c in json.loads(data)["recent_commits"]] == list(range(10, 42))
    parsed = parse_document(KEY, data, policy=POLICY)
    assert parsed.has_commit("w", 41)
    assert parsed.has_commit("w", 10)
    assert not parsed.has_commit("w", 9)


def test_parse_of_a_document_listing_more_than_32_commits_keeps_the_last_32() -> None:
    doc = base_doc()
    doc["recent_commits"] = [{"writer": "x", "seq": s} for s in range(100)]

    parsed = parse_dict(doc)

    assert list(parsed.recent) == [("x", s) for s in range(68, 100)]


# -- EncodedSequence ------------------------------------------------------------------------------------


def item(key: str) -> bytes:
    return orjson.dumps({"k": key})


def contents(seq: EncodedSequence) -> list[str]:
    """The sequence's items decoded from its parts, in order."""
    return [x["k"] for x in orjson.loads(b"[" + b"".join(seq.parts()) + b"]")]


def filled(n: int) -> EncodedSequence:
    seq = EncodedSequence()
    for i in range(n):
        seq.append(f"k{i}", item(f"k{i}"))
    return seq


def test_empty_sequence_has_no_parts() -> None:
    seq = EncodedSequence()

    assert list(seq.parts()) == []
    assert len(seq) == 0
    assert "x" not in seq


def test_append_update_remove_keep_order() -> None:
    seq = filled(5)

    seq.update("k2", item("two"))
    seq.remove("k0")
    seq.append("k5", item("k5"))

    assert contents(seq) == ["k1", "two", "k3", "k4", "k5"]
    assert len(seq) == 5
    assert "k0" not in seq
    assert "k2" in seq


def test_append_of_an_existing_key_moves_it_to_the_back_with_a_larger_slot() -> None:
    seq = filled(4)
    old_slot = seq.slot("k1")

    new_slot = seq.append("k1", item("moved"))

    assert new_slot > seq.slot("k3") > old_slot
    assert seq.slot("k1") == new_slot
    assert contents(seq) == ["k0", "k2", "k3", "moved"]
    assert len(seq) == 4


def test_update_keeps_the_slot() -> None:
    seq = filled(3)
    slot = seq.slot("k1")

    seq.update("k1", item("new"))

    assert seq.slot("k1") == slot
    assert contents(seq) == ["k0", "new", "k2"]


def test_parts_joined_equal_the_comma_joined_items_across_chunk_boundaries() -> None:
    n = 2 * CHUNK_ITEMS + 7
    seq = filled(n)

    parts = list(seq.parts())

    assert b"".join(parts) == b",".join(item(f"k{i}") for i in range(n))
    assert len(parts) == 5  # three chunks and two separators
    assert parts[1] == parts[3] == b","


def test_exactly_one_full_chunk_is_one_part() -> None:
    seq = filled(CHUNK_ITEMS)

    assert len(list(seq.parts())) == 1
    seq.append("extra", item("extra"))
    assert len(list(seq.parts())) == 3
    assert contents(seq)[-1] == "extra"


def test_unchanged_chunks_are_reused_by_identity() -> None:
    seq = filled(3 * CHUNK_ITEMS)
    before = list(seq.parts())

    seq.update(f"k{CHUNK_ITEMS + 3}", item("changed"))  # in the middle chunk
    after = list(seq.parts())

    assert len(before) == len(after) == 5
    assert after[0] is before[0]
    assert after[4] is before[4]
    assert after[2] is not before[2]
    assert b'"changed"' in after[2]
    assert list(seq.parts())[2] is after[2]  # cached again once rebuilt


def test_moving_an_item_to_the_back_rebuilds_only_its_old_and_new_chunks() -> None:
    seq = filled(3 * CHUNK_ITEMS)
    before = list(seq.parts())

    seq.append("k5", item("k5"))  # from chunk 0 to a new chunk 3
    after = list(seq.parts())

    assert len(after) == 7
    assert after[0] is not before[0]
    assert after[2] is before[2]
    assert after[4] is before[4]
    assert contents(seq)[-1] == "k5"
    assert contents(seq)[:5] == ["k0", "k1", "k2", "k3", "k4"]


def test_removing_every_item_of_a_middle_chunk_drops_that_chunk() -> None:
    seq = filled(3 * CHUNK_ITEMS)
    before = list(seq.parts())

    for i in range(CHUNK_ITEMS, 2 * CHUNK_ITEMS):
        seq.remove(f"k{i}")
    after = list(seq.parts())

    assert len(after) == 3
    assert after[0] is before[0]
    assert after[2] is before[4]
    expected = [f"k{i}" for i in range(CHUNK_ITEMS)] + [f"k{i}" for i in range(2 * CHUNK_ITEMS, 3 * CHUNK_ITEMS)]
    assert contents(seq) == expected
    seq.append("new", item("new"))
    assert contents(seq) == [*expected, "new"]


def test_removing_everything_then_appending_again() -> None:
    seq = filled(CHUNK_ITEMS + 2)
    for i in range(CHUNK_ITEMS + 2):
        seq.remove(f"k{i}")
    assert list(seq.parts()) == []

    seq.append("a", item("a"))
    seq.append("k0", item("k0"))

    assert contents(seq) == ["a", "k0"]


def test_remove_of_an_unknown_key_raises_key_error() -> None:
    seq = filled(2)

    with pytest.raises(KeyError):
        seq.remove("nope")
    with pytest.raises(KeyError):
        seq.update("nope", b"1")
    assert contents(seq) == ["k0", "k1"]


@pytest.mark.parametrize("chunk_items", [1, 2, 3, 7])
def test_sequence_matches_a_plain_list_under_random_changes(monkeypatch: pytest.MonkeyPatch, chunk_items: int) -> None:
    monkeypatch.setattr(sequence, "CHUNK_ITEMS", chunk_items)
    rng = random.Random(chunk_items)
    seq = EncodedSequence()
    ref: dict[str, bytes] = {}
    for step in range(3000):
        roll = rng.random()
        key = f"k{rng.randrange(60)}"
        if roll < 0.45:
            data = item(f"{key}@{step}")
            seq.append(key, data)
            ref.pop(key, None)
            ref[key] = data
        elif roll < 0.7 and key in ref:
            data = item(f"{key}#{step}")
            seq.update(key, data)
            ref[key] = data
        elif key in ref:
            seq.remove(key)
            del ref[key]
        assert b"".join(seq.parts()) == b",".join(ref.values())
        assert len(seq) == len(ref)
        slots = [seq.slot(k) for k in ref]
        assert slots == sorted(slots)


def test_state_encode_reuses_unchanged_job_chunks() -> None:
    state = empty_state(policy=POLICY)
    ids = push(state, "q", list(range(3 * CHUNK_ITEMS)))
    before = state.encode(seq=1, writer="w", now=T0)
    state.encoded(seq=1, writer="w")
    # Header, '"dead":[' opener, no dead parts, '"jobs":[' opener, 3 chunks with 2 separators, closer.
    assert len(before) == 1 + 1 + 1 + 5 + 1
    jobs_before = before[3:-1]

    c = transitions.claim(state, claim_op("w", ["q"], policy=POLICY), at(1))[0]  # changes ids[0], in chunk 0
    after = state.encode(seq=2, writer="w", now=at(1))
    jobs_after = after[3:-1]

    assert c.id == ids[0]
    assert jobs_after[0] is not jobs_before[0]
    assert jobs_after[2] is jobs_before[2]
    assert jobs_after[4] is jobs_before[4]
    assert b"".join(jobs_after) != b"".join(jobs_before)
    doc = json.loads(b"".join(after))
    assert [j["id"] for j in doc["jobs"]] == ids
    assert doc["jobs"][0]["status"] == "running"


def _job_parts(parts: list[bytes]) -> list[bytes]:
    """The parts that hold the jobs (after the dead letters and the dedup window)."""
    return parts[parts.index(b'],"jobs":[') + 1 : -1]


def test_state_encode_after_completing_a_middle_job_reuses_the_outer_chunks() -> None:
    state = empty_state(policy=POLICY)
    ids = push(state, "q", list(range(3 * CHUNK_ITEMS)))
    jobs_before = _job_parts(state.encode(seq=1, writer="w", now=T0))

    transitions.purge(state, purge_op([ids[CHUNK_ITEMS + 5]]), T0)
    jobs_after = _job_parts(state.encode(seq=2, writer="w", now=T0))

    assert jobs_after[0] is jobs_before[0]
    assert jobs_after[4] is jobs_before[4]
    assert jobs_after[2] is not jobs_before[2]
    assert ids[CHUNK_ITEMS + 5].encode() not in jobs_after[2]


# -- parse errors ----------------------------------------------------------------------------------


def assert_refused(data: bytes, *words: str) -> DocumentError:
    with pytest.raises(DocumentError) as info:
        parse_document(KEY, data, policy=POLICY)
    exc = info.value
    message = str(exc)
    assert isinstance(exc, EngineError)
    assert exc.code == "document_error"
    assert exc.key == KEY
    assert message.startswith(KEY)
    assert "refusing to overwrite" in message
    for word in words:
        assert word in exc.problem, (word, exc.problem)
    return exc


@pytest.mark.parametrize("data", [b"{nope", b"", b"   ", b'{"format": 1,', b"\xff\xfe", b"NaN"])
def test_parse_refuses_bytes_that_are_not_json(data: bytes) -> None:
    assert_refused(data, "not valid JSON")


@pytest.mark.parametrize("data", [b"[]", b'"x"', b"1", b"null", b"true", b"[1, 2]"])
def test_parse_refuses_json_that_is_not_an_object(data: bytes) -> None:
    assert_refused(data, "not a queueadmin document", "format")


def test_parse_refuses_a_foreign_document_without_format() -> None:
    assert_refused(b'{"hello": "world"}', "not a queueadmin document", "'format'")


@pytest.mark.parametrize("version", [4, 0, -1, "1", None, [1], 1.5])
def test_parse_refuses_an_unknown_format_version(version: Any) -> None:
    doc = base_doc()
    doc["format"] = version

    assert_refused(orjson.dumps(doc), "unsupported format version", repr(version))


def test_parse_refuses_format_true() -> None:
    doc = base_doc()
    doc["format"] = True

    assert_refused(orjson.dumps(doc), "unsupported format version")


def _mutate(path: list[Any], value: Any = ..., *, delete: bool = False) -> Callable[[dict[str, Any]], None]:
    def apply(doc: dict[str, Any]) -> None:
        target: Any = doc
        for part in path[:-1]:
            target = target[part]
        if delete:
            del target[path[-1]]
        else:
            target[path[-1]] = value

    return apply


BAD_DOCUMENTS: list[tuple[str, Callable[[dict[str, Any]], None], tuple[str, ...]]] = [
    ("missing seq", _mutate(["seq"], delete=True), ("missing field 'seq'",)),
    ("negative seq", _mutate(["seq"], -1), ("seq", ">= 0", "-1")),
    ("string seq", _mutate(["seq"], "5"), ("seq", "'5'")),
    ("bool seq", _mutate(["seq"], True), ("seq", "True")),
    ("float seq", _mutate(["seq"], 1.5), ("seq", "1.5")),
    ("empty writer", _mutate(["writer"], ""), ("writer", "non-empty string")),
    ("missing jobs", _mutate(["jobs"], delete=True), ("missing field 'jobs'",)),
    ("jobs not a list", _mutate(["jobs"], {"a": 1}), ("jobs", "expected a list")),
    ("jobs null", _mutate(["jobs"], None), ("jobs", "expected a list")),
    ("missing dead", _mutate(["dead"], delete=True), ("missing field 'dead'",)),
    ("dead not a list", _mutate(["dead"], "x"), ("dead", "expected a list")),
    ("missing queues", _mutate(["queues"], delete=True), ("missing field 'queues'",)),
    ("queues not an object", _mutate(["queues"], []), ("queues", "expected an object")),
    ("counters not an object", _mutate(["queues", "emails"], 3), ("queues.emails", "expected an object")),
    ("counter missing", _mutate(["queues", "emails", "pushed"], delete=True), ("queues.emails", "'pushed'")),
    ("counter negative", _mutate(["queues", "emails", "failed"], -2), ("queues.emails.failed", "-2")),
    ("broker not an object", _mutate(["broker"], 5), ("broker", "expected an object")),
    ("broker epoch negative", _mutate(["broker", "epoch"], -1), ("broker.epoch",)),
    ("broker id empty", _mutate(["broker", "id"], ""), ("broker.id",)),
    ("recent commit not an object", _mutate(["recent_commits"], [1]), ("recent_commits[0]", "expected an object")),
    ("recent commit bad seq", _mutate(["recent_commits"], [{"writer": "w", "seq": "x"}]), ("recent_commits[0].seq",)),
    ("job not an object", _mutate(["jobs", 1], "job"), ("jobs[1]", "expected an object")),
    ("job missing id", _mutate(["jobs", 1, "id"], delete=True), ("jobs[1]", "missing field 'id'")),
    ("job empty id", _mutate(["jobs", 1, "id"], ""), ("jobs[1].id", "non-empty string")),
    ("job id not a string", _mutate(["jobs", 1, "id"], 7), ("jobs[1].id", "7")),
    ("job missing queue", _mutate(["jobs", 1, "queue"], delete=True), ("jobs[1]", "'queue'")),
    ("job missing payload", _mutate(["jobs", 1, "payload"], delete=True), ("jobs[1]", "'payload'")),
    ("job missing status", _mutate(["jobs", 1, "status"], delete=True), ("jobs[1]", "'status'")),
    ("job bad status", _mutate(["jobs", 1, "status"], "done"), ("jobs[1].status", "'done'")),
    ("job dead status", _mutate(["jobs", 1, "status"], "dead"), ("jobs[1].status", "'dead'")),
    ("running job without lease", _mutate(["jobs", 0, "lease"], None), ("jobs[0]", "running job needs a lease")),
    ("running job lease missing", _mutate(["jobs", 0, "lease"], delete=True), ("jobs[0]", "lease")),
    (
        "pending job with lease",
        _mutate(
            ["jobs", 1, "lease"],
            {
                "worker": "w",
                "token": "t",
                "claimed_at": "2025-01-01T00:00:00Z",
                "heartbeat_at": "2025-01-01T00:00:00Z",
                "expires_at": "2025-01-01T00:01:00Z",
                "seconds": 60,
            },
        ),
        ("jobs[1]", "pending job must not have one"),
    ),
    ("lease not an object", _mutate(["jobs", 0, "lease"], "tok"), ("jobs[0].lease", "expected an object")),
    ("lease missing token", _mutate(["jobs", 0, "lease", "token"], delete=True), ("jobs[0].lease", "'token'")),
    ("lease zero seconds", _mutate(["jobs", 0, "lease", "seconds"], 0), ("jobs[0].lease.seconds", "positive")),
    ("lease bad expiry", _mutate(["jobs", 0, "lease", "expires_at"], "soon"), ("jobs[0].lease.expires_at", "'soon'")),
    ("negative attempts", _mutate(["jobs", 1, "attempts"], -1), ("jobs[1].attempts", "-1")),
    ("missing attempts", _mutate(["jobs", 1, "attempts"], delete=True), ("jobs[1]", "'attempts'")),
    ("zero max_attempts", _mutate(["jobs", 1, "max_attempts"], 0), ("jobs[1].max_attempts", ">= 1")),
    ("bad timestamp", _mutate(["jobs", 1, "enqueued_at"], "yesterday"), ("jobs[1].enqueued_at", "ISO 8601")),
    ("number timestamp", _mutate(["jobs", 1, "enqueued_at"], 1700000000), ("jobs[1].enqueued_at", "ISO 8601")),
    (
        "naive timestamp",
        _mutate(["jobs", 1, "enqueued_at"], "2025-03-01T09:30:00"),
        ("jobs[1].enqueued_at", "no timezone"),
    ),
    (
        "naive not_before",
        _mutate(["jobs", 1, "not_before"], "2025-03-01T09:30:00"),
        ("jobs[1].not_before", "no timezone"),
    ),
    (
        "naive lease time",
        _mutate(["jobs", 0, "lease", "claimed_at"], "2025-03-01 09:30"),
        ("jobs[0].lease.claimed_at", "no timezone"),
    ),
    ("last_error not a string", _mutate(["jobs", 1, "last_error"], 5), ("jobs[1].last_error", "string")),
    ("dead entry not an object", _mutate(["dead", 0], []), ("dead[0]", "expected an object")),
    ("dead entry without error", _mutate(["dead", 0, "error"], delete=True), ("dead[0]", "missing field 'error'")),
    ("dead error not a string", _mutate(["dead", 0, "error"], None), ("dead[0].error", "string")),
    ("dead entry without died_at", _mutate(["dead", 0, "died_at"], delete=True), ("dead[0]", "'died_at'")),
    (
        "dead entry naive died_at",
        _mutate(["dead", 0, "died_at"], "2025-03-01T09:30:00"),
        ("dead[0].died_at", "no timezone"),
    ),
]


@pytest.mark.parametrize(("name", "mutate", "words"), BAD_DOCUMENTS, ids=[b[0] for b in BAD_DOCUMENTS])
def test_parse_refuses_malformed_document_naming_key_and_problem(
    name: str, mutate: Callable[[dict[str, Any]], None], words: tuple[str, ...]
) -> None:
    doc = base_doc()
    assert parse_dict(doc).jobs  # the base document itself is fine
    mutate(doc)

    assert_refused(orjson.dumps(doc), *words)


def test_parse_refuses_duplicate_job_ids() -> None:
    doc = base_doc()
    doc["jobs"].append(dict(doc["jobs"][1]))
    index = len(doc["jobs"]) - 1

    exc = assert_refused(orjson.dumps(doc), "duplicate job id", repr(doc["jobs"][1]["id"]))

    assert f"jobs[{index}]" in exc.problem


def test_parse_refuses_duplicate_ids_in_the_dead_letters() -> None:
    doc = base_doc()
    doc["dead"].append(dict(doc["dead"][0], error="second copy"))

    assert_refused(orjson.dumps(doc), "duplicate")


def test_parse_refuses_an_id_that_is_both_a_job_and_a_dead_letter() -> None:
    doc = base_doc()
    doc["dead"][0]["id"] = doc["jobs"][1]["id"]

    assert_refused(orjson.dumps(doc), "duplicate")


def test_parse_accepts_optional_fields_missing() -> None:
    doc = base_doc()
    del doc["writer"]
    del doc["written_at"]
    del doc["recent_commits"]
    del doc["broker"]
    for name in ("purged", "dead_dropped"):
        del doc["queues"]["emails"][name]
    for job in doc["jobs"]:
        for name in ("not_before", "last_error"):
            job.pop(name, None)
        if job["status"] == "pending":
            del job["lease"]

    parsed = parse_dict(doc)

    assert parsed.writer is None
    assert parsed.broker == BrokerInfo()
    assert list(parsed.recent) == []
    assert parsed.queues["emails"].purged == 0
    assert all(j.not_before is None for j in parsed.jobs.values())


def test_parse_accepts_z_and_offset_timestamps() -> None:
    doc = base_doc()
    doc["jobs"][1]["enqueued_at"] = "2025-03-01T11:30:00+02:00"
    doc["jobs"][1]["not_before"] = "2025-03-01T09:30:00Z"

    job = parse_dict(doc).jobs[doc["jobs"][1]["id"]]

    assert job.enqueued_at == datetime(2025, 3, 1, 9, 30, tzinfo=UTC)
    assert job.not_before == datetime(2025, 3, 1, 9, 30, tzinfo=UTC)


def test_parse_builds_jobs_from_explicit_documents() -> None:
    doc = {
        "format": 1,
        "seq": 3,
        "queues": {"q": {"pushed": 2, "completed": 0, "failed": 0, "dead": 0}},
        "dead": [],
        "jobs": [
            {
                "id": "a",
                "queue": "q",
                "payload": {"x": 1},
                "status": "running",
                "attempts": 1,
                "max_attempts": 3,
                "enqueued_at": "2025-03-01T09:30:00Z",
                "lease": {
                    "worker": "w",
                    "token": "tok",
                    "claimed_at": "2025-03-01T09:30:01Z",
                    "heartbeat_at": "2025-03-01T09:30:02Z",
                    "expires_at": "2025-03-01T09:30:32Z",
                    "seconds": 30,
                },
            },
            {
                "id": "b",
                "queue": "q",
                "payload": None,
                "status": "pending",
                "attempts": 0,
                "max_attempts": 1,
                "enqueued_at": "2025-03-01T09:30:00Z",
            },
        ],
    }

    state = parse_dict(doc)

    base = datetime(2025, 3, 1, 9, 30, tzinfo=UTC)
    assert state.jobs["a"] == Job(
        id="a",
        queue="q",
        payload=b'{"x":1}',
        status="running",
        attempts=1,
        max_attempts=3,
        enqueued_at=base,
        lease=Lease(
            worker="w",
            token="tok",
            claimed_at=base + timedelta(seconds=1),
            heartbeat_at=base + timedelta(seconds=2),
            expires_at=base + timedelta(seconds=32),
            seconds=30.0,
        ),
    )
    assert state.jobs["b"].payload == b"null"
    assert state.seq == 3
    transitions.complete(state, complete_op("a", "tok"), base)
    assert state.queues["q"].completed == 1


def test_format_2_leaves_null_and_empty_job_fields_out_and_parses_them_back() -> None:
    """Format 2 writes a job's not_before, lease and last_error only when set,
    and its history only when it has one (55 bytes of a pushed job's ~430);
    parsing gives back the same jobs. Format 1 keeps every field."""
    from engine.transitions import apply_batch

    def jobs_of(state: QueueState) -> dict[str, dict[str, Any]]:
        return {job["id"]: job for job in orjson.loads(encode(state))["jobs"]}

    policy = Policy(max_attempts=3, segment_jobs=10, head_jobs=20, refill_below=10)
    state = empty_state(policy=policy)
    apply_batch(state, [], T0)  # format 2 from the first commit
    plain, failed, running = push(state, "q", ["plain", "failed", "running"])
    (later,) = push(state, "q", ["later"], delay_seconds=60)
    first = claim(state, "q", max_jobs=2)
    assert [c.id for c in first] == [plain, failed]
    fail(state, first[1], retry=30)  # back to pending, delayed, with its error and a history
    transitions.complete(state, complete_op(plain, first[0].lease), T0)
    claim(state, "q")  # running: the only one due

    jobs = jobs_of(state)
    optional = {"not_before", "lease", "last_error", "history"}
    assert plain not in jobs  # completed
    assert {"not_before"} == optional & set(jobs[later])
    assert {"not_before", "last_error", "history"} == optional & set(jobs[failed])
    assert {"lease"} == optional & set(jobs[running])
    parsed = parse_document(KEY, encode(state), policy=policy)
    assert parsed.jobs == state.jobs and parsed.format == state.format == 2

    fresh = empty_state(policy=policy)
    apply_batch(fresh, [], T0)
    (new,) = push(fresh, "q", ["new"])
    assert optional.isdisjoint(jobs_of(fresh)[new])
    assert parse_document(KEY, encode(fresh), policy=policy).jobs == fresh.jobs

    one = empty_state(policy=POLICY)  # format 1
    (old,) = push(one, "q", ["old"])
    assert optional <= set(jobs_of(one)[old])
    assert jobs_of(one)[old]["lease"] is None and jobs_of(one)[old]["history"] == []
