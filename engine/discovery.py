"""Finding and following the leading broker: :class:`LeaderDiscovery`.

A :class:`~engine.http_client.BrokerClient` asks it where to send
(:meth:`LeaderDiscovery.target`) and tells it what it learnt on the way
(:meth:`LeaderDiscovery.follow`): a ``not_leader`` answer naming another
node, or a node that stopped answering.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence

import orjson

from engine.errors import BrokerUnavailable, EngineError, NotLeader
from engine.policy import DOCUMENT_KEY
from engine.stores.base import ObjectStore
from engine.wire import check_url

log = logging.getLogger("engine.http_client")  # where the client has always logged a change of leader

#: Asks the node at a URL for its health: its role, and the leader it names.
AskHealth = Callable[[str], tuple[str, str | None]]


class LeaderDiscovery:
    """Which broker leads, found from candidate URLs and cached until proven wrong.

    Thread-safe: one discovery runs at a time, and the threads that wait for
    it use its answer. The candidates are ``urls`` (already checked by
    :func:`~engine.wire.check_url`) and, if ``store`` is given, the
    ``broker.url`` the document at ``key`` names; the store is only ever
    read. ``ask`` does the health request (network I/O) and raises
    EngineError when a node does not answer.
    """

    def __init__(
        self, urls: Sequence[str], *, ask: AskHealth, store: ObjectStore | None = None, key: str = DOCUMENT_KEY
    ) -> None:
        self.urls = tuple(urls)
        self.store = store
        self.key = key
        self._ask = ask
        self._lock = threading.Lock()  # guards _leader
        self._discovering = threading.Lock()  # one discovery at a time; the others wait for its answer
        self._leader: str | None = None

    @property
    def leader(self) -> str | None:
        """The leader's URL as last found (None until found, or once forgotten). No I/O."""
        return self._leader

    def follow(self, url: str | None, *, forget: str | None) -> None:
        """Switch to ``url``, or forget the leader we had if it was ``forget``. No I/O."""
        with self._lock:
            if url is not None:
                if url != self._leader:
                    log.info("broker leader is now %s", url)
                self._leader = url
            elif forget is not None and self._leader == forget:
                self._leader = None

    def target(self) -> str:
        """The leader's URL: the cached one, or found now by asking the nodes
        (network I/O). Raises NotLeader if nodes answered but none leads, and
        BrokerUnavailable if none answered."""
        leader = self._leader
        if leader is not None:
            return leader
        with self._discovering:
            leader = self._leader  # found by another thread while we waited
            if leader is None:
                leader = self._discover()
                self.follow(leader, forget=None)
            return leader

    def _discover(self) -> str:
        """Ask the known nodes who leads; raises NotLeader or BrokerUnavailable."""
        candidates = list(self.urls)
        problems: list[str] = []
        consulted_store = answered = False
        i = 0
        while True:
            if i == len(candidates):
                if consulted_store or self.store is None:
                    break
                consulted_store = True
                named = self._url_from_store(problems)
                if named is None or named in candidates:
                    break
                candidates.append(named)
            url = candidates[i]
            i += 1
            try:
                role, named = self._ask(url)
            except EngineError as exc:
                problems.append(f"{url}: {exc}")
                continue
            answered = True
            if role == "leader":
                return url
            problems.append(f"{url} is a {role}" + (f" naming {named} as leader" if named else ""))
            if named and named not in candidates:
                candidates.insert(i, named)  # ask the node it names next
        summary = "; ".join(problems) or "no broker URL to try"
        if answered:
            raise NotLeader(None, f"no broker leads right now ({summary})")
        raise BrokerUnavailable(f"no broker could be reached ({summary})")

    def _url_from_store(self, problems: list[str]) -> str | None:
        """The leader's URL as the document names it. Only reads the store."""
        assert self.store is not None
        try:
            blob = self.store.get(self.key)
            broker = orjson.loads(blob.data).get("broker") if blob is not None else None
        except (EngineError, orjson.JSONDecodeError, AttributeError) as exc:
            problems.append(f"store {self.key}: {exc}")
            return None
        named = broker.get("url") if isinstance(broker, dict) else None
        if not isinstance(named, str) or not named:
            problems.append(f"{self.key} names no broker URL (is a broker running, with QUEUE_ADVERTISE_URL set?)")
            return None
        try:
            return check_url(named)
        except ValueError as exc:
            problems.append(f"{self.key}: {exc}")
            return None
