"""The HTTP under :class:`~engine.BrokerClient`: send one request, read its answer whole.

:class:`HttpTransport` is the seam: :class:`PooledTransport` (urllib3, one pool
of kept-alive connections per broker) is what a client uses unless it is
handed another, such as a test's fake that answers from an in-process
application. A transport knows nothing of the API: status codes, JSON and
retries are the client's.

Why urllib3 and not httpx: a worker pays the client's CPU for every job, on
the same cores as the node when they share a machine. Against daphne's
trivial app, one request took ~450 µs of client CPU through ``httpx.Client``
and ~230 µs through urllib3's pool (most of httpx's cost is its own request
and response models, so an httpx transport over urllib3 saved nothing); over
``python -m bench network --runs limit,single --stores file --slots 64``
the worker processes' CPU fell from 92-96 % to 74-79 % of a core and the
one-job drain rose from 870-982 to 997-1,173 jobs/s in seven alternating
rounds (docs/benchmark.md, "The workers' HTTP client").

HTTPS is verified against the system's certificate store (OpenSSL's own
``SSL_CERT_FILE`` and ``SSL_CERT_DIR`` point it elsewhere, e.g. at a
private CA). Connections go straight to the broker: proxy variables
(``HTTP_PROXY``...) are not read, as the engine reads no environment; a
proxy takes a transport of its own.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

import urllib3
from urllib3.exceptions import HTTPError

from engine.errors import BrokerUnavailable

__all__ = ["HttpAnswer", "HttpTransport", "PooledTransport"]


@dataclass(frozen=True, slots=True, kw_only=True)
class HttpAnswer:
    """An HTTP answer, read whole: its status, reason phrase and body."""

    status: int
    reason: str
    content: bytes

    @property
    def ok(self) -> bool:
        """Whether the status is a 2xx."""
        return 200 <= self.status < 300


class HttpTransport(Protocol):
    """Sends one request and reads its answer (does I/O). Thread-safe."""

    def send(
        self, method: str, url: str, content: bytes | None, headers: Mapping[str, str], *,
        connect_timeout: float, read_timeout: float,
    ) -> HttpAnswer:
        """Send ``method url`` with ``headers`` and the body ``content``, and
        return the whole answer, whatever its status. Raises
        BrokerUnavailable when no answer arrives: refused, reset, a broken
        or unverifiable TLS connection, or no connection or byte within its
        timeout (``read_timeout`` is the longest wait for the next byte of
        the answer). Never retries: whether a request may be sent again is
        the caller's to decide."""
        ...

    def close(self) -> None:
        """Close idle connections. Idempotent."""
        ...


class PooledTransport:
    """:class:`HttpTransport` over urllib3: up to ``max_connections`` kept-alive
    connections to each broker. A request that finds them all busy waits up
    to ``pool_timeout`` seconds for one (then BrokerUnavailable), as a
    bounded pool must rather than open connections without limit."""

    def __init__(self, *, max_connections: int, pool_timeout: float) -> None:
        if max_connections < 1 or pool_timeout <= 0:
            raise ValueError("need max_connections >= 1 and pool_timeout > 0")
        self.pool_timeout = pool_timeout
        self._pools = urllib3.PoolManager(maxsize=max_connections, block=True)

    def send(
        self, method: str, url: str, content: bytes | None, headers: Mapping[str, str], *,
        connect_timeout: float, read_timeout: float,
    ) -> HttpAnswer:
        try:
            response = self._pools.urlopen(
                method, url, body=content, headers=dict(headers),
                # No retries and no redirects: urllib3 then raises the error
                # itself, and a redirect (which no broker sends) is an answer.
                retries=False, redirect=False,
                timeout=urllib3.Timeout(connect=connect_timeout, read=read_timeout),
                pool_timeout=self.pool_timeout,
            )
        except (HTTPError, OSError) as exc:  # OSError: a socket error urllib3 did not wrap
            raise BrokerUnavailable(f"{method} {url}: {type(exc).__name__}: {exc}") from exc
        return HttpAnswer(status=response.status, reason=response.reason or "", content=response.data)

    def close(self) -> None:
        self._pools.clear()
