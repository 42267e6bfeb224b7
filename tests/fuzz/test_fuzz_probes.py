"""Fuzzing the health probes (``/livez``, ``/readyz``; queueadmin/probes.py)
through the real ASGI application: any method, Host, headers, query string
and body. Each call gets exactly one JSON answer: 200, 503 with a documented
reason (``/readyz`` only) or 405, never a 5xx of another kind; ``HEAD``
carries no body; and a probe never changes the document."""

from __future__ import annotations

import orjson
from hypothesis import given
from hypothesis import strategies as st

from tests.fuzz.asgi_driver import call
from tests.fuzz.checks import stored
from tests.fuzz.nodes import Nodes

# The reasons docs/api.md documents for a 503 from /readyz.
REASONS = {"stopped", "starting", "document_missing", "document_unreadable", "store_unreachable"}
methods = st.sampled_from(["GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "TRACE", "get", "BREW"])
header_names = st.sampled_from(["authorization", "content-type", "x-forwarded-for", "cookie", "accept", "origin"])
header_values = st.text(st.characters(min_codepoint=32, max_codepoint=255), max_size=60)


@given(
    path=st.sampled_from(["/livez", "/readyz"]),
    query=st.one_of(st.just(""), st.text(st.characters(min_codepoint=33, max_codepoint=126), max_size=30)),
    method=methods,
    host=st.one_of(st.none(), st.sampled_from(["10.0.0.7:8000", "evil.example", "", "[::1]:8000", "a" * 300])),
    headers=st.dictionaries(header_names, header_values, max_size=4),
    body=st.binary(max_size=200),
)
def test_probes_answer_once_in_json_and_change_nothing(
    nodes: Nodes, path: str, query: str, method: str, host: str | None, headers: dict[str, str], body: bytes,
) -> None:
    with nodes.fresh() as broker:
        before = stored(broker)
        target = f"{path}?{query.replace('#', '')}" if query else path
        answer = call(method, target, body, headers=headers, host=host)
        what = f"{method} {target}"
        assert answer.starts == 1, f"{what}: {answer.starts} answers"
        assert answer.content_type.startswith("application/json"), f"{what}: {answer.content_type}"
        if method not in ("GET", "HEAD"):
            assert answer.status == 405, f"{what}: {answer.status}"
            assert orjson.loads(answer.body)["error"] == "method_not_allowed"
        else:
            assert answer.status in ((200,) if path == "/livez" else (200, 503)), f"{what}: {answer.status}"
            if method == "HEAD":
                assert answer.body == b"", f"{what}: a body {answer.body[:80]!r}"
            else:
                data = orjson.loads(answer.body)
                if path == "/readyz" and answer.status == 503:
                    assert data["reason"] in REASONS and data["message"], data
        assert stored(broker) == before, f"{what} changed the document"
