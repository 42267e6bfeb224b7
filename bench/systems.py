"""The systems under test, each owning a fresh store for exactly one run.

* ``group`` — :class:`engine.GroupCommitter`; submitters are asyncio tasks.
* ``direct`` — :class:`engine.DirectClient`; submitters are OS threads.
* ``jqueue-broker`` / ``jqueue-direct`` — jqueue 1.0's ``BrokerQueue`` and
  ``DirectQueue``; submitters are asyncio tasks.

Lifecycle: construct (seeds a fresh store), ``start()``, take one
``pusher(i)`` per submitter and call it repeatedly (each call pushes one job),
then ``stop()`` exactly once. ``abort()`` makes every later store
call raise :class:`~bench.stores.RunAborted` (used when an operation timed out).
``writes``/``conflicts`` read the bare MemoryStore's counters, and
``count_jobs()`` the jobs in the final document (to check that every
acknowledged push is there).
"""

from __future__ import annotations

import abc
import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
from jqueue import BrokerQueue, DirectQueue  # type: ignore[import-untyped]

from bench.config import ENGINE_KEY, JQUEUE_KEY, QUEUE, payload, payload_bytes
from bench.seed import Seeds
from bench.stores import AbortableStore, JQueueStorage
from engine import DirectClient, GroupCommitter, LatencyStore, MemoryStore
from engine.ops import push_op


class System(abc.ABC):
    """One system on its own fresh MemoryStore, seeded with ``seed`` (or empty)."""

    name: str

    def __init__(self, *, latency: float, bandwidth: float, key: str, seed: bytes | None) -> None:
        self.latency = latency
        self.bandwidth = bandwidth
        self.key = key
        self.memory = MemoryStore()
        if seed is not None:
            self.memory.put(key, seed, if_none_match=True)
        self.path = ""  # how a push reaches the system, for the report

    @property
    def writes(self) -> int:
        return self.memory.stats.writes

    @property
    def conflicts(self) -> int:
        return self.memory.stats.conflicts

    def count_jobs(self) -> int:
        """Jobs in the stored document (both formats keep a top-level ``jobs`` list); 0 if none."""
        blob = self.memory.get(self.key)
        return 0 if blob is None else len(orjson.loads(blob.data)["jobs"])

    @abc.abstractmethod
    def abort(self) -> None:
        """Make the store refuse every later call (RunAborted)."""


class AsyncSystem(System):
    """A system driven by asyncio tasks on one event loop."""

    @abc.abstractmethod
    async def start(self) -> None: ...

    @abc.abstractmethod
    def pusher(self, submitter: int) -> Callable[[], Awaitable[Any]]:
        """A coroutine function pushing one job for submitter number ``submitter``."""

    @abc.abstractmethod
    async def stop(self, *, clean: bool) -> None:
        """Shut down; ``clean=False`` after a timeout (do not drain)."""


class ThreadSystem(System):
    """A blocking system driven by OS threads."""

    @abc.abstractmethod
    def start(self) -> None: ...

    @abc.abstractmethod
    def pusher(self, submitter: int) -> Callable[[], Any]:
        """A function pushing one job for submitter number ``submitter``."""

    @abc.abstractmethod
    def stop(self, *, clean: bool) -> None: ...


class GroupSystem(AsyncSystem):
    """GroupCommitter over LatencyStore(AbortableStore(MemoryStore))."""

    name = "group"

    def __init__(self, *, latency: float, bandwidth: float, seed: bytes | None) -> None:
        super().__init__(latency=latency, bandwidth=bandwidth, key=ENGINE_KEY, seed=seed)
        self.abortable = AbortableStore(self.memory)
        store = LatencyStore(self.abortable, latency=latency, bandwidth=bandwidth)
        self.committer = GroupCommitter(store, key=ENGINE_KEY)

    async def start(self) -> None:
        await asyncio.to_thread(self.committer.start)

    def pusher(self, submitter: int) -> Callable[[], Awaitable[Any]]:
        committer = self.committer
        job = payload(submitter)
        apush = getattr(committer, "apush", None)
        if apush is not None:  # the public async push, once the engine has one
            self.path = "GroupCommitter.apush"

            async def push_public() -> Any:
                return await apush(QUEUE, [job])

            return push_public
        self.path = "GroupCommitter.aexecute(push_op)"
        policy = committer.policy

        async def push_op_path() -> Any:
            return await committer.aexecute(push_op(QUEUE, [job], policy=policy))

        return push_op_path

    async def stop(self, *, clean: bool) -> None:
        await asyncio.to_thread(self.committer.stop, drain=clean, timeout=30.0)

    def abort(self) -> None:
        self.abortable.abort()


