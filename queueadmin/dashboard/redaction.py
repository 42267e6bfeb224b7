"""Payload values under secret-looking keys, hidden from dashboard users
who may not see them.

A job's payload is the producer's JSON, and producers put credentials in it
(an ``api_key`` for the call the job makes, a reset ``token``). Every staff
user with ``view_dashboard`` reads payloads, so by default the dashboard shows
the value of every object key that looks secret as :data:`SUBSTITUTE`, as
Django's error pages do with settings. Superusers and holders of the
``view_payload_secrets`` permission see everything.

A key looks secret when its words (``apiKey``, ``api-key`` and ``API_KEY``
all read ``api_key``) match ``QUEUE_PAYLOAD_SECRET_KEYS``
(:data:`DEFAULT_SECRET_KEYS` when unset), a regular expression searched in
the lower-case, underscore-separated key. The whole value under such a key
is hidden, whatever its type. In payloads only keys are looked at: a secret
in a list, in a positional task argument or inside a string (a URL with a
password) shows, so keep those out of payloads or name them.

Error texts (a job's last error, its attempts' errors, a task's traceback,
a dead-letter group's example) are scanned too (:func:`redact_error`): the
password of a URL (``https://user:…@host``) and the value after a
secret-looking name (``api_key=…``, ``password: …``, ``"token": "…"``,
``Authorization: Bearer …``) are hidden, except on a traceback's lines of
source code. The error signatures that group failures are drawn from the
text so redacted, for everyone, so they can be shown and linked to.

Only what the dashboard shows changes: the queue, the API and workers keep
the payload and the errors as they were sent.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from typing import Any

import orjson

from queueadmin import config

#: What a hidden value shows as (Django's ``SafeExceptionReporterFilter.cleansed_substitute``).
SUBSTITUTE = "********************"
#: The permission that shows hidden values (superusers have it).
PERMISSION = "queueadmin.view_payload_secrets"
#: Searched in a key normalised to lower-case words joined by "_".
DEFAULT_SECRET_KEYS = (
    r"(^|_)(pass(word|wd|phrase)?|pwd|secrets?|tokens?|api_?keys?|access_?keys?|private_?keys?|auth|"
    r"authorization|credentials?|cookies?|session(_?id)?|signature|sig|otp|pin|cvv|cvc|card_?number|ssn|iban)(_|$)"
)

Redactor = Callable[[Any], Any]


@functools.lru_cache(maxsize=8)
def _compiled(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern)


def secret_keys() -> re.Pattern[str]:
    """The compiled ``QUEUE_PAYLOAD_SECRET_KEYS``."""
    return _compiled(config.payload_secret_keys() or DEFAULT_SECRET_KEYS)


def words(key: str) -> str:
    """``key`` as lower-case words joined by "_": ``apiKey``, ``api-key``,
    ``API_KEY`` and ``api key`` all give ``api_key``."""
    spaced = re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", key)
    return "_".join(w for w in re.split(r"[^0-9a-zA-Z]+", spaced) if w).lower()


def is_secret(key: str, pattern: re.Pattern[str] | None = None) -> bool:
    """Whether the value under object key ``key`` is hidden (``pattern``:
    the compiled setting, read when None)."""
    return _is_secret(key, pattern or secret_keys())


# Payloads repeat their keys: a search over 20,000 jobs asks about a few dozen.
@functools.lru_cache(maxsize=4096)
def _is_secret(key: str, pattern: re.Pattern[str]) -> bool:
    return pattern.search(words(key)) is not None


def redact(value: Any, pattern: re.Pattern[str] | None = None) -> Any:
    """A copy of the JSON value ``value`` with every value under a secret key,
    at any depth, replaced by :data:`SUBSTITUTE`. Returns ``value`` itself
    when nothing is hidden (no copy)."""
    pattern = pattern or secret_keys()
    if isinstance(value, dict):
        out = {k: SUBSTITUTE if is_secret(str(k), pattern) else redact(v, pattern) for k, v in value.items()}
        return value if all(out[k] is value[k] for k in value) else out
    if isinstance(value, list):
        items = [redact(v, pattern) for v in value]
        return value if all(a is b for a, b in zip(items, value, strict=True)) else items
    return value


def hides(value: Any) -> bool:
    """Whether :func:`redact` hides anything in ``value``."""
    return redact(value) is not value


def hides_text(text: str) -> bool:
    """Whether :func:`redact_text` hides anything in ``text`` (JSON text, whole or cut)."""
    return redact_text(text) != text


# A JSON string (possibly cut short), or any run of characters up to a
# structural one: the tokens of :func:`redact_text`'s scan.
_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*("|\\?$)|[{}\[\]:,]|[^\s{}\[\]:,"]+|\s+', re.DOTALL)


def redact_text(text: str) -> str:
    """``text``, the start of a JSON document (a finished job's record keeps
    only the first kilobytes of a large payload, cut anywhere), with the
    value of every secret key replaced by :data:`SUBSTITUTE`: the same as
    :func:`redact` on whole JSON, and on a cut one as far as it goes (a value
    cut short is hidden to the end)."""
    pattern = secret_keys()
    out: list[str] = []
    tokens = [m.group(0) for m in _TOKEN.finditer(text)]
    i = 0
    while i < len(tokens):
        token = tokens[i]
        out.append(token)
        i += 1
        if not (token.startswith('"') and len(token) > 1 and token.endswith('"')):
            continue
        j = i
        while j < len(tokens) and tokens[j].isspace():
            j += 1
        if j >= len(tokens) or tokens[j] != ":" or not is_secret(_unquote(token), pattern):
            continue
        out.extend(tokens[i:j + 1])  # the space and the colon
        i = _skip_value(tokens, j + 1, out)
        out.append(f'"{SUBSTITUTE}"')
    return "".join(out)


def _unquote(token: str) -> str:
    try:
        return str(orjson.loads(token))
    except orjson.JSONDecodeError:
        return token[1:-1]


def _skip_value(tokens: list[str], i: int, out: list[str]) -> int:
    """The index after the JSON value that starts at ``tokens[i]`` (space
    before it is kept in ``out``), or the end if it is cut short. A string is
    one token, so brackets inside strings do not count."""
    while i < len(tokens) and tokens[i].isspace():
        out.append(tokens[i])
        i += 1
    if i >= len(tokens) or tokens[i] not in ("{", "["):
        return min(i + 1, len(tokens))  # a scalar: one token
    depth = 0
    while i < len(tokens):
        if tokens[i] in ("{", "["):
            depth += 1
        elif tokens[i] in ("}", "]"):
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    return i


# The password of a URL's user information: scheme://user:PASSWORD@host.
_URL_PASSWORD = re.compile(r"(\b[A-Za-z][A-Za-z0-9+.\-]*://[^\s:/@]*:)([^\s@/]+)(?=@)")
# A name, then = or : (the name may be quoted: "token": ...).
# It starts where a name can (not inside one), so the search does not retry
# at every letter of every word: linear in the line.
_NAME = re.compile(r"""(?<![A-Za-z0-9_\-])(?P<key>[A-Za-z_][A-Za-z0-9_\-]*)["']?[ \t]*[:=][ \t]*""")
# The value after a secret name: quoted (to the closing quote, or the line's
# end), or unquoted: words up to a delimiter, the line's end or the next
# name-value pair (``password=correct horse battery staple user=ada`` hides
# the whole passphrase: a value with spaces in it is still the secret, and
# hiding a word too many is the safe side). An HTTP auth scheme word
# (Bearer, Basic, ...) takes the credentials after it along. Linear: each
# word is matched once, and the look-ahead reads only the next word.
_WORD = r"""[^\s&,;)}\]"']+"""
_VALUE = re.compile(r"""(?P<quote>["'])(?:(?!(?P=quote))[^\\]|\\.)*(?P=quote)?"""
                    r"""|(?:(?:bearer|basic|token|digest|negotiate)[ \t]+)?""" + _WORD
                    + r"""(?:[ \t]+(?![A-Za-z_][A-Za-z0-9_\-]*["']?[ \t]*[:=])""" + _WORD + ")*", re.IGNORECASE)
