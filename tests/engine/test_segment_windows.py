"""A window of a segment's jobs decodes to the same jobs as the whole
segment sliced (``engine.segments.decode_segment_window``), for any window,
any job sizes and payloads, and segments written before the ``sizes``
index; and a damaged object is refused, never decoded."""

from __future__ import annotations

from datetime import UTC, datetime

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from engine.errors import SegmentUnreadable
from engine.segments import SegmentRef, decode_segment, decode_segment_window, digest, encode_segment

NOW = datetime(2026, 1, 1, tzinfo=UTC)

# Payloads that contain what a naive splitter would trip on: commas, brackets,
# quotes, the text of the jobs' own keys, unicode.
text = st.text(alphabet=st.sampled_from(list(',[]{}":\\é😀 ajobsid')), max_size=12)
payloads = st.recursive(st.none() | st.integers(-(2**63), 2**63 - 1) | text,
                        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(text, inner, max_size=3),
                        max_leaves=6)


def segment(items: list[object], *, queue: str = 'q,"jobs":[') -> tuple[SegmentRef, bytes]:
    parts = [orjson.dumps({"id": f"j{i}", "pos": 100 + i, "status": "pending", "payload": p})
             for i, p in enumerate(items)]
    data = encode_segment(queue, 100, parts)
    return ref_for(data, len(parts)), data


def ref_for(data: bytes, total: int) -> SegmentRef:
    return SegmentRef(key="queue.json.seg/q/e00000001-p00000000000100-00000000.json", total=total, consumed=0,
                      front=100, last_pos=100 + total - 1, size=len(data), sha256=digest(data),
                      oldest_enqueued_at=NOW, epoch=1, sealed_at=NOW)


@given(items=st.lists(payloads, min_size=1, max_size=30), start=st.integers(-2, 35), count=st.integers(0, 35))
def test_a_window_is_the_whole_segment_sliced(items: list[object], start: int, count: int) -> None:
    ref, data = segment(items)
    whole = decode_segment(ref, data)
    # The window is [start, start + count) clipped to the segment (no index from the end).
    assert decode_segment_window(ref, data, start, count) == whole[max(start, 0):max(start + count, 0)]


def test_a_segment_without_sizes_is_decoded_whole_then_sliced() -> None:
    """Segments sealed before the index was added have no ``sizes``."""
    parts = [orjson.dumps({"id": f"j{i}", "pos": i, "status": "pending"}) for i in range(10)]
    head = orjson.dumps({"format": 2, "kind": "pending", "queue": "q", "first_pos": 0, "count": 10})
    data = b"".join((head[:-1], b',"jobs":[', b",".join(parts), b"]}"))
    ref = ref_for(data, 10)
    assert [job["id"] for job in decode_segment_window(ref, data, 3, 4)] == ["j3", "j4", "j5", "j6"]
    # Clipped like a segment with sizes: no index from the end.
    assert [job["id"] for job in decode_segment_window(ref, data, -2, 3)] == ["j0"]


def test_an_altered_segment_is_refused_whatever_the_window() -> None:
    ref, data = segment(list(range(20)))
    altered = data.replace(b'"j5"', b'"j6"')
    with pytest.raises(SegmentUnreadable, match="SHA-256"):
        decode_segment_window(ref, altered, 0, 2)  # the window does not hold the change: still refused


def test_sizes_that_do_not_describe_the_jobs_are_refused() -> None:
    """A writer's bug, with a hash that matches what it wrote: refuse, do not guess."""
    _, data = segment(list(range(5)))
    head, rest = data.split(b',"jobs":[', 1)
    header = orjson.loads(head + b"}")
    sizes = header["sizes"]
    header["sizes"] = [sizes[0] + 1, sizes[1] - 1, *sizes[2:]]  # the same total, the boundary moved
    data = orjson.dumps(header)[:-1] + b',"jobs":[' + rest
    for start, count in ((0, 1), (1, 1), (1, 3)):  # a window whose edge is the moved boundary
        with pytest.raises(SegmentUnreadable):
            decode_segment_window(ref_for(data, 5), data, start, count)