class DirectSystem(ThreadSystem):
    """One DirectClient per submitter thread, over one LatencyStore(AbortableStore(MemoryStore)).

    Each thread gets its own client (its own writer id), like separate
    processes: DirectClient settles a failed put by looking for its writer id
    in the re-read document, so threads sharing one client answer pushes
    whose write another thread won (measured: 123 of 160 acknowledged pushes
    lost with 8 threads).
    """

    name = "direct"

    def __init__(self, *, latency: float, bandwidth: float, seed: bytes | None) -> None:
        super().__init__(latency=latency, bandwidth=bandwidth, key=ENGINE_KEY, seed=seed)
        self.abortable = AbortableStore(self.memory)
        self.store = LatencyStore(self.abortable, latency=latency, bandwidth=bandwidth)
        self.path = "DirectClient.push (one client per thread)"

    def start(self) -> None:
        pass

    def pusher(self, submitter: int) -> Callable[[], Any]:
        client = DirectClient(self.store, key=ENGINE_KEY)
        job = payload(submitter)

        def push() -> Any:
            return client.push(QUEUE, [job])

        return push

    def stop(self, *, clean: bool) -> None:
        pass

    def abort(self) -> None:
        self.abortable.abort()


class JQueueSystem(AsyncSystem):
    """jqueue 1.0 ``BrokerQueue`` (``broker=True``) or ``DirectQueue`` over :class:`JQueueStorage`."""

    def __init__(self, *, latency: float, bandwidth: float, seed: bytes | None, broker: bool) -> None:
        super().__init__(latency=latency, bandwidth=bandwidth, key=JQUEUE_KEY, seed=seed)
        self.name = "jqueue-broker" if broker else "jqueue-direct"
        self.storage = JQueueStorage(self.memory, JQUEUE_KEY, latency=latency, bandwidth=bandwidth)
        self.broker: BrokerQueue | None = None
        self.queue: BrokerQueue | DirectQueue = DirectQueue(self.storage)
        self.is_broker = broker
        self.path = "BrokerQueue.enqueue" if broker else "DirectQueue.enqueue"

    async def start(self) -> None:
        if self.is_broker:
            self.broker = BrokerQueue(self.storage)
            self.queue = await self.broker.__aenter__()

    def pusher(self, submitter: int) -> Callable[[], Awaitable[Any]]:
        queue = self.queue
        data = payload_bytes(submitter)

        async def push() -> Any:
            return await queue.enqueue(QUEUE, data)

        return push

    async def stop(self, *, clean: bool) -> None:
        if self.broker is not None:
            if not clean:
                self.abort()  # the drain then fails fast instead of committing
            await asyncio.wait_for(self.broker.__aexit__(None, None, None), timeout=30.0)
            self.broker = None

    def abort(self) -> None:
        self.storage.abort()


def make_system(name: str, *, latency: float, bandwidth: float, seeds: Seeds) -> System:
    """Build the named system on a fresh store holding the seed document for
    its format; every get and put costs ``latency`` + bytes ÷ ``bandwidth``
    (0: unlimited), for every system alike. Raises ValueError for an unknown name."""
    if name == "group":
        return GroupSystem(latency=latency, bandwidth=bandwidth, seed=seeds.engine())
    if name == "direct":
        return DirectSystem(latency=latency, bandwidth=bandwidth, seed=seeds.engine())
    if name in ("jqueue-broker", "jqueue-direct"):
        return JQueueSystem(latency=latency, bandwidth=bandwidth, seed=seeds.jqueue(), broker=name == "jqueue-broker")
    raise ValueError(f"unknown system {name!r}")