# A traceback's frame line; the line after it is the frame's source code.
_FRAME = re.compile(r'^\s*File "[^"]*", line \d+')
# How Python's tracebacks indent a frame's source line (its frame line has two spaces).
_SOURCE_INDENT = "    "


def redact_error(text: str, pattern: re.Pattern[str] | None = None) -> str:
    """``text``, an error message or a traceback, with URL passwords and the
    values after secret-looking names (:func:`is_secret`) replaced by
    :data:`SUBSTITUTE` (a quoted value keeps its quotes). A traceback's
    source lines (indented, each right after a ``File "...", line N``
    line) are left as they are: they are the program's code, not the data
    it ran on. A frame without source (``<string>``, a C extension) is
    followed by the next frame or the exception's line, which is not
    indented so, and is scanned."""
    pattern = pattern or secret_keys()
    lines = text.split("\n")
    after_frame = False
    for index, line in enumerate(lines):
        if not (after_frame and line.startswith(_SOURCE_INDENT)):
            if "://" in line:
                line = _URL_PASSWORD.sub(lambda m: m[1] + SUBSTITUTE, line)
            lines[index] = _redact_pairs(line, pattern)
        after_frame = _FRAME.match(line) is not None
    return "\n".join(lines)


def _redact_pairs(line: str, pattern: re.Pattern[str]) -> str:
    """``line`` with the value after each secret name hidden. A name that
    is not secret gives up only itself and its separator, so that a pair
    inside its value (``KeyError: password=…``, ``url=…?api_key=…``) is
    still found."""
    out: list[str] = []
    position = 0
    while (name := _NAME.search(line, position)) is not None:
        out.append(line[position:name.end()])
        position = name.end()
        if not is_secret(name["key"], pattern):
            continue
        value = _VALUE.match(line, position)
        if value is None:
            continue
        quote = value["quote"] or ""
        out.append(f"{quote}{SUBSTITUTE}{quote}")
        position = value.end()
    out.append(line[position:])
    return "".join(out)


def error_for(user: Any, text: str | None) -> str | None:
    """What ``user`` is shown of the error text ``text``: all of it if they
    see secrets, else :func:`redact_error`'s."""
    if not text or sees_secrets(user):
        return text
    return redact_error(text)


def error_as_shown(text: str, redact: Redactor) -> str:
    """The error text ``text`` as it is shown where payloads are shown
    through ``redact`` (:func:`redactor`): secret values hidden when the
    payloads' are."""
    return text if redact is _shown else redact_error(text)


def sees_secrets(user: Any) -> bool:
    """Whether ``user`` sees payloads whole."""
    return bool(getattr(user, "is_authenticated", False) and user.has_perm(PERMISSION))


def for_user(user: Any) -> Redactor:
    """What to show ``user`` of a payload: the identity, or :func:`redact`."""
    return redactor(hidden=not sees_secrets(user))


def redactor(*, hidden: bool) -> Redactor:
    """:func:`redact` if secret values are ``hidden``, with the setting read
    once (a search calls it for every candidate), else the identity."""
    return functools.partial(redact, pattern=secret_keys()) if hidden else _shown


def _shown(value: Any) -> Any:
    return value
