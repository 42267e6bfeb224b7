"""How task code reaches the broker and the result store.

In the serving process (daphne), whose embedded broker leads, operations go
straight to it: no HTTP, no token. Anywhere else (a shell, a worker, another
web process, a standby node) they go over HTTP through
:class:`engine.BrokerClient`, which needs the API token. Results are read and
written in the queue's store directly.
"""

from __future__ import annotations

import threading
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from asgiref.sync import sync_to_async
from django.core.exceptions import ImproperlyConfigured

from engine import Broker, BrokerClient, NotLeader, ObjectStore
from engine.ops import Operation, get_job_op
from queueadmin import config, runtime

_lock = threading.Lock()
_stores: dict[str, ObjectStore] = {}
# Django builds a backend per thread; they share one pooled (thread-safe) client.
_clients: dict[tuple[tuple[str, ...], str, str], BrokerClient] = {}


def shared_store(url: str) -> ObjectStore:
    """One store per URL for this process (opening one does no I/O except
    creating a local folder). The embedded broker's own store when it serves
    ``url``, so a ``memory://`` broker and its results share one store."""
    broker = runtime.running_broker()
    if broker is not None and url == config.store_url():
        return broker.store
    with _lock:
        store = _stores.get(url)
        if store is None:
            store = _stores[url] = config.open_store_at(url)
        return store


def default_results_store() -> ObjectStore:
    """The store that holds results by default: the one at ``QUEUE_STORE_URL``."""
    return shared_store(config.store_url())


class BrokerLink:
    """One backend's way to the broker: in-process or HTTP, chosen per call.

    Built with no I/O; the HTTP client and the store are made on first use.
    ``brokers``: node URLs (none: the leader named in the document at the
    store); ``token``: the API token (None: ``QUEUE_API_TOKEN``);
    ``store_url``: the queue's store (None: ``QUEUE_STORE_URL``).
    """

    def __init__(self, *, brokers: Sequence[str], token: str | None, store_url: str | None) -> None:
        self.brokers = tuple(brokers)
        self._token = token
        self._store_url = store_url

    @property
    def token(self) -> str | None:
        return self._token or config.api_token()

    @property
    def store_url(self) -> str:
        return self._store_url or config.store_url()

    def store(self) -> ObjectStore:
        """The queue's store, where results live."""
        return shared_store(self.store_url)

    def _key(self) -> tuple[tuple[str, ...], str, str]:
        token = self.token
        if not token:
            raise ImproperlyConfigured(
                "the tasks backend needs the broker API token to reach the broker over HTTP: set "
                "QUEUE_API_TOKEN or OPTIONS['TOKEN'] in TASKS"
            )
        return self.brokers, token, self.store_url

    def http(self) -> BrokerClient:
        """The HTTP client, one per process for the same brokers, token and
        store. Raises ImproperlyConfigured without a token."""
        key = self._key()
        store = None if self.brokers else self.store()  # only read, to find the leader
        with _lock:
            client = _clients.get(key)
            if client is None:
                client = _clients[key] = config.broker_client(self.brokers, token=key[1], store=store)
            return client

    def close(self) -> None:
        """Close this link's HTTP client (the next call makes a new one)."""
        with _lock:
            client = _clients.pop(self._key(), None) if self.token else None
        if client is not None:
            client.close()

    @staticmethod
    def _embedded() -> Broker | None:
        broker = runtime.running_broker()
        return broker if broker is not None and broker.role == "leader" else None

    def execute(self, op: Operation) -> Any:
        """Commit ``op`` (or read, for GetJob): through this process's leading
        broker, else over HTTP. Raises the engine's errors."""
        return self._run(lambda broker: broker.execute(op), op)

    async def aexecute(self, op: Operation) -> Any:
        """Like :meth:`execute`, without blocking the event loop: the embedded
        broker's committer is awaited; HTTP runs in a worker thread."""
        return await self._arun(lambda broker: broker.aexecute(op), op)

    def get_job(self, job_id: str) -> dict[str, Any]:
        """The job (``Broker.get_job``: in format 2 also one pending in a
        segment object), through this process's leading broker, else over
        HTTP, whose leader looks the same way. Raises JobNotFound."""
        job: dict[str, Any] = self._run(lambda broker: broker.get_job(job_id), get_job_op(job_id))
        return job

    async def aget_job(self, job_id: str) -> dict[str, Any]:
        """Like :meth:`get_job`, without blocking the event loop."""
        job: dict[str, Any] = await self._arun(lambda broker: broker.aget_job(job_id), get_job_op(job_id))
        return job

    def _run(self, local: Callable[[Broker], Any], op: Operation) -> Any:
        """``local(broker)`` on this process's leading broker, else ``op`` over HTTP."""
        broker = self._embedded()
        if broker is not None:
            try:
                return local(broker)
            except NotLeader:
                pass  # it stepped down just now: the new leader is reached over HTTP
        return self.http().execute(op)

    async def _arun(self, local: Callable[[Broker], Awaitable[Any]], op: Operation) -> Any:
        """Like :meth:`_run`, awaiting ``local``; HTTP runs in a worker thread."""
        broker = self._embedded()
        if broker is not None:
            try:
                return await local(broker)
            except NotLeader:
                pass
        return await sync_to_async(self.http().execute, thread_sensitive=False)(op)
