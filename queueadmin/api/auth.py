"""Bearer-token authentication for the broker API.

Producers and workers send ``Authorization: Bearer <token>``. A token is
good if it is the node's ``QUEUE_API_TOKEN``, or an unrevoked
:class:`~queueadmin.models.ApiToken` from the database (made in Django admin).
A node with neither refuses every authenticated call: an open queue is never
the default. A good token's :class:`~queueadmin.api.grants.Grant` says what
it may do; the endpoints check it (:mod:`queueadmin.api.grants`).

The settings token is checked first, in constant time and with no I/O, so
the usual path costs nothing. Database tokens are checked against a
per-process map of digests to grants, re-read at most every :data:`TOKEN_CACHE_SECONDS`,
so a busy API does not query the database per request, and a new or revoked
token takes effect within that time on every node.

:func:`refusal_without_io` makes the same decision before a request's body
is read (:mod:`queueadmin.edge`), whenever it can be made without waiting
for the database: a missing or malformed header, or a token that is neither
the settings token nor among database tokens read less than
:data:`TOKEN_CACHE_SECONDS` ago.
"""

from __future__ import annotations

import hmac
import logging
import time
from collections.abc import Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING

from asgiref.sync import sync_to_async
from django.db import close_old_connections

from queueadmin import config
from queueadmin.api.errors import ApiError
from queueadmin.api.grants import FULL, Grant, parse_patterns

if TYPE_CHECKING:
    from queueadmin.api.http import Request

TOKEN_CACHE_SECONDS = 5.0
RETRY_SECONDS = 1.0

log = logging.getLogger(__name__)

_CHALLENGE = {"WWW-Authenticate": 'Bearer realm="queueadmin"'}


Grants = Mapping[str, Grant]

_NONE: Grants = MappingProxyType({})


class TokenDigests:
    """The digests of the unrevoked database tokens, each with its grant,
    re-read when stale."""

    def __init__(self) -> None:
        self._digests: Grants = _NONE
        self._read_at = float("-inf")

    def fresh(self) -> Grants | None:
        """The grants by digest if they were read less than
        :data:`TOKEN_CACHE_SECONDS` ago, else None (only the database can
        tell then). No I/O."""
        if time.monotonic() - self._read_at < TOKEN_CACHE_SECONDS:
            return self._digests
        return None

    def forget(self) -> None:
        """Re-read on the next check (tests; after an admin change in this process)."""
        self._read_at = float("-inf")

    def clear(self) -> None:
        """Forget the digests read too, so that a failed re-read finds none
        (tests: a test's tokens must not outlive its database)."""
        self._digests = _NONE
        self.forget()

    async def current(self) -> Grants:
        """The grants by digest, re-read if stale. If the database cannot be read, the
        last digests read stay in use (and a read is tried again in a
        second): a database outage must not lock out a fleet of workers."""
        # No lock: requests on different event loops may share this cache,
        # and two that find it stale at once only read the table twice.
        if time.monotonic() - self._read_at >= TOKEN_CACHE_SECONDS:
            try:
                self._digests = await sync_to_async(_read_digests)()
            except Exception as exc:
                log.warning("cannot read the API tokens from the database (%s); using the last ones read", exc)
                self._read_at = time.monotonic() - TOKEN_CACHE_SECONDS + RETRY_SECONDS
            else:
                self._read_at = time.monotonic()
        return self._digests


def _read_digests() -> Grants:
    """The unrevoked tokens' grants by digest. Database I/O: run it on a thread.

    The API is served without Django's request handling
    (:mod:`queueadmin.api.app`), so no ``request_started``/``request_finished``
    signal closes this thread's connection: this function does what they
    would, before and after its query. With ``CONN_MAX_AGE`` 0 (settings.py)
    the connection is closed after each read (at most one read per
    :data:`TOKEN_CACHE_SECONDS`); a broken one is never reused.
    """
    from queueadmin.models import ApiToken  # models load after the app registry

    close_old_connections()
    try:
        rows = ApiToken.objects.filter(revoked_at__isnull=True).values_list(
            "digest", "name", "may_push", "may_work", "queues")
        # A database token's grant keeps its name for the messages of refusals.
        return MappingProxyType({digest: Grant(name=name, may_push=may_push, may_work=may_work,
                                               patterns=parse_patterns(queues))
                                 for digest, name, may_push, may_work, queues in rows})
    finally:
        close_old_connections()


#: The process-wide cache of database token digests and their grants.
digests = TokenDigests()


def _bearer(header: str) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header value, or None."""
    scheme, _, token = header.partition(" ")
    token = token.strip()
    return token if scheme.lower() == "bearer" and token else None


def _missing() -> ApiError:
    return ApiError("unauthorized", "send the header 'Authorization: Bearer <token>'", headers=_CHALLENGE)


def _settings_token_matches(token: str) -> bool:
    expected = config.api_token()
    # Constant time, so the answer's timing does not reveal how much of a
    # guessed token was right.
    return bool(expected) and hmac.compare_digest(token.encode(), str(expected).encode())


def _refused(known: Grants) -> ApiError:
    if not config.api_token() and not known:
        return ApiError(
            "unauthorized",
            "this node has no API token: set QUEUE_API_TOKEN in the environment of every node, producer and "
            "worker, or make tokens in Django admin (API tokens)",
            headers=_CHALLENGE,
        )
    return ApiError("unauthorized", "wrong token", headers=_CHALLENGE)


def refusal_without_io(header: str | None) -> ApiError | None:
    """The 401 :func:`check_token` would raise for this ``Authorization``
    header value, when that can be known now without I/O; None when the token
    is good or only a fresh read of the database tokens can tell."""
    token = _bearer(header or "")
    if token is None:
        return _missing()
    if _settings_token_matches(token):
        return None
    from queueadmin.models import ApiToken

    known = digests.fresh()
    if known is None or ApiToken.digest_of(token) in known:
        return None
    return _refused(known)


async def check_token(request: Request) -> Grant:
    """The grant of the good token ``request`` carries; else raise ApiError 401.

    No I/O for the settings token, or while the database tokens read last
    are fresh; otherwise one database read on a thread (:class:`TokenDigests`).
    """
    token = _bearer(request.headers.get("authorization", ""))
    if token is None:
        raise _missing()
    if _settings_token_matches(token):
        return FULL
    from queueadmin.models import ApiToken

    known = await digests.current()
    grant = known.get(ApiToken.digest_of(token))
    if grant is not None:
        return grant
    raise _refused(known)
