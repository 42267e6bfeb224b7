"""Hypothesis strategies for hostile input: JSON text that Python's own
encoder would refuse to write, and the ids, names and numbers a careless or
hostile client sends.

JSON bodies are built as trees and written by :func:`json_text`, not by
``json.dumps``: it escapes lone surrogates (``"\\ud800"``) as JSON allows,
and writes :class:`RawNumber` leaves verbatim, so bodies can carry numbers
no Python float holds (``1e400``) or integers beyond 64 bits.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from hypothesis import strategies as st

# orjson refuses to encode more than 254 levels of nesting; the interesting
# depths sit on both sides of that limit, and of the +1..+3 levels a payload
# gains inside a job, a claim answer or the document.
DEPTH_EDGES = (1, 2, 100, 250, 251, 252, 253, 254, 255, 256, 300)


@dataclass(frozen=True, slots=True)
class RawNumber:
    """A number written into JSON text exactly as ``text``."""

    text: str


def json_text(value: Any) -> str:
    """``value`` as JSON text (ASCII; lone surrogates escaped, RawNumber verbatim).

    Iterative, so nesting of any depth is written without recursion.
    """
    out: list[str] = []
    stack: list[Any] = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, _Token | RawNumber):
            out.append(item.text)
        elif isinstance(item, dict):
            out.append("{")
            stack.append(_Token("}"))
            entries = list(item.items())
            for i, (key, val) in enumerate(reversed(entries)):
                stack.append(val)
                stack.append(_Token(json.dumps(str(key)) + ":"))
                if i < len(entries) - 1:
                    stack.append(_Token(","))
        elif isinstance(item, list | tuple):
            out.append("[")
            stack.append(_Token("]"))
            for i, val in enumerate(reversed(item)):
                stack.append(val)
                if i < len(item) - 1:
                    stack.append(_Token(","))
        else:
            # json.dumps escapes lone surrogates with ensure_ascii (the default);
            # allow_nan writes NaN/Infinity tokens, which are not JSON: also worth sending.
            out.append(json.dumps(item))
    return "".join(out)


@dataclass(frozen=True, slots=True)
class _Token:
    text: str


def nested(depth: int, leaf: Any = 1, *, kind: str = "list") -> Any:
    """``leaf`` wrapped in ``depth`` levels of arrays (or objects)."""
    value = leaf
    for _ in range(depth):
        value = [value] if kind == "list" else {"k": value}
    return value


# Text with every kind of character, lone surrogates included (category Cs).
any_text = st.text(st.characters(), max_size=30)
surrogate = st.sampled_from(["\ud800", "\udfff", "\udc00", "a\ud83d", "\ud83d\ude00"[::-1]])
hostile_text = st.one_of(
    any_text,
    surrogate,
    st.builds(lambda a, s, b: a + s + b, any_text, surrogate, any_text),
    st.sampled_from(["", " ", "\x00", "\n", "null", "é", "💥", "a" * 201, "x" * 5000]),
)

huge_numbers = st.one_of(
    st.sampled_from([RawNumber(t) for t in (
        "1e400", "-1e400", "1e-400", "18446744073709551616", "-9223372036854775809", "9223372036854775807",
        "123456789012345678901234567890", "1.0e309", "0.0000000000000000000000001", "-0", "1E2", "4.9e-324",
    )]),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False),
)

json_leaves = st.one_of(st.none(), st.booleans(), huge_numbers, hostile_text)


def deep_values(leaves: st.SearchStrategy[Any] = json_leaves) -> st.SearchStrategy[Any]:
    """A value nested to one of the interesting depths."""
    return st.builds(
        nested,
        st.one_of(st.integers(min_value=249, max_value=256), st.sampled_from(DEPTH_EDGES),
                  st.integers(min_value=240, max_value=300)),
        leaves,
        kind=st.sampled_from(["list", "dict"]),
    )


json_values = st.one_of(
    st.recursive(
        json_leaves,
        lambda children: st.one_of(
            st.lists(children, max_size=4),
            st.dictionaries(hostile_text, children, max_size=4),
        ),
        max_leaves=12,
    ),
    deep_values(),
)

# Ids: what the engine allows, what a URL path cannot carry as it is, and junk.
odd_ids = st.one_of(
    st.sampled_from([".", "..", "...", "", "a/b", "/", "%2e", "%2E%2E", "a%2fb", "a?b", "a#b", " ", "a b",
                     "é", "💥", "\ud800", "x" * 200, "x" * 201, "-", "_", ":", "a.", ".a", "a..b", "A:B-c_d.e"]),
    st.from_regex(r"[A-Za-z0-9_.:-]{1,12}", fullmatch=True),
    hostile_text,
)
# Ids a URL path may not carry as they are: dot segments, which every client
# following RFC 3986 removes, next to ids that merely look like them.
path_ids = st.one_of(st.sampled_from([".", "..", "...", "a.", ".a", "a..b", "-", ":", "_"]),
                     st.from_regex(r"[.a]{1,3}", fullmatch=True))
good_ids = st.from_regex(r"[A-Za-z0-9_:-][A-Za-z0-9_.:-]{0,30}", fullmatch=True)
queue_names = st.one_of(
    st.just("q"),
    st.from_regex(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,20}", fullmatch=True),
    st.sampled_from(["", ".", "..", "-q", "q/1", "q" * 100, "q" * 101, "é", "\ud800", " q"]),
    hostile_text,
)
# Values of the wrong type for any field.
wrong_types = st.one_of(st.none(), st.booleans(), huge_numbers, st.lists(st.integers(), max_size=2),
                        st.dictionaries(st.text(max_size=3), st.integers(), max_size=2), hostile_text)
numbers = st.one_of(huge_numbers, st.integers(min_value=-5, max_value=2000),
                    st.floats(min_value=-1, max_value=1e6), wrong_types)
