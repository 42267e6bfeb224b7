"""Bearer-token authentication for the broker API.

Producers and workers send ``Authorization: Bearer <token>``. A token is
good if it is the node's ``QUEUE_API_TOKEN``, or an unrevoked
:class:`~queueadmin.models.ApiToken` from the database (made in Django admin).
A node with neither refuses every authenticated call: an open queue is never
the default.

The settings token is checked first, in constant time and with no I/O, so
the usual path costs nothing. Database tokens are checked against a
per-process set of digests, re-read at most every :data:`TOKEN_CACHE_SECONDS`,
so a busy API does not query the database per request, and a new or revoked
token takes effect within that time on every node.
"""

from __future__ import annotations

import hmac
import logging
import time

from asgiref.sync import sync_to_async
from django.conf import settings
from django.http import HttpRequest

from queueadmin.api.errors import ApiError

TOKEN_CACHE_SECONDS = 5.0
RETRY_SECONDS = 1.0

log = logging.getLogger(__name__)

_CHALLENGE = {"WWW-Authenticate": 'Bearer realm="queueadmin"'}


class TokenDigests:
    """The digests of the unrevoked database tokens, re-read when stale."""

    def __init__(self) -> None:
        self._digests: frozenset[str] = frozenset()
        self._read_at = float("-inf")

    def forget(self) -> None:
        """Re-read on the next check (tests; after an admin change in this process)."""
        self._read_at = float("-inf")

    async def current(self) -> frozenset[str]:
        """The digests, re-read if stale. If the database cannot be read, the
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


def _read_digests() -> frozenset[str]:
    from queueadmin.models import ApiToken  # models load after the app registry

    return frozenset(ApiToken.objects.filter(revoked_at__isnull=True).values_list("digest", flat=True))


#: The process-wide cache of database token digests.
digests = TokenDigests()


async def check_token(request: HttpRequest) -> None:
    """Return if ``request`` carries a good token; else raise ApiError 401."""
    header = request.headers.get("Authorization", "")
    scheme, _, token = header.partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        raise ApiError("unauthorized", "send the header 'Authorization: Bearer <token>'", headers=_CHALLENGE)
    expected: str | None = settings.QUEUE_API_TOKEN
    # Constant time, so the answer's timing does not reveal how much of a
    # guessed token was right.
    if expected and hmac.compare_digest(token.encode(), expected.encode()):
        return
    from queueadmin.models import ApiToken

    known = await digests.current()
    if ApiToken.digest_of(token) in known:
        return
    if not expected and not known:
        raise ApiError(
            "unauthorized",
            "this node has no API token: set QUEUE_API_TOKEN in the environment of every node, producer and "
            "worker, or make tokens in Django admin (API tokens)",
            headers=_CHALLENGE,
        )
    raise ApiError("unauthorized", "wrong token", headers=_CHALLENGE)
